"""MarkdownChunker: sections, anchors, unbreakable units, and the span invariants on odd input."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.markdown import MarkdownChunker
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.sentences import sentence_spans
from unichunk.chunking.slugs import Slugger, github_slug
from unichunk.chunking.tokenizer import TokenCounter

SMALL = ChunkStrategy(name="markdown", chunk_size=128)
COUNTER = TokenCounter()


def chunk(text: str, strategy: ChunkStrategy | None = None) -> list[Chunk]:
    chunks = MarkdownChunker(strategy).chunk(Document(text=text))
    assert_invariants(text, chunks)
    return chunks


def assert_invariants(text: str, chunks: list[Chunk]) -> None:
    covered = [False] * len(text)
    previous = (0, 0)
    for c in chunks:
        assert text[c.start_char : c.end_char] == c.content
        assert (c.start_char, c.end_char) >= previous and c.end_char >= previous[1]
        assert c.token_count == COUNTER.count(c.content)
        previous = (c.start_char, c.end_char)
        covered[c.start_char : c.end_char] = [True] * (c.end_char - c.start_char)
    missed = [i for i, ch in enumerate(text) if not covered[i] and not ch.isspace()]
    assert not missed, f"uncovered characters at {missed[:10]}"


def sentences(n: int, topic: str = "alpha") -> str:
    return " ".join(f"Sentence {i} talks about {topic} and why it matters here." for i in range(n))


NESTED = """Preamble text before any heading.

# Guide

Intro.

## Install **now**

Steps.

### On [Linux](https://example.org)

apt.

## Usage #

Use it.

# Guide

Second top-level with a repeated title.

##### Deep note

still in the second Guide section.
"""


def test_heading_chain_anchor_and_level_on_nested_document() -> None:
    chunks = chunk(NESTED)
    got = [(c.heading_chain, c.metadata.get("anchor"), c.metadata["heading_level"]) for c in chunks]
    assert got == [
        ((), None, 0),
        (("Guide",), "guide", 1),
        (("Guide", "Install **now**"), "install-now", 2),
        (("Guide", "Install **now**", "On [Linux](https://example.org)"), "on-linux", 3),
        (("Guide", "Usage"), "usage", 2),
        (("Guide",), "guide-1", 1),
    ]
    assert chunks[0].content == "Preamble text before any heading."
    assert chunks[-1].content.startswith("# Guide\n\nSecond")
    assert chunks[-1].content.endswith("still in the second Guide section.")  # ##### is not a boundary


def test_every_chunk_stays_inside_one_section() -> None:
    body = "\n\n".join(f"## Part {i}\n\n{sentences(12, f'topic{i}')}" for i in range(5))
    chunks = chunk("# Book\n\n" + body, SMALL)
    assert len(chunks) > 5
    for c in chunks:
        assert len(re.findall(r"^#{1,4} ", c.content, flags=re.M)) <= 1
        part = re.search(r"topic(\d)", c.content)
        if part:
            assert c.heading_chain == ("Book", f"Part {part[1]}")
            assert set(re.findall(r"topic(\d)", c.content)) == {part[1]}


def test_oversize_section_splits_at_sentences_within_the_limit() -> None:
    text = "# Long\n\n" + sentences(60)
    chunks = chunk(text, SMALL)
    assert len(chunks) > 3
    starts = {a for a, _ in sentence_spans(text)} | {0}
    ends = {b for _, b in sentence_spans(text)}
    for c in chunks:
        assert c.token_count <= 128
        assert c.start_char in starts and c.end_char in ends
    assert all(c.heading_chain == ("Long",) for c in chunks)


def test_overlap_repeats_trailing_units() -> None:
    text = "# Long\n\n" + sentences(60)
    chunks = chunk(text, ChunkStrategy(name="markdown", chunk_size=128, chunk_overlap=30))
    for a, b in pairwise(chunks):
        assert b.start_char < a.end_char  # some sentences repeated
        assert b.end_char > a.end_char


def test_code_block_kept_whole() -> None:
    code = "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(8)) + "\n```"
    text = f"# Code\n\n{sentences(8)}\n\n{code}\n\n{sentences(8, 'beta')}"
    chunks = chunk(text, SMALL)
    assert len(chunks) > 1
    assert sum(code in c.content for c in chunks) == 1


def test_oversize_code_block_split_between_lines_only() -> None:
    code = (
        "```\n"
        + "\n".join(f"    result_{i} = function_call(argument_{i}, other)  # note" for i in range(80))
        + "\n```\n"
    )
    text = f"# Big code\n\n{code}"
    chunks = chunk(text, SMALL)
    assert len(chunks) > 3
    for c in chunks:
        assert c.token_count <= 128
        assert c.start_char == 0 or text[c.start_char - 1] == "\n"
        assert c.end_char == len(text) or text[c.end_char] == "\n"
    assert chunks[1].content.startswith("    result_")  # indentation kept: cut at the line start


def test_single_line_longer_than_the_limit_is_split_as_last_resort() -> None:
    text = "```\n" + "x" * 3000 + "\n```"
    chunks = chunk(text, SMALL)
    assert all(c.token_count <= 128 for c in chunks)
    assert "".join(c.content for c in chunks).count("x") == 3000


def test_list_kept_whole_when_it_fits() -> None:
    items = "\n".join(f"- item {i} is short" for i in range(6))
    text = f"# Lists\n\n{sentences(9)}\n\n{items}\n\n{sentences(4, 'gamma')}"
    chunks = chunk(text, SMALL)
    assert len(chunks) > 1
    assert sum(items in c.content for c in chunks) == 1


def test_oversize_list_split_between_items_with_nested_items_kept_with_parent() -> None:
    items = "\n".join(
        f"- parent {i} explains something fairly long about the list\n  - child {i}a detail\n  - child {i}b detail"
        for i in range(20)
    )
    text = f"# Lists\n\n{items}\n"
    chunks = chunk(text, SMALL)
    assert len(chunks) > 2
    for c in chunks:
        assert c.token_count <= 128
        assert c.content.startswith(("- parent", "# Lists\n\n- parent"))
        assert c.content.endswith("b detail")
        for i in re.findall(r"parent (\d+)", c.content):
            assert f"child {i}a" in c.content and f"child {i}b" in c.content


def test_table_split_between_rows() -> None:
    rows = "\n".join(f"| row {i} | value {i} | more text {i} |" for i in range(60))
    text = f"# Table\n\n| a | b | c |\n|---|---|---|\n{rows}\n"
    chunks = chunk(text, SMALL)
    assert len(chunks) > 2
    for c in chunks:
        assert c.content.startswith(("| ", "# Table")) and c.content.rstrip().endswith("|")
        assert not c.content.startswith("|---")
    assert "| a | b | c |\n|---|---|---|\n| row 0" in chunks[0].content


@pytest.mark.parametrize(
    "equation",
    ["$$\n\\int_0^1 x^2 \\, dx = \\frac{1}{3}. Then\nmore = terms\n$$", "\\[\na = b. C = d\n\\]"],
)
def test_display_equation_kept_with_the_sentence_before_it(equation: str) -> None:
    lead = "The integral is computed as follows."
    text = f"# Math\n\n{sentences(9)}\n{lead}\n{equation}\nAfter the equation we continue. {sentences(6, 'omega')}"
    chunks = chunk(text, SMALL)
    holders = [c for c in chunks if "= " in c.content and ("\\int" in c.content or "a = b" in c.content)]
    assert len(holders) >= 1
    for c in holders:
        assert equation in c.content and lead in c.content


def test_inline_display_equation_is_not_cut_at_its_inner_period() -> None:
    text = "# Math\n\n" + sentences(9) + " We get $$x = 1. Y = 2$$ as shown. " + sentences(9, "omega")
    chunks = chunk(text, SMALL)
    assert any("$$x = 1. Y = 2$$" in c.content for c in chunks)
    assert not any(c.content.startswith("Y = 2") for c in chunks)


@pytest.mark.parametrize("fence", ["```", "~~~~"])
def test_unclosed_fence_runs_to_the_end_and_hides_headings(fence: str) -> None:
    text = f"# Title\n\nText.\n\n{fence}bash\n# comment, not a heading\necho hi\n\n## also not a heading\n"
    chunks = chunk(text)
    assert len(chunks) == 1
    assert chunks[0].heading_chain == ("Title",)


def test_headings_inside_closed_fences_are_ignored() -> None:
    text = "# Real\n\n```md\n# Fake\n## Fake too\n```\n\n~~~\n# Fake three\n~~~\n\n## Second\n\nok"
    chains = [c.heading_chain for c in chunk(text)]
    assert chains == [("Real",), ("Real", "Second")]


def test_crlf_line_endings() -> None:
    text = "# One\r\n\r\nFirst part.\r\n\r\n## Two ##\r\n\r\n```\r\n# no\r\n```\r\n\r\nSecond\r\n======\r\n\r\nEnd.\r\n"
    chunks = chunk(text)
    assert [c.heading_chain for c in chunks] == [("One",), ("One", "Two"), ("Second",)]
    assert chunks[0].content == "# One\r\n\r\nFirst part."
    assert [c.metadata["anchor"] for c in chunks] == ["one", "two", "second"]


def test_setext_headings() -> None:
    chunks = chunk("Title\n=====\n\nbody\n\nSub\n---\n\nmore\n\n---\n\nafter rule")
    assert [(c.heading_chain, c.metadata["heading_level"]) for c in chunks] == [
        (("Title",), 1),
        (("Title", "Sub"), 2),
    ]
    assert chunks[-1].content.endswith("after rule")


@pytest.mark.parametrize(
    ("heading", "number"),
    [
        ("2.1 Methods", "2.1"),
        ("3.2.1. Details", "3.2.1"),
        ("4. Results", "4"),
        ("2024 Report", None),
        ("Intro", None),
    ],
)
def test_section_numbering(heading: str, number: str | None) -> None:
    [c] = chunk(f"## {heading}\n\ntext")
    assert c.metadata.get("section_number") == number


def test_duplicate_slugs_are_numbered_like_github() -> None:
    text = "# FAQ\n\na\n\n# FAQ\n\nb\n\n# FAQ-1\n\nc\n\n###### FAQ\n\n# FAQ\n\nd"
    anchors = [c.metadata["anchor"] for c in chunk(text)]
    # the ###### heading is not a boundary but still takes "faq-2", as it does on GitHub
    assert anchors == ["faq", "faq-1", "faq-1-1", "faq-3"]


def test_github_slug_rules() -> None:
    assert github_slug("Hello, World!") == "hello-world"
    assert github_slug("C++ & `std::vector`") == "c--stdvector"
    assert github_slug("Ünïcödé  Straße") == "ünïcödé--straße"
    assert github_slug("snake_case and _emphasis_") == "snake_case-and-emphasis"
    slugger = Slugger()
    assert [slugger.slug(t) for t in ["a", "a", "a-1", "a"]] == ["a", "a-1", "a-1-1", "a-2"]


def test_text_that_is_not_markdown() -> None:
    text = "just | some $$ text\n#hashtag\n\t\tindented\n- \n1)\n" * 30 + "\\[ unclosed"
    chunks = chunk(text, SMALL)
    assert chunks and all(c.token_count <= 128 for c in chunks)


def test_deterministic() -> None:
    text = NESTED + sentences(40)
    assert [c.chunk_id for c in chunk(text, SMALL)] == [c.chunk_id for c in chunk(text, SMALL)]


_MARKDOWNISH = st.lists(
    st.sampled_from([*"ab #-*|`~$\\[]=\n\r\t.1 ", "```", "$$", "\n# ", "\n- ", "é", "😀", "Word. "]),
    max_size=800,
).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_MARKDOWNISH)
def test_invariants_on_markdown_like_noise(text: str) -> None:
    chunk(text, SMALL)
