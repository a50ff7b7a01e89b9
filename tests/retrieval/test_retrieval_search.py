"""The query side on real stores: BM25Sink on a temp file, QdrantSink on in-memory Qdrant with MiniLM,
the knowledge graph on the session's FalkorDB with real spaCy; chunks made by the real ChunkingService."""

from __future__ import annotations

import uuid

import pytest
from qdrant_client import QdrantClient
from texts import GARDEN, TOPICS
from texts import repeated as _text

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.tokenizer import TokenCounter
from unichunk.retrieval.context import CHUNK_BOUNDARY, assemble_context, merge_pieces, pieces_for_hits
from unichunk.retrieval.fusion import fuse, rrf_fuse
from unichunk.retrieval.graph_context import graph_context
from unichunk.retrieval.ranking import RetrievalSettings, retrieve
from unichunk.retrieval.readers import Readers
from unichunk.retrieval.results import SearchResult
from unichunk.retrieval.search import SearchOptions, search
from unichunk.sinks.base import ScoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.backends import FalkorDBBackend
from unichunk.sinks.graph.extraction import SpacyExtractor
from unichunk.sinks.graph.sink import KnowledgeGraphSink
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def corpus() -> list[Document]:
    harbour = Document(text=_text(TOPICS, 5), source_system="t", source_id="harbour.txt", title="Harbour")
    garden = Document(text=_text(GARDEN, 3), source_system="t", source_id="garden.txt", title="Garden")
    return [harbour, garden]


@pytest.fixture(scope="module")
def strategy() -> ChunkStrategy:
    return ChunkStrategy(name="token_window", chunk_size=128, chunk_overlap=32, single_piece_max=128)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, corpus, strategy, minilm):
    """Built once for the module (embedding is the slow part); the tests only read."""
    tmp_path = tmp_path_factory.mktemp("retrieval")
    settings = SinkSettings(data_dir=tmp_path, qdrant_collection=f"t_{uuid.uuid4().hex[:8]}")
    keywords = BM25Sink(settings, path=tmp_path / "bm25.sqlite")
    vectors = QdrantSink(settings, embedder=minilm, client=QdrantClient(":memory:"))
    chunks = {}
    service = ChunkingService()
    for doc in corpus:
        chunks[doc.document_id] = service.chunk(doc, strategy)
        keywords.upsert(doc, chunks[doc.document_id])
        vectors.upsert(doc, chunks[doc.document_id])
    yield {"keywords": keywords, "vectors": vectors}, chunks
    keywords.close()
    vectors.close()


def test_hybrid_order_is_the_shipped_fusion_of_both_rankings(stores):
    sinks, _ = stores
    query = "which officers inspect ship manifests at the harbour"
    found = retrieve(sinks, query, k=5, settings=RetrievalSettings(candidates=20))
    assert found.route == "hybrid" and len(found.hits) == 5
    bm25 = sinks["keywords"].search(query, 20)
    dense = sinks["vectors"].search(query, 20)
    shipped = RetrievalSettings()  # the measured defaults (issue 27): min-max, keywords 0.4, vectors 0.6
    assert shipped.fusion == "minmax"
    expected = fuse({"keywords": bm25, "vectors": dense}, k=5, weights=shipped.weights, method=shipped.fusion)
    assert [h.chunk_id for h in found.hits] == [h.chunk_id for h in expected]
    # Scores are exactly sum(weight * (score - list's lowest) / (list's highest - lowest)) over the lists
    # that found the chunk, best first.
    raw = {name: [float(h.score) for h in hits] for name, hits in (("keywords", bm25), ("vectors", dense))}
    for hit in found.hits:
        assert hit.score == pytest.approx(
            sum(
                shipped.weights[name] * (score - min(raw[name])) / (max(raw[name]) - min(raw[name]))
                for name, score in hit.scores.items()
            )
        )
    assert [h.score for h in found.hits] == sorted((h.score for h in found.hits), reverse=True)
    assert "Customs officers" in found.hits[0].content


def test_weights_and_modes_change_the_order(stores):
    sinks, _ = stores
    query = "gulls circle while fishermen mend nets"
    bm25_ids = [h.chunk_id for h in sinks["keywords"].search(query, 4)]
    dense_ids = [h.chunk_id for h in sinks["vectors"].search(query, 4)]
    only_keywords = retrieve(sinks, query, 4, RetrievalSettings(weights={"keywords": 1.0, "vectors": 0.0}))
    assert [h.chunk_id for h in only_keywords.hits] == bm25_ids
    keywords_mode = retrieve(sinks, query, 4, RetrievalSettings(mode="keywords"))
    assert keywords_mode.route == "keywords" and [h.chunk_id for h in keywords_mode.hits] == bm25_ids
    vectors_mode = retrieve(sinks, query, 4, RetrievalSettings(mode="vectors"))
    assert vectors_mode.route == "vectors" and [h.chunk_id for h in vectors_mode.hits] == dense_ids


class _CountingVectors:
    """The real vector sink, counting searches, to prove routing skips the vector query."""

    def __init__(self, inner: QdrantSink) -> None:
        self.inner, self.calls = inner, 0

    def search(self, *args, **kwargs):
        self.calls += 1
        return self.inner.search(*args, **kwargs)


def test_fts_first_routing_skips_the_vector_query(stores):
    sinks, _ = stores
    counting = _CountingVectors(sinks["vectors"])
    routed_sinks = {"keywords": sinks["keywords"], "vectors": counting}
    query = "lighthouse keeper logs every passing vessel"
    top = sinks["keywords"].search(query, 1)[0].score
    routed = retrieve(routed_sinks, query, 3, RetrievalSettings(route_threshold=top))
    assert routed.route == "keywords-routed" and counting.calls == 0
    assert routed.keyword_top_score == pytest.approx(top)
    assert [h.chunk_id for h in routed.hits] == [h.chunk_id for h in sinks["keywords"].search(query, 3)]
    fused = retrieve(routed_sinks, query, 3, RetrievalSettings(route_threshold=top * 2))
    assert fused.route == "hybrid" and counting.calls == 1


def _as_hits(chunks):
    """Chunks as a retriever's ranked list (best first), to fuse into hits."""
    return rrf_fuse(
        {"keywords": [ScoredChunk(c.chunk_id, c.document_id, c.chunk_index, c.start_char, c.end_char, c.content,
                                  score=1.0) for c in chunks]},
        k=len(chunks),
    )  # fmt: skip


def test_overlapping_windows_merge_into_one_span(stores, corpus):
    _, chunks = stores
    harbour = corpus[0]
    doc_chunks = chunks[harbour.document_id]
    assert len(doc_chunks) >= 5 and doc_chunks[1].start_char < doc_chunks[0].end_char  # real overlap
    hits = _as_hits([doc_chunks[2], doc_chunks[1]])  # two overlapping windows
    context = assemble_context(hits, None, titles={harbour.document_id: "Harbour"}, radius=0)
    assert len(context.spans) == 1
    span = context.spans[0]
    assert (span.start_char, span.end_char) == (doc_chunks[1].start_char, doc_chunks[2].end_char)
    # Offsets, not IDs: the overlap appears once, so the text without markers is the document's slice.
    assert span.text.replace(CHUNK_BOUNDARY, "") == harbour.text[span.start_char : span.end_char]
    assert span.text.count(CHUNK_BOUNDARY) == 1
    assert context.text.startswith('[Source: "Harbour", Section: "-"]\n')


def test_neighbours_expand_and_spans_order_by_document_then_position(stores, corpus):
    sinks, chunks = stores
    harbour, garden = corpus
    h, g = chunks[harbour.document_id], chunks[garden.document_id]
    assert len(h) >= 7
    hits = _as_hits([g[1], h[5], h[1]])  # garden's hit ranks best
    spans = merge_pieces(pieces_for_hits(hits, sinks["keywords"], radius=1))
    assert [s.document_id for s in spans] == [garden.document_id, harbour.document_id, harbour.document_id]
    first_h, second_h = spans[1], spans[2]
    assert first_h.start_char < second_h.start_char  # position order within the document
    assert first_h.chunk_ids == [h[0].chunk_id, h[1].chunk_id, h[2].chunk_id]
    assert second_h.chunk_ids == [h[4].chunk_id, h[5].chunk_id, h[6].chunk_id]
    assert first_h.hit_chunk_ids == [h[1].chunk_id] and first_h.text.count(CHUNK_BOUNDARY) == 2
    assert first_h.text.replace(CHUNK_BOUNDARY, "") == harbour.text[first_h.start_char : first_h.end_char]
    # Neighbours that are consecutive chunks (h[2] beside h[3]) join two expansions into one span.
    joined = merge_pieces(pieces_for_hits(_as_hits([h[1], h[4]]), sinks["keywords"], radius=1))
    assert len(joined) == 1 and joined[0].chunk_ids == [c.chunk_id for c in h[0:6]]
    assert joined[0].hit_chunk_ids == [h[1].chunk_id, h[4].chunk_id]


def test_token_budget_is_enforced_without_cutting_sentences(stores, corpus):
    sinks, _ = stores
    harbour = corpus[0]
    found = retrieve(sinks, "harbour master assigns berths by draught", k=5)
    counter = TokenCounter()
    roomy = assemble_context(found.hits, sinks["keywords"], budget=8000)
    assert roomy.tokens == counter.count(roomy.text) <= 8000 and not roomy.dropped
    tight = assemble_context(found.hits, sinks["keywords"], budget=90)
    assert tight.tokens == counter.count(tight.text) <= 90
    assert tight.spans and tight.spans[0].truncated
    body = tight.spans[0].text
    assert body.rstrip().endswith((".", ")")), body[-40:]
    # The cut keeps whole sentences: the truncated body is still an exact slice of the document.
    span = tight.spans[0]
    assert body.replace(CHUNK_BOUNDARY, "") == harbour.text[span.start_char : span.end_char] or (
        span.document_id != harbour.document_id
    )
    nothing = assemble_context(found.hits, sinks["keywords"], budget=12)
    assert nothing.spans == [] and set(nothing.dropped) == {h.chunk_id for h in found.hits}


@pytest.fixture
def graph(falkordb_url: str):
    sink = KnowledgeGraphSink(
        FalkorDBBackend(falkordb_url, f"test_{uuid.uuid4().hex[:12]}"), SpacyExtractor()
    )
    yield sink
    sink.backend.clear()
    sink.close()


def test_graph_context_for_retrieved_chunks_on_a_real_graph(graph, make_doc, tmp_path):
    document, chunks = make_doc(
        "doc_graphctx00000001",
        [
            "Ada Lovelace wrote to Charles Babbage about the engine. Ada Lovelace and Charles Babbage "
            "met in London to discuss it.",
            "Charles Babbage travelled to Paris with Michael Faraday to see the new looms.",
            "The weather in Madrid was hot that summer, said Isabel Perez.",
        ],
    )
    graph.upsert(document, chunks)
    keywords = BM25Sink(SinkSettings(data_dir=tmp_path), path=tmp_path / "g.sqlite")
    keywords.upsert(document, chunks)
    found = retrieve({"keywords": keywords}, "Lovelace letters to Babbage about the engine", 1)
    assert [h.chunk_id for h in found.hits] == [chunks[0].chunk_id]
    context = graph_context(graph, [h.chunk_id for h in found.hits])
    names = [e.name for e in context.entities]
    # Entities of the retrieved chunk come first, then one-hop neighbours (via Babbage) from chunk 1.
    assert set(names[:3]) == {"ada lovelace", "charles babbage", "london"}
    assert {"paris", "michael faraday"} <= set(names[3:])
    assert "isabel perez" not in names and "madrid" not in names  # not linked to the retrieved chunk
    weights = [r.weight for r in context.relations]
    assert weights == sorted(weights, reverse=True) and weights[0] == 2.0
    top = context.relations[0]
    assert {top.source, top.target} == {"ada lovelace", "charles babbage"}
    assert any(chunks[1].chunk_id in r.source_chunk_ids for r in context.relations)
    keywords.close()


def test_search_is_ranking_plus_context_in_one_typed_result(stores, corpus):
    """The one read path the CLI, the HTTP API and the benchmark share: the same ranking as `retrieve`,
    titles from whichever store keeps them, the assembled context, and no graph part without a graph."""
    sinks, _ = stores
    query = "which officers inspect ship manifests at the harbour"
    readers = Readers.of(sinks)
    result = search(readers, query, 4, SearchOptions(candidates=20))
    ranked = retrieve(sinks, query, 4, RetrievalSettings(candidates=20))
    assert [h.chunk_id for h in result.hits] == [h.chunk_id for h in ranked.hits]
    assert [h.rank for h in result.hits] == [1, 2, 3, 4] and result.route == "hybrid"
    texts = {d.document_id: (d.text, d.title, d.source_id) for d in corpus}
    for hit in result.hits:
        text, title, source_id = texts[hit.document_id]
        assert text[hit.start_char : hit.end_char] == hit.content
        assert hit.title == title  # from the vector store's record, whichever retriever found the hit
        assert hit.source_id == source_id  # likewise: what the CLI prints, also through a service
    assert result.context is not None and result.context.tokens <= result.context.budget
    assert {c for s in result.context.spans for c in s.hit_chunk_ids} == {h.chunk_id for h in result.hits}
    assert result.graph is None
    # the top hits' passages, best first, each exact and inside the hit it names
    assert result.passages and {p.chunk_id for p in result.passages} <= {h.chunk_id for h in result.hits[:3]}
    for passage in result.passages:
        assert texts[passage.document_id][0][passage.start_char : passage.end_char] == passage.text
    assert "Customs officers" in result.passages[0].text
    assert search(readers, query, 4, SearchOptions(candidates=20, passages=False)).passages == []
    best = result.passages[0]  # what the CLI and the web UI show of a hit: its best passage, else all of it
    (holder,) = [h for h in result.hits if h.chunk_id == best.chunk_id]
    shown = result.preview(holder)
    assert shown.removeprefix("… ") == best.text.strip()  # without the blank lines around it
    assert shown.startswith("… ") == (best.start_char > holder.start_char)
    assert result.preview(result.hits[3]) == result.hits[3].content  # the 4th hit is not cut
    only_keywords = search(Readers(keywords=sinks["keywords"]), query, 2, SearchOptions(context=False))
    assert only_keywords.route == "keywords" and only_keywords.context is None
    assert only_keywords.hits[0].title is None  # the keyword store keeps no title, and none is invented
    assert only_keywords.hits[0].source_id is None
    assert SearchResult.model_validate_json(result.model_dump_json()) == result  # JSON round trip is exact
