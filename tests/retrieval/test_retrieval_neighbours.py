"""Neighbour expansion as search does it (`pieces_for_hits` over a real store, then `merge_pieces`): the
hit with the new text of its ±1 neighbours, overlap never repeated, no gap invented, exact offsets."""

from __future__ import annotations

import pytest

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.service import ChunkingService
from unichunk.retrieval.context import CHUNK_BOUNDARY, Piece, merge_pieces, pieces_for_hits
from unichunk.retrieval.fusion import rrf_fuse
from unichunk.sinks.base import ScoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory):
    text = "".join(f"Block{i:02d} " + "filler " * 60 for i in range(20))
    document = Document(text=text, source_system="t", source_id="six.txt")
    strategy = ChunkStrategy(name="fixed_chars", chunk_size=1000, chunk_overlap=200)
    chunks = ChunkingService().chunk(document, strategy)[:6]
    assert len(chunks) == 6 and chunks[1].start_char < chunks[0].end_char  # overlapping windows
    path = tmp_path_factory.mktemp("six")
    store = BM25Sink(SinkSettings(data_dir=path), path=path / "bm25.sqlite")
    store.upsert(document, chunks)
    yield text, chunks, store
    store.close()


def _hit(chunk: Chunk):
    scored = ScoredChunk(
        chunk.chunk_id, chunk.document_id, chunk.chunk_index, chunk.start_char, chunk.end_char, chunk.content,
        chunk.heading_chain, score=1.0,
    )  # fmt: skip
    return rrf_fuse({"keywords": [scored]}, k=1)


def test_middle_chunk_joins_the_exact_span_without_repeating_overlap(six) -> None:
    text, chunks, store = six
    (span,) = merge_pieces(pieces_for_hits(_hit(chunks[3]), store, radius=1))
    assert span.chunk_ids == [c.chunk_id for c in chunks[2:5]] and span.hit_chunk_ids == [chunks[3].chunk_id]
    parts = span.text.split(CHUNK_BOUNDARY)
    assert parts == [
        chunks[2].content,
        text[chunks[2].end_char : chunks[3].end_char],
        text[chunks[3].end_char : chunks[4].end_char],
    ]
    # removing the markers gives back the document span [prev.start, next.end) exactly once
    assert "".join(parts) == text[chunks[2].start_char : chunks[4].end_char]
    assert (span.start_char, span.end_char) == (chunks[2].start_char, chunks[4].end_char)
    assert span.doc_offset(span.hit_offset) == chunks[3].start_char  # the hit is found inside the span


def test_first_and_last_chunks_have_one_neighbour(six) -> None:
    text, chunks, store = six
    (first,) = merge_pieces(pieces_for_hits(_hit(chunks[0]), store, radius=1))
    assert first.text.split(CHUNK_BOUNDARY) == [
        chunks[0].content,
        text[chunks[0].end_char : chunks[1].end_char],
    ]
    (last,) = merge_pieces(pieces_for_hits(_hit(chunks[5]), store, radius=1))
    assert last.text.split(CHUNK_BOUNDARY) == [
        chunks[4].content,
        text[chunks[4].end_char : chunks[5].end_char],
    ]
    assert last.chunk_ids == [chunks[4].chunk_id, chunks[5].chunk_id]  # no chunk 6 is invented


def test_gap_between_chunks_is_not_invented() -> None:
    text = "alpha beta\n\n\n\ngamma delta"
    chunks = ChunkingService().chunk(Document(text=text), ChunkStrategy(name="paragraph"))
    assert len(chunks) == 1  # both paragraphs fit one chunk
    (whole,) = merge_pieces([Piece(**{**_fields(chunks[0]), "rank": 1})])
    assert whole.text == text
    doc = Document(text=text)
    a = Piece(
        chunk_id="a",
        document_id=doc.document_id,
        chunk_index=0,
        start_char=0,
        end_char=10,
        content="alpha beta",
    )
    b = Piece(chunk_id="b", document_id=doc.document_id, chunk_index=1, start_char=14, end_char=25,
              content="gamma delta", rank=1)  # fmt: skip
    (span,) = merge_pieces([a, b])
    assert span.text == "alpha beta" + CHUNK_BOUNDARY + "gamma delta"
    assert span.text.replace(CHUNK_BOUNDARY, "") != text[span.start_char : span.end_char]  # the gap stays out


def _fields(chunk: Chunk) -> dict:
    return {
        "chunk_id": chunk.chunk_id,
        "document_id": chunk.document_id,
        "chunk_index": chunk.chunk_index,
        "start_char": chunk.start_char,
        "end_char": chunk.end_char,
        "content": chunk.content,
    }
