"""The strict metric: character recall / precision / IoU of a fixed budget of retrieved text.

Recall@k rewards whoever retrieves more text; what a RAG user pays for is context. So every retriever's
ranked chunks are poured into a budget of B characters (or B cl100k tokens), in rank order, and scored
against the exact reference spans (in the spirit of Chroma's chunking evaluation, whose "token-level"
scores are character ranges too):

- a chunk contributes only characters not already retrieved (overlapping windows are counted, and paid
  for, once: the context assembler merges them by offsets too);
- the chunk that would overflow the budget is cut: its new characters are kept in text order until the
  budget is exactly full, the rest dropped (a generator reads a chunk from its start, so a cut keeps the
  head); ranking then stops;
- recall = reference characters retrieved / reference characters; precision = reference characters
  retrieved / characters retrieved; IoU = reference characters retrieved / |retrieved ∪ reference|.

In tokens, a stretch of text costs the cl100k tokens that start inside it (`TokenMeter`), so a budget of
B tokens holds what a prompt of B tokens would. The metric itself (interval arithmetic `merge`, `subtract`,
`overlap`, the budget filler `fill_budget`, the paired comparison) is shipped, in
`unichunk.retrieval.evaluation`, where `unichunk eval` and the gated rebuild score with it; this module
re-exports it for the benchmarks and adds what only they need: the budget grid of the plots and the fixed
BM25.

The same fixed BM25 (`FixedBM25`: bm25s, English stopwords, no stemming) ranks every strategy's chunk spans,
so its figures differ only by where the boundaries are. Paired comparisons resample questions
(`paired_bootstrap`) and count wins and losses with an exact two-sided sign test (`sign_test`).
"""

from __future__ import annotations

from collections.abc import Sequence

import bm25s

from unichunk.retrieval.evaluation.metric import (
    BUDGETS,
    Interval,
    Span,
    TokenMeter,
    fill_budget,
    interval_scores,
    length,
    merge,
    overlap,
    strict_grid,
    strict_scores,
    subtract,
)
from unichunk.retrieval.evaluation.paired import Paired, paired_bootstrap, sign_test

__all__ = [
    "BUDGETS",
    "GRID",
    "FixedBM25",
    "Interval",
    "Paired",
    "Span",
    "TokenMeter",
    "fill_budget",
    "interval_scores",
    "length",
    "merge",
    "overlap",
    "paired_bootstrap",
    "sign_test",
    "strict_grid",
    "strict_scores",
    "subtract",
]

GRID = (250, 500, 1000, 1500, 2000, 3000, 4000, 6000)  # characters; the plots use all, the tables BUDGETS


class FixedBM25:
    """One BM25 (bm25s defaults: k1=1.5, b=0.75, English stopwords, no stemming) over a strategy's chunks."""

    def __init__(self, spans: Sequence[Span], texts: Sequence[str]) -> None:
        self.spans = list(spans)
        self.index = bm25s.BM25()
        self.index.index(
            bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False
        )

    def ranked(self, query: str, depth: int) -> list[Span]:
        """The best `depth` chunks with a positive score, best first."""
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        k = min(depth, len(self.spans))
        if not tokens.vocab or k == 0:
            return []
        docs, scores = self.index.retrieve(tokens, k=k, show_progress=False)
        return [self.spans[int(i)] for i, sc in zip(docs[0], scores[0], strict=True) if sc > 0]
