"""`search()`: the one read path. The CLI, the HTTP API and the quality benchmark all call it.

Steps: rank (`unichunk.retrieval.ranking`: BM25, vectors, the graph's entities, or fused), rank the top
hits' passages (`unichunk.retrieval.passages`), assemble the context (`unichunk.retrieval.context`: the
passages first, then the hits and their neighbours, merged by offsets, within a token budget), add what
the graph learnt from the hits (`unichunk.retrieval.graph_context`). `SearchOptions.filter` (a document filter, a reader's labels) goes
into every store read of every step: ranking, neighbours, records, graph. Nothing here writes to a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from unichunk.retrieval.context import DEFAULT_BUDGET, AssembledContext, assemble_context, document_records
from unichunk.retrieval.fusion import Hit
from unichunk.retrieval.graph_context import graph_by_chunk, graph_context
from unichunk.retrieval.passages import Passage, rank_passages
from unichunk.retrieval.ranking import Mode, RetrievalSettings, retrieve
from unichunk.retrieval.readers import Readers
from unichunk.retrieval.results import (
    ContextResult,
    ContextSpanResult,
    GraphEntityResult,
    GraphRelationResult,
    GraphResult,
    PassageResult,
    SearchHit,
    SearchResult,
)
from unichunk.sinks.base import GraphContext, SearchFilter, StoredChunk, TextScorer


@dataclass(frozen=True)
class SearchOptions:
    """How to search: ranking (mode, routing, candidates per retriever), the top hits' passages (also the
    first thing the context admits), context (assembled or not, neighbour expansion, token budget), graph
    context, and a filter on stored fields (`document_id`, `labels`) every step reads under."""

    mode: Mode = "hybrid"
    route_threshold: float | None = None
    candidates: int | None = None  # per retriever before fusion; default max(4k, 20)
    context: bool = True
    expand: bool = True
    budget: int = DEFAULT_BUDGET
    graph: bool = True
    passages: bool = True
    filter: SearchFilter | None = field(default=None, hash=False)


def search(readers: Readers, query: str, k: int = 5, options: SearchOptions | None = None) -> SearchResult:
    """The top `k` chunks for `query`, their best passages, the context assembled around them and the
    graph context."""
    options = options or SearchOptions()
    found = retrieve(
        readers.rankers(),
        query,
        k,
        RetrievalSettings(
            mode=options.mode, route_threshold=options.route_threshold, candidates=options.candidates
        ),
        filter=options.filter,
    )
    records = document_records(found.hits, list(readers.searchers().values()), filter=options.filter)
    titles = {document_id: str(record.title) for document_id, record in records.items()}
    passages: list[Passage] = []
    if options.passages:
        scorer = readers.keywords if isinstance(readers.keywords, TextScorer) else None
        passages = rank_passages(query, found.hits, readers.neighbour_store(), scorer, options.filter)
    context = None
    if options.context:
        context = assemble_context(
            found.hits,
            readers.neighbour_store(),
            passages=passages,
            titles=titles,
            radius=1 if options.expand else 0,
            budget=options.budget,
            filter=options.filter,
        )
    graph = None
    if options.graph and readers.graph is not None:
        graph = graph_context(readers.graph, [h.chunk_id for h in found.hits], filter=options.filter)
    return SearchResult(
        query=found.query,
        k=k,
        route=found.route,
        keyword_top_score=found.keyword_top_score,
        hits=[_hit(rank, hit, records.get(hit.document_id)) for rank, hit in enumerate(found.hits, start=1)],
        passages=[PassageResult(**asdict(p)) for p in passages],
        context=None if context is None else _context(context),
        graph=None if graph is None else _graph(graph),
    )


def chunk_graphs(
    readers: Readers, chunk_ids: Sequence[str], filter: SearchFilter | None = None
) -> dict[str, GraphResult]:
    """Each chunk's entities and relations in the graph (`graph_by_chunk`, under `filter`); empty without
    a graph store."""
    if readers.graph is None:
        return {c: GraphResult() for c in dict.fromkeys(chunk_ids)}
    return {c: _graph(g) for c, g in graph_by_chunk(readers.graph, chunk_ids, filter).items()}


def _hit(rank: int, hit: Hit, record: StoredChunk | None) -> SearchHit:
    def field(name: str) -> str | None:
        value = None if record is None else record.extra.get(name)
        return None if value is None else str(value)

    return SearchHit(
        rank=rank,
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        title=None if record is None else record.title,
        source_system=field("source_system"),
        source_id=field("source_id"),
        path=field("path"),
        start_char=hit.start_char,
        end_char=hit.end_char,
        score=hit.score,
        ranks=hit.ranks,
        scores=hit.scores,
        heading_chain=list(hit.heading_chain),
        content=hit.content,
    )


def _context(context: AssembledContext) -> ContextResult:
    return ContextResult(
        text=context.text,
        tokens=context.tokens,
        budget=context.budget,
        dropped_chunk_ids=context.dropped,
        spans=[
            ContextSpanResult(
                document_id=s.document_id,
                title=s.title,
                start_char=s.start_char,
                end_char=s.end_char,
                heading_chain=list(s.heading_chain),
                chunk_ids=s.chunk_ids,
                hit_chunk_ids=s.hit_chunk_ids,
                truncated=s.truncated,
                text=s.text,
            )
            for s in context.spans
        ],
    )


def _graph(graph: GraphContext) -> GraphResult:
    return GraphResult(
        entities=[GraphEntityResult.of(e) for e in graph.entities],
        relations=[GraphRelationResult.of(r) for r in graph.relations],
    )
