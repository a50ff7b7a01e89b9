"""paragraph: pack paragraphs up to the size, split oversize paragraphs by sentences."""

from __future__ import annotations

import itertools

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.paragraph import ParagraphChunker, paragraph_spans
from unichunk.chunking.tokenizer import TokenCounter

COUNTER = TokenCounter()


def paragraph(i: int, sentences: int = 3) -> str:
    return " ".join(f"Paragraph {i} sentence {j} is about subject {i * j % 11}." for j in range(sentences))


def test_paragraphs_are_packed_whole_up_to_the_limit() -> None:
    paragraphs = [paragraph(i) for i in range(60)]
    text = "\n\n".join(paragraphs)
    chunks = ParagraphChunker(ChunkStrategy(name="paragraph")).chunk(Document(text=text))
    assert len(chunks) > 1
    starts = {text.index(p) for p in paragraphs}
    ends = {text.index(p) + len(p) for p in paragraphs}
    for chunk in chunks:
        assert chunk.token_count <= 512
        assert chunk.start_char in starts and chunk.end_char in ends
    # no overlap by default: chunks are disjoint and consecutive
    for previous, following in itertools.pairwise(chunks):
        assert text[previous.end_char : following.start_char] == "\n\n"


def test_oversize_paragraph_is_split_by_sentences() -> None:
    big = paragraph(1, sentences=80)
    text = "Intro paragraph.\n\n" + big + "\n\nOutro paragraph."
    chunks = ParagraphChunker(ChunkStrategy(name="paragraph", chunk_size=128)).chunk(Document(text=text))
    assert all(c.token_count <= 128 for c in chunks)
    # the big paragraph is spread over several chunks, each cut at a sentence end
    assert sum("Paragraph 1 sentence" in c.content for c in chunks) >= 4
    assert all(c.content.endswith(".") for c in chunks)
    assert chunks[0].content.startswith("Intro") and chunks[-1].content.endswith("Outro paragraph.")


def test_custom_separator_regex() -> None:
    text = "one\n---\ntwo\n---\nthree"
    assert [text[s:e] for s, e in paragraph_spans(text, r"\n-{3}\n")] == ["one", "two", "three"]
    blank = "a\n\n \t\nb"
    assert [blank[s:e] for s, e in paragraph_spans(blank, r"\n[ \t]*\n")] == ["a", "b"]
    # a pattern that can match the empty string must not loop or produce empty paragraphs
    assert [("a b")[s:e] for s, e in paragraph_spans("a b", r"x*")] == ["a b"]
