"""Small-to-big context assembly within a token budget (`unichunk.retrieval.context`), on a real BM25 store.

The best hit comes first, then its neighbours (following before preceding), then the next hit; the piece
that overflows is cut at a sentence boundary on its hit's side and assembly stops; the budget is never
exceeded; the text is always exact slices of the document.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.tokenizer import TokenCounter
from unichunk.retrieval.context import CHUNK_BOUNDARY, Piece, assemble_context, pieces_for_hits, small_to_big
from unichunk.retrieval.fusion import rrf_fuse
from unichunk.sinks.base import ScoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink

COUNTER = TokenCounter()


@pytest.fixture(scope="module")
def ten(tmp_path_factory: pytest.TempPathFactory):
    """A document of 60 short sentences cut into 8 chunks of up to 8 sentences, in a real BM25 store."""
    text = " ".join(f"Sentence {i:02d} tells part {i // 6} of the story about item {i}." for i in range(60))
    document = Document(text=text, source_system="t", source_id="ten.txt", title="Ten")
    chunks = ChunkingService().chunk(
        document, ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=0)
    )
    assert len(chunks) == 8
    path = tmp_path_factory.mktemp("ten")
    store = BM25Sink(SinkSettings(data_dir=path), path=path / "bm25.sqlite")
    store.upsert(document, chunks)
    yield document, chunks, store
    store.close()


def _hits(chunks: list[Chunk]):
    return rrf_fuse(
        {"keywords": [ScoredChunk(c.chunk_id, c.document_id, c.chunk_index, c.start_char, c.end_char, c.content,
                                  score=1.0) for c in chunks]},
        k=len(chunks),
    )  # fmt: skip


def _piece(i: int, rank: int | None = None) -> Piece:
    return Piece(f"c{i}", "d", i, 10 * i, 10 * i + 10, "x" * 10, rank=rank)


def test_order_is_each_hit_then_its_neighbours_following_first() -> None:
    around = {("d", i): _piece(i) for i in range(6)}
    order = small_to_big([_piece(3, rank=1), _piece(1, rank=2)], around, radius=1)
    assert [(p.chunk_id, p.rank, p.before_hit) for p in order] == [
        ("c3", 1, False), ("c4", None, False), ("c2", None, True), ("c1", 2, False), ("c0", None, True),
    ]  # fmt: skip
    # a hit that is a better hit's neighbour keeps its own rank, at the neighbour's place
    order = small_to_big([_piece(3, rank=1), _piece(4, rank=2)], around, radius=1)
    assert [(p.chunk_id, p.rank) for p in order] == [("c3", 1), ("c4", 2), ("c2", None), ("c5", None)]


def test_the_budget_goes_to_the_best_hit_first_even_when_a_worse_one_comes_earlier_in_the_text(ten) -> None:
    document, chunks, store = ten
    hits = _hits([chunks[5], chunks[2]])
    alone = assemble_context(hits[:1], None, titles={document.document_id: "Ten"}, radius=0)
    context = assemble_context(hits, store, titles={document.document_id: "Ten"}, budget=alone.tokens)
    assert context.tokens <= alone.tokens
    assert [s.hit_chunk_ids for s in context.spans] == [[chunks[5].chunk_id]]
    assert context.spans[0].text == chunks[5].content and not context.spans[0].truncated
    assert context.dropped == [chunks[2].chunk_id]


def test_the_overflowing_neighbour_is_cut_at_a_sentence_on_its_hits_side(ten) -> None:
    document, chunks, store = ten
    hits = _hits([chunks[5]])
    alone = assemble_context(hits, None, radius=0).tokens
    with_next = assemble_context(hits, store, radius=1, budget=alone + 30)
    (span,) = with_next.spans
    assert span.truncated and span.start_char == chunks[5].start_char
    head = document.text[chunks[6].start_char : span.end_char]
    assert span.text == chunks[5].content + CHUNK_BOUNDARY + head and head.endswith(".")
    assert 0 < len(head) < len(chunks[6].content)
    # room for the hit and all of the following chunk, and a little more: the preceding one keeps its tail
    both = assemble_context(hits, store, radius=1, budget=alone + COUNTER.count(chunks[6].content) + 40)
    (span,) = both.spans
    assert span.truncated and chunks[4].start_char < span.start_char < chunks[4].end_char
    assert span.end_char == chunks[6].end_char and span.text.startswith("Sentence")
    assert span.text.replace(CHUNK_BOUNDARY, " ") == document.text[span.start_char : span.end_char]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    order=st.permutations(range(8)),
    k=st.integers(1, 6),
    budget=st.integers(0, 700),
    radius=st.integers(0, 2),
)
def test_never_over_budget_exact_slices_and_hits_in_rank_order(ten, order, k, budget, radius) -> None:
    document, chunks, store = ten
    ranked = [chunks[i] for i in order[:k]]
    context = assemble_context(_hits(ranked), store, radius=radius, budget=budget)
    assert context.tokens == COUNTER.count(context.text) <= budget
    for span in context.spans:
        for at, start, end in span.segments:
            assert span.text[at : at + end - start] == document.text[start:end]
    kept = {c for s in context.spans for c in s.chunk_ids}
    admitted = [p.chunk_id in kept for p in pieces_for_hits(_hits(ranked), store, radius)]
    assert admitted == sorted(admitted, reverse=True)  # a prefix of the small-to-big order, nothing skipped
