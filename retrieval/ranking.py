"""Ranking: the top chunks for a query from BM25, vectors or both (the first step of `unichunk.retrieval.search`).

BM25 and vector top-n are fused by reciprocal-rank fusion (`unichunk.retrieval.fusion.rrf_fuse`). Optional FTS-first
routing: when the best BM25 score clears `route_threshold`, the query is answered by keywords alone and
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
from unichunk.retrieval.fusion import Hit, rrf_fuse
from unichunk.sinks.base import ChunkSearch, ScoredChunk, SearchFilter

Mode = Literal["hybrid", "keywords", "vectors"]
Route = Literal["hybrid", "keywords", "vectors", "keywords-routed"]
MODES: tuple[str, ...] = ("hybrid", "keywords", "vectors")


class RetrievalError(UnichunkError, ValueError):
    """A search that cannot be run as asked (an unknown mode, no store to search)."""


@dataclass(frozen=True)
class RetrievalSettings:
    """How to rank: which retrievers, RRF constants and weights, candidate depth, routing threshold.

    The fusion constants were chosen by measurement (issue 27, `benchmarks.fusion_tuning`: picked on one
    half of the evaluation questions, reported on the other; benchmarks/README.md): rrf_k 0 with vectors
    at 0.75 of keywords' weight is nearly an interleaving of the two lists that lets BM25 lead, where a
    chunk both retrievers find rises. On the half it was chosen on it beat the textbook RRF 60 with equal
    weights and min-max or z-score fusion of the raw scores; benchmarks/README.md has the held-out figures."""

    mode: Mode = "hybrid"
    rrf_k: int = 0
    weights: Mapping[str, float] = field(default_factory=lambda: {"keywords": 1.0, "vectors": 0.75})
    candidates: int | None = None  # per retriever; default max(4k, 20)
    route_threshold: float | None = None  # BM25 score that answers alone; None = always fuse

    def depth(self, k: int) -> int:
        return self.candidates or max(4 * k, 20)


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
    """Top `k` chunks for `query` from the "keywords" (BM25) and/or "vectors" sinks in `sinks`.

    A mode whose sink is absent falls back to the one present (hybrid with only BM25 is BM25), so a
    deployment without a vector store still answers; with neither, RetrievalError.
    """
    settings = settings or RetrievalSettings()
    if settings.mode not in MODES:
        raise RetrievalError(f"mode must be one of {MODES}, not {settings.mode!r}")
    query = query.strip()
    if k <= 0 or not query:
        return Retrieval(query, [], "hybrid" if settings.mode == "hybrid" else settings.mode)
    wanted = ("keywords", "vectors") if settings.mode == "hybrid" else (settings.mode,)
    present = [name for name in wanted if name in sinks] or [n for n in ("keywords", "vectors") if n in sinks]
    if not present:
        raise RetrievalError(f"retrieval needs a 'keywords' or 'vectors' sink, got {sorted(sinks)}")
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
    if "vectors" in present:
        rankings["vectors"] = sinks["vectors"].search(query, depth if len(present) > 1 else k, flt)
    if len(rankings) == 1:
        ((name, found),) = rankings.items()
        return Retrieval(query, _as_hits(found, name, k), name, top)  # type: ignore[arg-type]
    hits = rrf_fuse(rankings, k=k, weights=settings.weights, rrf_k=settings.rrf_k)
    return Retrieval(query, hits, "hybrid", top)
