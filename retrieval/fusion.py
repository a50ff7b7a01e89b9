"""Hybrid retrieval: keyword, vector (and graph) hits fused into one ranking.

Both stores hold the same chunks under the same IDs, so a chunk found by several lists collects a
contribution from each. Two families: reciprocal-rank fusion (Cormack et al., 2009; `rrf_fuse`), which
uses ranks only, score(c) = sum over retrievers r of weight_r / (rrf_k + rank_r(c)); and normalised-score
fusion (`score_fuse`; Weaviate's relative-score fusion is its min-max form), which maps each list's raw
scores to a common scale per query and sums them weighted. `fuse` runs the one `method` names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean, pstdev
from typing import Literal

from unichunk.sinks.base import ScoredChunk

Fusion = Literal["rrf", "minmax", "zscore"]
# How search fuses, chosen by measurement (issue 27, `benchmarks.fusion_tuning`, benchmarks/README.md):
# re-tuned on the tune half once vectors were composed from segments (`model_input=segments`), min-max
# score fusion led RRF k=0 by 0.8 mean points there, beyond the 0.25-point tie of the rule set beforehand.
FUSION: Fusion = "minmax"
# The RRF constant when `rrf` fuses: 0 ranks by 1/rank, so the lists' top places decide, where the classic
# 60 flattens them (issue 27, benchmarks/README.md).
RRF_K = 0


@dataclass
class Hit:
    """One fused result: the chunk as a retriever returned it, the fused `score`, and in `ranks`/`scores`
    the 1-based rank and raw score from each retriever. The chunk's identity, offsets and text read
    through (`hit.content`), so they are held once, not copied."""

    chunk: ScoredChunk
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def chunk_id(self) -> str:
        return self.chunk.chunk_id

    @property
    def document_id(self) -> str:
        return self.chunk.document_id

    @property
    def content(self) -> str:
        return self.chunk.content

    @property
    def start_char(self) -> int:
        return self.chunk.start_char

    @property
    def end_char(self) -> int:
        return self.chunk.end_char

    @property
    def chunk_index(self) -> int:
        return self.chunk.chunk_index

    @property
    def heading_chain(self) -> tuple[str, ...]:
        return tuple(self.chunk.heading_chain)


def rrf_fuse(
    rankings: Mapping[str, Sequence[ScoredChunk]],
    k: int = 10,
    weights: Mapping[str, float] | None = None,
    rrf_k: int = RRF_K,
) -> list[Hit]:
    """Fuse ranked lists (best first) into the top `k` hits; ties break by best single rank, then ID."""
    hits: dict[str, Hit] = {}
    for retriever, ranked in rankings.items():
        weight = 1.0 if weights is None else weights.get(retriever, 1.0)
        for rank, found in enumerate(ranked, start=1):
            _count(hits, retriever, rank, found, weight / (rrf_k + rank))
    return _best(hits, k)


def score_fuse(
    rankings: Mapping[str, Sequence[ScoredChunk]],
    k: int = 10,
    weights: Mapping[str, float] | None = None,
    normalise: Literal["minmax", "zscore"] = "minmax",
) -> list[Hit]:
    """Fuse ranked lists by their scores: per list, scores mapped to a common scale (`minmax`: the list's
    best 1, its last 0; `zscore`: standard deviations from the list's mean), then summed with `weights`.
    A chunk a list does not hold counts as that list's lowest value, so being missing never beats being
    listed last; where a list's scores are all level (a keyword found in one chunk), each listed chunk
    counts as its best, not as its last. A list weighted 0 takes no part: its chunks would tie with the
    other lists' last ones (scaled to 0) and win the tie by their own rank. Ties break as in `rrf_fuse`:
    best single rank, then ID."""
    hits: dict[str, Hit] = {}
    for retriever, ranked in rankings.items():
        weight = 1.0 if weights is None else weights.get(retriever, 1.0)
        if weight == 0:
            continue
        firsts: dict[str, tuple[int, ScoredChunk]] = {}
        for rank, found in enumerate(ranked, start=1):
            firsts.setdefault(found.chunk_id, (rank, found))  # a chunk listed twice counts at its best rank
        if not firsts:
            continue
        raw = [float(found.score) for _, found in firsts.values()]
        low, high = min(raw), max(raw)
        if high == low:  # one hit, or all level: each is the list's best (1), a missing one 0
            scaled, floor = [1.0] * len(raw), 0.0
        elif normalise == "minmax":
            scaled, floor = [(x - low) / (high - low) for x in raw], 0.0
        else:
            mean, spread = fmean(raw), pstdev(raw)
            scaled = [(x - mean) / spread for x in raw]
            floor = min(scaled)
        for (rank, found), value in zip(firsts.values(), scaled, strict=True):
            _count(hits, retriever, rank, found, weight * (value - floor))
    return _best(hits, k)


def _count(hits: dict[str, Hit], retriever: str, rank: int, found: ScoredChunk, contribution: float) -> None:
    """Add `retriever`'s `contribution` for `found` at `rank`; a retriever listing a chunk twice counts
    once, at its best (first) rank."""
    hit = hits.get(found.chunk_id)
    if hit is None:
        hit = hits[found.chunk_id] = Hit(found)
    if retriever in hit.ranks:
        return
    hit.ranks[retriever] = rank
    hit.scores[retriever] = float(found.score)
    hit.score += contribution


def _best(hits: dict[str, Hit], k: int) -> list[Hit]:
    """The top `k` by fused score; ties break by best single rank, then chunk ID."""
    return sorted(hits.values(), key=lambda h: (-h.score, min(h.ranks.values()), h.chunk_id))[:k]


def fuse(
    rankings: Mapping[str, Sequence[ScoredChunk]],
    k: int = 10,
    weights: Mapping[str, float] | None = None,
    method: Fusion = "rrf",
    rrf_k: int = RRF_K,
) -> list[Hit]:
    """The top `k` of `rankings` fused by `method`: `rrf` (with `rrf_k`), or `minmax` / `zscore` score
    fusion."""
    if method == "rrf":
        return rrf_fuse(rankings, k=k, weights=weights, rrf_k=rrf_k)
    return score_fuse(rankings, k=k, weights=weights, normalise=method)
