"""The strict metric: character recall / precision / IoU of a fixed budget of retrieved text.

Recall@k rewards whoever retrieves more text; what a RAG user pays for is context. So a retriever's ranked
chunks are poured into a budget of B characters (or B cl100k tokens), in rank order, and scored against the
exact reference spans (in the spirit of Chroma's chunking evaluation, whose "token-level" scores are
character ranges too):

- a chunk contributes only characters not already retrieved (overlapping windows are counted, and paid
  for, once: the context assembler merges them by offsets too);
- the chunk that would overflow the budget is cut: its new characters are kept in text order until the
  budget is exactly full, the rest dropped (a generator reads a chunk from its start, so a cut keeps the
  head); ranking then stops;
- recall = reference characters retrieved / reference characters; precision = reference characters
  retrieved / characters retrieved; IoU = reference characters retrieved / |retrieved ∪ reference|.

In tokens, a stretch of text costs the cl100k tokens that start inside it (`TokenMeter`), so a budget of
B tokens holds what a prompt of B tokens would. At document level, `document_rank` gives hit@k and the
reciprocal rank. This is the one owner of the metric: `unichunk eval`, the gated rebuild and the
benchmarks (`benchmarks.budget_metric`) all score with it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Interval = tuple[int, int]
Span = tuple[str, int, int]  # (document_id, start, end)
BUDGETS = (1000, 2000, 4000)  # characters: the default budgets


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
    (`unichunk.chunking.packing.token_starts`); a stretch costs the tokens starting inside it. A document
    the meter does not know (retrieved, but holding no reference) is priced at `chars_per_token`."""

    starts: Mapping[str, np.ndarray]
    chars_per_token: float = 4.0

    def cost(self, doc: str, start: int, end: int) -> int:
        arr = self.starts.get(doc)
        if arr is None:
            return int(np.ceil((end - start) / self.chars_per_token))
        return int(np.searchsorted(arr, end) - np.searchsorted(arr, start))

    def cut(self, doc: str, start: int, end: int, budget: int) -> int:
        """The furthest end <= `end` such that [start, cut) costs at most `budget` tokens."""
        arr = self.starts.get(doc)
        if arr is None:
            return min(end, start + int(budget * self.chars_per_token))
        first = int(np.searchsorted(arr, start))
        return end if first + budget >= len(arr) else min(end, int(arr[first + budget]))


def token_budgets(char_budgets: Sequence[int], chars_per_token: float) -> tuple[int, ...]:
    """Character budgets as cl100k tokens of text with this many characters a token."""
    return tuple(round(b / chars_per_token) for b in char_budgets)


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


def spans_scores(
    references: Mapping[str, Sequence[Interval]], taken: Mapping[str, Sequence[Interval]]
) -> tuple[float, float, float]:
    """(recall, precision, IoU) of the retrieved characters `taken` (merged, per document) against
    `references` (per document: a question's references may lie in several documents)."""
    refs = {doc: merge(spans) for doc, spans in references.items()}
    hit = sum(overlap(spans, taken.get(doc, [])) for doc, spans in refs.items())
    retrieved = sum(length(spans) for spans in taken.values())
    ref_len = sum(length(spans) for spans in refs.values())
    union = retrieved + ref_len - hit
    return (
        hit / ref_len if ref_len else 0.0,
        hit / retrieved if retrieved else 0.0,
        hit / union if union else 0.0,
    )


def interval_scores(
    references: Sequence[Interval], doc_id: str, taken: Mapping[str, Sequence[Interval]]
) -> tuple[float, float, float]:
    """`spans_scores` for references that all lie in document `doc_id`."""
    return spans_scores({doc_id: references}, taken)


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


def budget_grid(
    references: Mapping[str, Sequence[Interval]],
    ranked: Sequence[Span],
    budgets: Sequence[int],
    meter: TokenMeter | None = None,
) -> np.ndarray:
    """(len(budgets), 3): (recall, precision, IoU) of the budget-filled retrieval at each budget, for
    references in any number of documents."""
    return np.array([spans_scores(references, fill_budget(ranked, b, meter)) for b in budgets])


def document_rank(ranked_documents: Sequence[str], relevant: Collection[str], k: int) -> int | None:
    """The rank (1-based) of the first of the top `k` hits that lies in a relevant document, or None:
    hit@k is whether there is one, the reciprocal rank is 1 / it (0 without one)."""
    for rank, document in enumerate(ranked_documents[:k], start=1):
        if document in relevant:
            return rank
    return None
