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
B tokens holds what a prompt of B tokens would. This module is the benchmarks' one interval arithmetic
(`merge`, `subtract`, `overlap`) and their one budget filler (`fill_budget`); the lenient top-k scores of
`retrieval_quality` use the same merge.

The same fixed BM25 (`FixedBM25`: bm25s, English stopwords, no stemming) ranks every strategy's chunk spans,
so its figures differ only by where the boundaries are. Paired comparisons resample questions
(`paired_bootstrap`) and count wins and losses with an exact two-sided sign test (`sign_test`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import comb

import bm25s
import numpy as np

Interval = tuple[int, int]
Span = tuple[str, int, int]  # (document_id, start, end)
BUDGETS = (1000, 2000, 4000)  # characters: the budgets
GRID = (250, 500, 1000, 1500, 2000, 3000, 4000, 6000)  # characters; the plots use all, the tables BUDGETS


def merge(intervals: Sequence[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the same characters (touching ones joined)."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return [(s, e) for s, e in out]


def subtract(span: Interval, covered: Sequence[Interval]) -> list[Interval]:
    """The parts of `span` not in the merged, sorted `covered`, in text order."""
    s, e = span
    out = []
    for cs, ce in covered:
        if ce <= s or cs >= e:
            continue
        if cs > s:
            out.append((s, cs))
        s = max(s, ce)
    if s < e:
        out.append((s, e))
    return out


def overlap(a: Sequence[Interval], b: Sequence[Interval]) -> int:
    """Characters shared by two merged, sorted interval lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def length(intervals: Sequence[Interval]) -> int:
    return sum(e - s for s, e in intervals)


@dataclass(frozen=True)
class TokenMeter:
    """Prices text in cl100k tokens: per document, the sorted character offsets where its tokens start
    (`unichunk.chunking.packing.token_starts`); a stretch costs the tokens starting inside it."""

    starts: Mapping[str, np.ndarray]

    def cost(self, doc: str, start: int, end: int) -> int:
        arr = self.starts[doc]
        return int(np.searchsorted(arr, end) - np.searchsorted(arr, start))

    def cut(self, doc: str, start: int, end: int, budget: int) -> int:
        """The furthest end <= `end` such that [start, cut) costs at most `budget` tokens."""
        arr = self.starts[doc]
        first = int(np.searchsorted(arr, start))
        return end if first + budget >= len(arr) else min(end, int(arr[first + budget]))


def fill_budget(
    ranked: Sequence[Span], budget: int, meter: TokenMeter | None = None
) -> dict[str, list[Interval]]:
    """Per document, the merged characters a reader gets from `ranked` within `budget` characters (or
    tokens, with `meter`): new characters only, the overflowing chunk cut to its head."""
    taken: dict[str, list[Interval]] = {}
    left = budget
    for doc, start, end in ranked:
        if left <= 0:
            break
        covered = taken.setdefault(doc, [])
        for s, e in subtract((start, end), covered):
            if left <= 0:
                break
            if meter is None:
                cut = min(e, s + left)
                left -= cut - s
            else:
                cut = meter.cut(doc, s, e, left)
                left -= meter.cost(doc, s, cut)
            if cut > s:
                covered.append((s, cut))
        taken[doc] = merge(covered)
    return taken


def interval_scores(
    references: Sequence[Interval], doc_id: str, taken: Mapping[str, Sequence[Interval]]
) -> tuple[float, float, float]:
    """(recall, precision, IoU) of the retrieved characters `taken` (merged, per document) against
    `references` in document `doc_id`: the one scoring of every view."""
    refs = merge(references)
    hit = overlap(refs, taken.get(doc_id, []))
    retrieved = sum(length(spans) for spans in taken.values())
    ref_len = length(refs)
    union = retrieved + ref_len - hit
    return (
        hit / ref_len if ref_len else 0.0,
        hit / retrieved if retrieved else 0.0,
        hit / union if union else 0.0,
    )


def strict_scores(
    references: Sequence[Interval],
    doc_id: str,
    ranked: Sequence[Span],
    budget: int,
    meter: TokenMeter | None = None,
) -> tuple[float, float, float]:
    """(recall, precision, IoU) of the budget-filled retrieval against `references` in document `doc_id`."""
    return interval_scores(references, doc_id, fill_budget(ranked, budget, meter))


def strict_grid(
    references: Sequence[Interval],
    doc_id: str,
    ranked: Sequence[Span],
    budgets: Sequence[int],
    meter: TokenMeter | None = None,
) -> np.ndarray:
    """(len(budgets), 3): `strict_scores` at each budget."""
    return np.array([strict_scores(references, doc_id, ranked, b, meter) for b in budgets])


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


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test: the chance of a split at least this uneven if wins and losses were
    equally likely (ties dropped). 1.0 when nothing differs."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Paired:
    """`ours - theirs` question by question: mean, 95 % bootstrap CI, wins / losses / ties, sign-test p."""

    mean: float
    low: float
    high: float
    wins: int
    losses: int
    ties: int
    p: float

    @property
    def significant(self) -> bool:
        """The CI excludes zero (the sign test is reported beside it, not combined)."""
        return self.low > 0 or self.high < 0


def paired_bootstrap(ours: np.ndarray, theirs: np.ndarray, rounds: int = 2000, seed: int = 0) -> Paired:
    """Per-question `ours - theirs`: the CI resamples questions (a fixed seed, so a printed table is
    reproducible); the sign test counts questions each side does better on."""
    diff = np.asarray(ours, dtype=float) - np.asarray(theirs, dtype=float)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(rounds, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    wins, losses = int((diff > 1e-9).sum()), int((diff < -1e-9).sum())
    ties = len(diff) - wins - losses
    return Paired(float(diff.mean()), float(low), float(high), wins, losses, ties, sign_test(wins, losses))
