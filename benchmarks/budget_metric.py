"""The strict metric for the benchmarks: recall / precision / IoU of a fixed budget of retrieved text.

The metric itself (interval arithmetic `merge`, `subtract`, `overlap`, the budget filler `fill_budget`, the
token meter, the paired comparison) is shipped in `unichunk.retrieval.evaluation.metric`, whose docstring
defines it; `unichunk eval` and the gated rebuild score with it. This module re-exports it for the
benchmarks and adds what only they need: the budget grid of the plots and the fixed BM25
(`FixedBM25`: bm25s, English stopwords, no stemming), which ranks every strategy's chunk spans so its
figures differ only by where the boundaries are.
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
