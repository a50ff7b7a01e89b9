"""Hybrid retrieval: keyword and vector hits fused by reciprocal-rank fusion (Cormack et al., 2009).

RRF uses ranks only, so BM25 scores and cosine similarities never need calibrating against each other;
this works because both stores hold the same chunks under the same IDs, so a chunk found by both simply
collects two contributions. score(c) = sum over retrievers r of weight_r / (rrf_k + rank_r(c)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from unichunk.sinks.base import ScoredChunk

# The RRF constant search uses, chosen by measurement (issue 27, benchmarks/README.md): 0 ranks by 1/rank,
# so the lists' top places decide, where the classic 60 flattens them.
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
            hit = hits.get(found.chunk_id)
            if hit is None:
                hit = hits[found.chunk_id] = Hit(found)
            if retriever in hit.ranks:  # a retriever listing a chunk twice counts once, at its best rank
                continue
            hit.ranks[retriever] = rank
            hit.scores[retriever] = float(found.score)
            hit.score += weight / (rrf_k + rank)
    ordered = sorted(hits.values(), key=lambda h: (-h.score, min(h.ranks.values()), h.chunk_id))
    return ordered[:k]
