"""extract_html and HtmlChunker: blocks with exact offsets, both modes, word packing, hostile markup."""

from __future__ import annotations

import re
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.html import HtmlChunker
from unichunk.chunking.html_extract import ExtractedHtml, extract_html
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.sentences import sentence_spans
from unichunk.chunking.tokenizer import TokenCounter

COUNTER = TokenCounter()

PAGE = """<!DOCTYPE html>
<html lang="en"><head>
  <meta charset="utf-8"><title>  Caf&eacute; &amp; Co — Guide </title>
  <style>body { color: red; }</style>
  <script>var tracking = "NOISE_IN_SCRIPT";</script>
</head>
<body>
  <nav><script>document.write("NAV_SCRIPT_NOISE")</script><noscript>NOSCRIPT_NOISE</noscript>
    <style>.nav{}</style></nav>
  <!-- a COMMENT_NOISE comment -->
  <h1>Welcome   to the <em>Café</em></h1>
  <p>We serve   coffee &amp; tea.
     Open daily&nbsp;from 8&ndash;18.</p>
  <div>Loose intro text <p>inner paragraph</p> tail text</div>
  <h2>Menu</h2>
  <ul>
    <li>Coffee
      <ul><li>Espresso</li><li>Latte</li></ul>
    </li>
    <li>Tea</li>
  </ul>
  <table>
    <tr><th>Item</th><th>Price</th></tr>
    <tr><td>Espresso</td><td>2 &euro;</td></tr>
    <tr><td>Latte</td><td>3 &euro;</td></tr>
  </table>
  <pre><code>def brew():
    return "coffee"   # keep   spacing
</code></pre>
  <blockquote><p>Best café.</p><p>— A critic</p></blockquote>
  <template><p>TEMPLATE_NOISE</p></template>
</body></html>"""


def chunk(text: str, strategy: ChunkStrategy | None = None, blocks: tuple = ()) -> list[Chunk]:
    chunks = HtmlChunker(strategy or ChunkStrategy(name="html")).chunk(Document(text=text, blocks=blocks))
    covered = [False] * len(text)
    previous = (0, 0)
    for c in chunks:
        assert text[c.start_char : c.end_char] == c.content
        assert c.start_char >= previous[0] and c.end_char >= previous[1]
        assert c.token_count == COUNTER.count(c.content)
        previous = (c.start_char, c.end_char)
        covered[c.start_char : c.end_char] = [True] * (c.end_char - c.start_char)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))
    return chunks


def extracted_chunks(markup: str, strategy: ChunkStrategy | None = None) -> tuple[ExtractedHtml, list[Chunk]]:
    page = extract_html(markup)
    return page, chunk(page.text, strategy, page.blocks)


def words(c: Chunk) -> int:
    return len(c.content.split())


def prose(n_sentences: int, topic: str = "river", length: int = 12) -> str:
    filler = " ".join(["word"] * (length - 5))
    return " ".join(f"The {topic} number {i} {filler} ends." for i in range(n_sentences))


def test_extracts_a_realistic_page() -> None:
    page = extract_html(PAGE)
    assert page.title == "Café & Co — Guide"
    for noise in ("NOISE", "COMMENT", "TEMPLATE", "body {"):
        assert noise not in page.text
    got = [(b.kind, b.level, page.text[b.start : b.end]) for b in page.blocks]
    assert got == [
        ("heading", 1, "Welcome to the Café"),
        ("paragraph", 0, "We serve coffee & tea. Open daily from 8–18."),
        ("paragraph", 0, "Loose intro text"),
        ("paragraph", 0, "inner paragraph"),
        ("paragraph", 0, "tail text"),
        ("heading", 2, "Menu"),
        ("list_item", 1, "Coffee"),
        ("list_item", 2, "Espresso"),
        ("list_item", 2, "Latte"),
        ("list_item", 1, "Tea"),
        ("table", 0, "Item | Price\nEspresso | 2 €\nLatte | 3 €"),
        ("code", 0, 'def brew():\n    return "coffee"   # keep   spacing'),
        ("quote", 0, "Best café. — A critic"),
    ]


def test_block_offsets_index_the_extracted_text_exactly() -> None:
    page = extract_html(PAGE)
    assert page.text == "\n\n".join(page.text[b.start : b.end] for b in page.blocks)
    assert page.blocks[0].start == 0 and page.blocks[-1].end == len(page.text)
    for a, b in pairwise(page.blocks):
        assert b.start == a.end + 2


def test_title_falls_back_to_first_h1_and_to_none() -> None:
    assert extract_html("<h2>x</h2><h1>Main <b>one</b></h1><h1>two</h1>").title == "Main one"
    assert extract_html("<p>no title</p>").title is None
    assert extract_html("") == ExtractedHtml(text="", blocks=(), title=None)


def test_malformed_markup_does_not_crash() -> None:
    page = extract_html(
        "<p>unclosed <b>bold <li>item</table></td> <h2>Head<p>para &bogus; &#xD800; <<>> </div>"
    )
    assert "unclosed bold" in page.text and "Head" in page.text and "para" in page.text
    assert [page.text[b.start : b.end] for b in page.blocks if b.kind == "heading"] == ["Head"]
    chunk(page.text, blocks=page.blocks)


def test_deeply_nested_markup_is_walked_without_recursion() -> None:
    depth = 5000
    markup = "<div><span>" * depth + "deep &lt;text&gt;" + "</span></div>" * depth + "<p>after</p>"
    markup += "<ul>" + "<li>level<ul>" * 300 + "</ul></li>" * 300 + "</ul>"
    page, chunks = extracted_chunks(markup)
    assert page.text.startswith("deep <text>\n\nafter")
    assert max(b.level for b in page.blocks) == 300
    assert chunks


def test_deeply_nested_tables_and_code_flatten_into_one_block() -> None:
    depth = 2000
    page = extract_html("<table><tr><td>cell" * depth + "</td></tr></table>" * depth)
    assert [b.kind for b in page.blocks] == ["table"]
    assert page.text == " ".join(["cell"] * depth)
    page = extract_html("<code>" * depth + "x" + "</code>" * depth + "<p>" * depth + "y")
    assert page.text == "x\n\ny"


def test_nested_table_cells_and_inline_code() -> None:
    page = extract_html(
        "<table><tr><td>a</td><td>b<table><tr><td>in1</td><td>in2</td></tr></table></td></tr>"
        "<tr><th>c</th></tr></table><div><code>a = 1\n  b = 2</code></div><p>use <code>x()</code> here</p>"
    )
    assert [(b.kind, page.text[b.start : b.end]) for b in page.blocks] == [
        ("table", "a | b in1 in2\nc"),
        ("code", "a = 1\n  b = 2"),
        ("paragraph", "use x() here"),
    ]


def test_entities_and_non_ascii() -> None:
    page = extract_html("<p>&lt;tag&gt; &quot;q&quot; &#128512; &#x4E2D;文 naïve&nbsp;façade ﬁ 𝔘</p>")
    assert page.text == '<tag> "q" 😀 中文 naïve façade ﬁ 𝔘'
    [c] = chunk(page.text, blocks=page.blocks)
    assert c.content == page.text


def test_structured_mode_follows_headings() -> None:
    markup = (
        f"<p>{prose(3, 'preface')}</p><h1>Top</h1><p>{prose(40, 'alpha')}</p>"
        f"<h2>Child</h2><p>{prose(3, 'beta')}</p><h3>Leaf</h3><p>{prose(2, 'gamma')}</p>"
        f"<h2>Sibling</h2><ul><li>one</li><li>two</li></ul>"
    )
    _, chunks = extracted_chunks(markup)
    expected = {
        "preface": (),
        "alpha": ("Top",),
        "beta": ("Top", "Child"),
        "gamma": ("Top", "Child", "Leaf"),
        "one": ("Top", "Sibling"),
    }
    for c in chunks:
        assert c.metadata["html_mode"] == "structured"
        [topic] = {t for t in expected if t in c.content}  # one section per chunk
        assert c.heading_chain == expected[topic]
        assert c.metadata["section"] == (expected[topic][-1] if expected[topic] else "")
    assert sum("alpha" in c.content for c in chunks) > 1


def test_structured_list_kept_whole_and_table_split_between_rows() -> None:
    items = "".join(f"<li>item {i} with a few words</li>" for i in range(10))
    rows = "".join(f"<tr><td>row {i}</td><td>{'cell ' * 8}</td></tr>" for i in range(80))
    _, chunks = extracted_chunks(
        f"<h1>Lists</h1><p>{prose(5)}</p><ul>{items}</ul><h1>Table</h1><table>{rows}</table>"
    )
    list_text = "\n\n".join(f"item {i} with a few words" for i in range(10))
    assert sum(list_text in c.content for c in chunks) == 1
    table_chunks = [c for c in chunks if c.heading_chain == ("Table",)]
    assert len(table_chunks) > 1
    for c in table_chunks:
        assert words(c) <= 400
        assert re.fullmatch(r"(Table\n\n)?(row \d+ \| (cell ){7}cell\n?)+", c.content)


def test_flat_mode_detects_all_caps_and_short_line_headings() -> None:
    text = "\n\n".join(
        [
            "INTRODUCTION",
            prose(30, "intro"),
            "Related work on rivers",
            prose(5, "related"),
            "A short line that ends with a period.",
            prose(3, "middle"),
        ]
    )
    chunks = chunk(text, ChunkStrategy(name="html", html_mode="flat"))
    by_topic = {t: c.heading_chain for c in chunks for t in ("intro", "related", "middle") if t in c.content}
    assert by_topic == {
        "intro": ("INTRODUCTION",),
        "related": ("INTRODUCTION", "Related work on rivers"),
        "middle": ("INTRODUCTION", "Related work on rivers"),
    }
    assert all(c.metadata["html_mode"] == "flat" for c in chunks)


def test_flat_mode_without_headings_numbers_sections() -> None:
    text = "\n\n".join(prose(20, f"topic{i}") for i in range(4))  # 4 x 240 words, all paragraphs
    chunks = chunk(text)  # auto -> flat: no headings, lists or tables
    total = len(chunks)
    assert total >= 3
    assert [c.heading_chain for c in chunks] == [(f"Section {n} of {total}",) for n in range(1, total + 1)]
    assert [c.metadata["section"] for c in chunks] == [f"Section {n} of {total}" for n in range(1, total + 1)]


def test_word_targets_and_sentence_boundaries() -> None:
    text = prose(200)  # 2400 words
    chunks = chunk(text)
    starts = {a for a, _ in sentence_spans(text)}
    ends = {b for _, b in sentence_spans(text)}
    for c in chunks:
        assert words(c) <= 400
        assert c.start_char in starts and c.end_char in ends
    assert all(words(c) >= 300 for c in chunks[:-1])


def test_two_sentence_overlap_between_consecutive_chunks() -> None:
    text = prose(120)
    chunks = chunk(text)
    assert len(chunks) > 2
    for a, b in pairwise(chunks):
        tail = [text[s:e] for s, e in sentence_spans(text, a.start_char, a.end_char)][-2:]
        head = [text[s:e] for s, e in sentence_spans(text, b.start_char, b.end_char)][:3]
        assert head[:2] == tail
        assert head[2] not in a.content


def test_no_overlap_when_disabled() -> None:
    chunks = chunk(prose(120), ChunkStrategy(name="html", overlap_sentences=0))
    for a, b in pairwise(chunks):
        assert b.start_char >= a.end_char


def test_tiny_trailing_fragment_merges_into_previous_chunk() -> None:
    strategy = ChunkStrategy(name="html", overlap_sentences=0)
    text = prose(26)  # 25 sentences reach the 300-word target, one 12-word sentence is left
    [c] = chunk(text, strategy)
    assert c.content == text and words(c) == 312
    text = prose(26 + 10)  # 120 words left: above min_words, so it stays a chunk of its own
    assert [words(c) for c in chunk(text, strategy)] == [300, 132]


def test_giant_sentence_split_at_word_boundaries() -> None:
    giant = " ".join(f"w{i}" for i in range(1000)) + "."
    text = f"{prose(2)} {giant} {prose(2, 'after')}"
    chunks = chunk(text)
    assert all(words(c) <= 400 for c in chunks)
    for c in chunks:  # cuts between words only
        assert c.start_char == 0 or text[c.start_char - 1] == " "
        assert c.end_char == len(text) or text[c.end_char] == " "


def test_token_ceiling_holds_for_long_words() -> None:
    long_words = " ".join(f"Pneumonoultramicroscopic{i}silicovolcanoconiosis" for i in range(400)) + "."
    chunks = chunk(long_words)
    assert len(chunks) > 1
    assert all(c.token_count <= 512 and words(c) <= 400 for c in chunks)


def test_plain_text_without_blocks_and_crlf() -> None:
    text = "TITLE HERE\r\n\r\n" + prose(10, "body") + "\r\n\r\nend"
    chunks = chunk(text)
    assert chunks[0].heading_chain == ("TITLE HERE",)


def test_blocks_that_miss_text_or_overlap_are_repaired() -> None:
    from unichunk.chunking.models import Block

    text = "Head\n\nbody one. body two.\n\nstray text\n\n| a | b |"
    blocks = (Block(kind="heading", start=0, end=4, level=1), Block(kind="table", start=37, end=300))
    chunks = chunk(text, blocks=blocks)
    assert chunks[0].heading_chain == ("Head",)


_TAGS = [
    "<p>",
    "</p>",
    "<div>",
    "</div>",
    "<li>",
    "<ul>",
    "</ul>",
    "<h2>",
    "</h2>",
    "<table><tr><td>",
    "</td>",
]
_HTMLISH = st.lists(
    st.one_of(
        st.sampled_from([*_TAGS, "<pre>", "</pre>", "&amp;", "&", "<!--", "-->", "<script>", "</script>"]),
        st.text(max_size=20),
    ),
    max_size=60,
).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markup=_HTMLISH)
def test_invariants_on_tag_soup(markup: str) -> None:
    page = extract_html(markup)
    assert all(not page.text[b.start : b.end].isspace() and b.end <= len(page.text) for b in page.blocks)
    small = ChunkStrategy(name="html", chunk_size=128, target_words=20, max_words=30, min_words=5)
    chunk(page.text, small, page.blocks)
