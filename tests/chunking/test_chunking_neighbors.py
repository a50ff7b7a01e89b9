"""expand_neighbors on a 6-chunk document (first, middle, last) and embed_text with/without headings."""

from __future__ import annotations

import pytest

from chunking.config import ChunkStrategy
from chunking.models import Chunk, Document
from chunking.neighbors import CHUNK_BOUNDARY, embed_text, expand_neighbors
from chunking.service import ChunkingService


@pytest.fixture(scope="module")
def six() -> tuple[str, list[Chunk]]:
    text = "".join(f"Block{i:02d} " + "filler " * 60 for i in range(20))
    strategy = ChunkStrategy(name="fixed_chars", chunk_size=1000, chunk_overlap=200)
    chunks = ChunkingService().chunk(Document(text=text), strategy)
    chunks = chunks[:6]
    assert len(chunks) == 6 and chunks[1].start_char < chunks[0].end_char  # overlapping windows
    return text, chunks


def test_middle_chunk_joins_the_exact_span_without_repeating_overlap(six) -> None:
    text, chunks = six
    expanded = expand_neighbors(chunks, 3)
    parts = expanded.split(CHUNK_BOUNDARY)
    assert parts == [
        text[chunks[2].start_char : chunks[3].start_char],
        chunks[3].content,
        text[chunks[3].end_char : chunks[4].end_char],
    ]
    # removing the markers gives back the document span [prev.start, next.end) exactly once
    assert "".join(parts) == text[chunks[2].start_char : chunks[4].end_char]


def test_first_and_last_chunks_have_one_neighbour(six) -> None:
    text, chunks = six
    first = expand_neighbors(chunks, 0).split(CHUNK_BOUNDARY)
    assert first == [chunks[0].content, text[chunks[0].end_char : chunks[1].end_char]]
    last = expand_neighbors(chunks, 5).split(CHUNK_BOUNDARY)
    assert last == [text[chunks[4].start_char : chunks[5].start_char], chunks[5].content]
    with pytest.raises(IndexError):
        expand_neighbors(chunks, 6)


def test_gap_between_chunks_is_not_invented() -> None:
    text = "alpha beta\n\n\n\ngamma delta"
    chunks = ChunkingService().chunk(Document(text=text), ChunkStrategy(name="paragraph"))
    assert len(chunks) == 1  # both paragraphs fit one chunk
    assert expand_neighbors(chunks, 0) == text
    doc = Document(text=text)
    a = Chunk(
        chunk_id="a",
        document_id=doc.document_id,
        chunk_index=0,
        content="alpha beta",
        start_char=0,
        end_char=10,
        token_count=2,
        content_hash="h",
    )
    b = Chunk(
        chunk_id="b",
        document_id=doc.document_id,
        chunk_index=1,
        content="gamma delta",
        start_char=14,
        end_char=25,
        token_count=2,
        content_hash="h",
    )
    assert expand_neighbors([a, b], 1) == "alpha beta" + CHUNK_BOUNDARY + "gamma delta"


def test_embed_text_prepends_heading_chain() -> None:
    chunk = Chunk(
        chunk_id="c",
        document_id="d",
        chunk_index=0,
        content="We measured.",
        start_char=0,
        end_char=12,
        token_count=3,
        content_hash="h",
        heading_chain=("Chapter 3", "Methodology"),
    )
    assert embed_text(chunk) == "Chapter 3 > Methodology: We measured."
    assert embed_text(chunk.model_copy(update={"heading_chain": ()})) == "We measured."
