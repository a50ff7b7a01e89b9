"""Ranking: the top chunks for a query from BM25, vectors, the knowledge graph, or fused (the first step of
`unichunk.retrieval.search`).

The graph's list (`unichunk.retrieval.graph_search.GraphSearch`: the chunks of the entities a query names)
is a mode of its own, `graph`, and joins hybrid when its weight (`GRAPH_WEIGHT`) is above 0 and a graph
store is present. The top-n lists are fused as `RetrievalSettings.fusion` says (`unichunk.retrieval.fusion.fuse`).
Optional FTS-first routing: when the best BM25 score clears `route_threshold`, the query is answered by keywords alone and
the vector query (an embedding on CPU, the costly half) is skipped; `Retrieval.route` says which route
answered. BM25 scores are not normalised, so the threshold is corpus-dependent and routing is off by
default. Context assembly (neighbours, dedup by offsets, token budget, graph context) is in
`unichunk.retrieval.context`, so this module stays about ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from unichunk.chunking.errors import UnichunkError
from unichunk.retrieval.fusion import FUSION, RRF_K, Fusion, Hit, fuse
from unichunk.sinks.base import ChunkSearch, ScoredChunk, SearchFilter

Mode = Literal["hybrid", "keywords", "vectors", "graph"]
Route = Literal["hybrid", "keywords", "vectors", "graph", "keywords-routed"]
MODES: tuple[str, ...] = ("hybrid", "keywords", "vectors", "graph")
CHUNK_RETRIEVERS = ("keywords", "vectors")  # what hybrid falls back to when a mode's store is absent
# The graph list's weight in hybrid: 0 leaves it out (no graph read, no NER on the query). Measured for
# issue 27 (benchmarks/fusion_tuning.py, benchmarks/README.md): at its best weight (0.25) it cost recall at
# one budget on each half of ../shared/eval (0.6 points at 4,000 characters on the tune half, 0.4 at 2,000
# on the held-out one) against the same fusion without it, so it stays an option (docs/design.md).
# Measured again with the graph's tie rule and BM25 k1 1.2 (benchmarks/ranker_tuning.py): the tune half's
# best fusion with the graph cost 0.6 points at 2,000 characters on the held-out half, so it stays 0.
GRAPH_WEIGHT = 0.0


class RetrievalError(UnichunkError, ValueError):
    """A search that cannot be run as asked (an unknown mode, no store to search)."""


@dataclass(frozen=True)
class RetrievalSettings:
    """How to rank: which retrievers, the fusion and its weights, candidate depth, routing threshold.

    The fusion was chosen by measurement (issue 27, `benchmarks.fusion_tuning`: picked on one half of the
    evaluation questions, reported on the other; benchmarks/README.md): min-max score fusion, keywords 0.4
    and vectors 0.6 (each list's scores scaled to its best 1 and its last 0 per query, then summed), once
    vectors were composed from segments; before that, RRF with rrf_k 0 and vectors at 0.75 of keywords'
    weight (still `fusion="rrf"`, `rrf_k=0`, those weights). benchmarks/README.md has the held-out figures."""

    mode: Mode = "hybrid"
    fusion: Fusion = FUSION
    rrf_k: int = RRF_K  # when `fusion` is rrf
    weights: Mapping[str, float] = field(
        default_factory=lambda: {"keywords": 0.4, "vectors": 0.6, "graph": GRAPH_WEIGHT}
    )
    candidates: int | None = None  # per retriever; default max(4k, 20)
    route_threshold: float | None = None  # BM25 score that answers alone; None = always fuse

    def depth(self, k: int) -> int:
        return self.candidates or max(4 * k, 20)

    def uses_graph(self) -> bool:
        """Whether ranking reads the graph: graph mode, or hybrid with a graph weight above 0."""
        return self.mode == "graph" or (self.mode == "hybrid" and self.weights.get("graph", 0.0) > 0)


@dataclass
class Retrieval:
    """Ranked hits (best first) and how they were found."""

    query: str
    hits: list[Hit]
    route: Route
    keyword_top_score: float | None = None


def _as_hits(found: Sequence[ScoredChunk], retriever: str, k: int) -> list[Hit]:
    """One retriever's list as fused-style hits: score is the raw score, ranks hold its own rank."""
    return [
        Hit(f, score=float(f.score), ranks={retriever: rank}, scores={retriever: float(f.score)})
        for rank, f in enumerate(found[:k], start=1)
    ]


def retrieve(
    sinks: Mapping[str, ChunkSearch],
    query: str,
    k: int = 5,
    settings: RetrievalSettings | None = None,
    *,
    filter: SearchFilter | None = None,
) -> Retrieval:
    """Top `k` chunks for `query` from the "keywords" (BM25), "vectors" and/or "graph" searches in `sinks`.

    A keywords or vectors mode whose sink is absent falls back to the one present (hybrid with only BM25
    is BM25), so a deployment without a vector store still answers; with neither, RetrievalError. Graph
    mode needs the "graph" search (RetrievalError without it); hybrid adds it when present and weighted.
    """
    settings = settings or RetrievalSettings()
    if settings.mode not in MODES:
        raise RetrievalError(f"mode must be one of {MODES}, not {settings.mode!r}")
    query = query.strip()
    if k <= 0 or not query:
        return Retrieval(query, [], "hybrid" if settings.mode == "hybrid" else settings.mode)
    if settings.mode == "graph" and "graph" not in sinks:
        raise RetrievalError("graph mode needs the knowledge graph store, and this index has none")
    wanted = CHUNK_RETRIEVERS if settings.mode == "hybrid" else (settings.mode,)
    present = [name for name in wanted if name in sinks] or [n for n in CHUNK_RETRIEVERS if n in sinks]
    if not present:
        raise RetrievalError(f"retrieval needs a 'keywords' or 'vectors' sink, got {sorted(sinks)}")
    if settings.mode == "hybrid" and settings.uses_graph() and "graph" in sinks:
        present.append("graph")
    flt = dict(filter) if filter else None
    depth = settings.depth(k)
    rankings: dict[str, Sequence[ScoredChunk]] = {}
    top: float | None = None
    if "keywords" in present:
        rankings["keywords"] = sinks["keywords"].search(query, depth if len(present) > 1 else k, flt)
        top = float(rankings["keywords"][0].score) if rankings["keywords"] else None
        routed = settings.route_threshold is not None and top is not None and top >= settings.route_threshold
        if routed and len(present) > 1:
            return Retrieval(query, _as_hits(rankings["keywords"], "keywords", k), "keywords-routed", top)
    for name in ("vectors", "graph"):
        if name in present:
            rankings[name] = sinks[name].search(query, depth if len(present) > 1 else k, flt)
    if settings.mode == "hybrid" and not rankings.get("graph", True):
        del rankings["graph"]  # a query naming no entity ranks as if the graph were not asked
    if len(rankings) == 1:
        ((name, found),) = rankings.items()
        return Retrieval(query, _as_hits(found, name, k), name, top)  # type: ignore[arg-type]
    hits = fuse(rankings, k=k, weights=settings.weights, method=settings.fusion, rrf_k=settings.rrf_k)
    return Retrieval(query, hits, "hybrid", top)
