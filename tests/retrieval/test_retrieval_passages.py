"""Passages of the top hits (`unichunk.retrieval.passages`) over a real BM25 store of half-overlapping
windows: exact offsets, the top hits' text cut once and only once, the stretch holding the query's words
first; and the store's `score_texts` on the scale of its own chunk scores."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.segments import between_sentences
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.tokenizer import TokenCounter
from unichunk.retrieval.context import CHUNK_BOUNDARY, assemble_context
from unichunk.retrieval.fusion import Hit, rrf_fuse
from unichunk.retrieval.passages import rank_passages
from unichunk.sinks.base import ScoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink

WORDS = (
    "harbour",
    "ledger",
    "tide",
    "crane",
    "cargo",
    "pilot",
    "beacon",
    "anchor",
    "rope",
    "gull",
    "net",
    "mast",
)


def _sentence(rng: random.Random, i: int) -> str:
    return f"Sentence {i} tells of the " + " ".join(rng.choice(WORDS) for _ in range(9)) + "."


def _store(tmp_path_factory: pytest.TempPathFactory, strategy: ChunkStrategy):
    rng = random.Random(7)
    sentences = [_sentence(rng, i) for i in range(80)]
    sentences[45] = "The quartermaster signed the zephyr manifest at dawn."  # words nothing else holds
    text = " ".join(sentences)
    document = Document(text=text, source_system="t", source_id="harbour.txt")
    chunks = ChunkingService().chunk(document, strategy)
    assert len(chunks) >= 6 and all(b.start_char < a.end_char for a, b in pairwise(chunks))  # overlapping
    path = tmp_path_factory.mktemp("passages")
    store = BM25Sink(SinkSettings(data_dir=path), path=path / "bm25.sqlite")
    store.upsert(document, chunks)
    return text, chunks, store


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory):
    """`auto`'s chunks of a text: sentence windows overlapping by half, cut between sentences."""
    found = _store(tmp_path_factory, ChunkStrategy())
    yield found
    found[2].close()


@pytest.fixture(scope="module")
def raw_windows(tmp_path_factory: pytest.TempPathFactory):
    """Fixed token windows: their edges fall inside sentences and words."""
    found = _store(tmp_path_factory, ChunkStrategy(name="token_window", chunk_size=128, chunk_overlap=64))
    yield found
    found[2].close()


def _hits(chunks: list[Chunk]) -> list[Hit]:
    """The chunks as fused hits, in this order."""
    scored = [
        ScoredChunk(c.chunk_id, c.document_id, c.chunk_index, c.start_char, c.end_char, c.content,
                    c.heading_chain, score=float(len(chunks) - i))
        for i, c in enumerate(chunks)
    ]  # fmt: skip
    return rrf_fuse({"keywords": scored}, k=len(scored))


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), query=st.text(max_size=80))
def test_passages_cut_the_top_hits_once_with_exact_offsets(windows, raw_windows, data, query) -> None:
    text, chunks, store = data.draw(st.sampled_from([windows, raw_windows]))
    order = data.draw(st.permutations(range(len(chunks))))
    hits_used = data.draw(st.integers(1, 6))
    hits = _hits([chunks[i] for i in order])
    found = rank_passages(query, hits, store, store, hits_used=hits_used)
    top = hits[:hits_used]
    by_id = {h.chunk_id: h for h in top}
    for p in found:  # exact offsets, inside the hit it names
        assert text[p.start_char : p.end_char] == p.text and p.text
        hit = by_id[p.chunk_id]
        assert hit.chunk.start_char <= p.start_char < p.end_char <= hit.chunk.end_char
    edges = {h.chunk.start_char for h in top} | {h.chunk.end_char for h in top}
    for p in found:  # a cut inside a hit lies between two sentences or lines, as the models' segments do
        assert all(between_sentences(text, at) for at in (p.start_char, p.end_char) if at not in edges)
    spans = sorted((p.start_char, p.end_char) for p in found)
    for chunk_id in by_id:  # a hit's own passages never share a character
        own = sorted((p.start_char, p.end_char) for p in found if p.chunk_id == chunk_id)
        assert all(a[1] <= b[0] for a, b in pairwise(own))
    if store is windows[2]:  # windows cut between sentences: no character is in two passages at all
        assert all(a[1] <= b[0] for a, b in pairwise(spans))
    assert _merged(spans) == _merged([(h.chunk.start_char, h.chunk.end_char) for h in top])  # none left out
    assert [p.score for p in found] == sorted((p.score for p in found), reverse=True)
    assert rank_passages(query, hits, store, store, hits_used=hits_used) == found  # deterministic


def test_the_stretch_with_the_query_words_comes_first(windows) -> None:
    text, chunks, store = windows
    at = text.index("quartermaster")
    holding = [c for c in chunks if c.start_char <= at and at + len("quartermaster") <= c.end_char]
    earlier = min(holding, key=lambda c: c.start_char)  # the window that holds it in its second half
    assert chunks[earlier.chunk_index + 1].start_char <= at
    hits = _hits([earlier, *(c for c in chunks if c != earlier)])
    first = rank_passages("who signed the zephyr manifest", hits, store, store)[0]
    assert first.chunk_id == earlier.chunk_id and first.start_char <= at < first.end_char
    assert first.start_char > earlier.start_char  # not the hit's head: the piece after a neighbour's edge
    assert first.end_char - first.start_char < earlier.end_char - earlier.start_char


def test_windows_cut_inside_sentences_stay_whole(raw_windows) -> None:
    text, chunks, store = raw_windows
    assert not any(between_sentences(text, c.start_char) for c in chunks[1:])  # every edge is mid-sentence
    found = rank_passages("pilot beacon", _hits(chunks), store, store)
    assert sorted((p.start_char, p.end_char) for p in found) == [
        (c.start_char, c.end_char) for c in chunks[:3]
    ]


def test_no_scorer_or_no_hits_gives_no_passages(windows) -> None:
    _, chunks, store = windows
    assert rank_passages("tide", _hits(chunks), store, None) == []
    assert rank_passages("tide", [], store, store) == []


def test_score_texts_scores_a_chunk_as_the_index_scores_it(windows) -> None:
    _, chunks, store = windows
    query = "pilot beacon quartermaster"
    ranked = store.search(query, k=len(chunks))
    texts = [c.content for c in ranked]
    assert store.score_texts(query, texts) == pytest.approx([c.score for c in ranked], rel=1e-5)
    assert store.score_texts(query, ["nothing of the kind here", ""]) == [0.0, 0.0]
    assert store.score_texts("", texts) == [0.0] * len(texts)
    assert store.score_texts(query, []) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), query=st.text(max_size=80), budget=st.integers(1, 600))
def test_passages_change_the_context_only_where_the_budget_binds(windows, raw_windows, data, query, budget):
    text, chunks, store = data.draw(st.sampled_from([windows, raw_windows]))
    order = data.draw(st.permutations(range(len(chunks))))
    hits = _hits([chunks[i] for i in order])[: data.draw(st.integers(1, 6))]
    passages = rank_passages(query, hits, store, store)
    roomy = assemble_context(hits, store, budget=100_000)
    assert assemble_context(hits, store, passages=passages, budget=100_000) == roomy  # the same text, spans
    tight = assemble_context(hits, store, passages=passages, budget=budget)
    assert tight.tokens <= budget
    for span in tight.spans:  # exact document text between the markers, each span inside a roomy one
        assert [text[a:b] for _, a, b in span.segments] == span.text.split(CHUNK_BOUNDARY)
        assert any(r.start_char <= span.start_char and span.end_char <= r.end_char for r in roomy.spans)
    if tight.spans:  # what is admitted first is the best passage, or the part of it that fits
        best = passages[0]
        assert any(s.start_char <= best.start_char < s.end_char for s in tight.spans)


def test_a_tight_budget_gets_the_best_passage_before_the_first_hit_s_head(windows) -> None:
    text, chunks, store = windows
    at = text.index("quartermaster")
    earlier = min((c for c in chunks if c.start_char <= at < c.end_char), key=lambda c: c.start_char)
    hits = _hits([earlier, *(c for c in chunks if c != earlier)])[:5]
    passages = rank_passages("who signed the zephyr manifest", hits, store, store)
    best = passages[0]
    budget = TokenCounter().count(f'[Source: "{best.document_id}", Section: "-"]\n{best.text}')
    shipped = assemble_context(hits, store, budget=budget)
    context = assemble_context(hits, store, passages=passages, budget=budget)
    assert "quartermaster" in context.text and "quartermaster" not in shipped.text
    (span,) = context.spans
    assert (span.start_char, span.end_char, span.text) == (best.start_char, best.end_char, best.text)
    assert (
        span.truncated
        and span.hit_chunk_ids == [earlier.chunk_id]
        and context.dropped == [h.chunk_id for h in hits[1:]]
    )
