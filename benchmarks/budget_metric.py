"""The strict metric: character recall / precision / IoU of a fixed budget of retrieved text.

Recall@k rewards whoever retrieves more text; what a RAG user pays for is context. So every retriever's
ranked chunks are poured into a budget of B characters, in rank order, and scored against the exact
reference spans (in the spirit of Chroma's chunking evaluation, whose "token-level" scores are character
ranges too):

- a chunk contributes only characters not already retrieved (overlapping windows are counted, and paid
  for, once: the context assembler merges them by offsets too);
- the chunk that would overflow the budget is cut: its new characters are kept in text order until the
  budget is exactly full, the rest dropped (a generator reads a chunk from its start, so a cut keeps the
  head); ranking then stops;
- recall = reference characters retrieved / reference characters; precision = reference characters
  retrieved / characters retrieved; IoU = reference characters retrieved / |retrieved ∪ reference|.

The same fixed BM25 (bm25s, English stopwords, no stemming) ranks every strategy's chunk spans, so the
BM25 figures differ only by where the boundaries are; vectors and hybrid come from `retrieval.search`.
"""

from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np

Interval = tuple[int, int]
Span = tuple[str, int, int]  # (document_id, start, end)
BUDGETS = (1000, 2000, 4000)  # characters


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


def fill_budget(ranked: Sequence[Span], budget: int) -> dict[str, list[Interval]]:
    """Per document, the merged characters a reader gets from `ranked` within `budget` characters."""
    taken: dict[str, list[Interval]] = {}
    left = budget
    for doc, start, end in ranked:
        if left <= 0:
            break
        covered = taken.setdefault(doc, [])
        for s, e in subtract((start, end), covered):
            if left <= 0:
                break
            cut = min(e, s + left)
            covered.append((s, cut))
            left -= cut - s
        taken[doc] = merge(covered)
    return taken


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


def strict_scores(
    references: Sequence[Interval], doc_id: str, ranked: Sequence[Span], budget: int
) -> tuple[float, float, float]:
    """(recall, precision, IoU) of the budget-filled retrieval against `references` in document `doc_id`."""
    refs = merge(references)
    taken = fill_budget(ranked, budget)
    hit = overlap(refs, taken.get(doc_id, []))
    retrieved = sum(e - s for spans in taken.values() for s, e in spans)
    ref_len = sum(e - s for s, e in refs)
    union = retrieved + ref_len - hit
    return (
        hit / ref_len if ref_len else 0.0,
        hit / retrieved if retrieved else 0.0,
        hit / union if union else 0.0,
    )


def small_to_big(
    ranked: Sequence[Span], neighbours: dict[Span, tuple[Span | None, Span | None]]
) -> list[Span]:
    """Small-to-big: each small hit followed by its next and previous chunk (the budget cuts the tail)."""
    out: list[Span] = []
    for hit in ranked:
        before, after = neighbours.get(hit, (None, None))
        out += [hit] + [n for n in (after, before) if n is not None]
    return out


class FixedBM25:
    """One BM25 (bm25s defaults: k1=1.5, b=0.75, English stopwords) over a strategy's chunk spans."""

    def __init__(self, spans: Sequence[Span], texts: Sequence[str]) -> None:
        self.spans = list(spans)
        self.index = bm25s.BM25()
        self.index.index(
            bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False
        )

    def ranked(self, query: str, depth: int) -> list[Span]:
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        k = min(depth, len(self.spans))
        if not tokens.vocab or k == 0:
            return []
        docs, scores = self.index.retrieve(tokens, k=k, show_progress=False)
        return [self.spans[int(i)] for i, sc in zip(docs[0], scores[0], strict=True) if sc > 0]


def paired_bootstrap(ours: np.ndarray, theirs: np.ndarray, rounds: int = 2000, seed: int = 0) -> tuple:
    """(mean difference, 95 % CI low, high, wins, losses, ties) of per-question `ours - theirs`; the CI
    resamples questions (a fixed seed, so the printed table is reproducible)."""
    diff = np.asarray(ours, dtype=float) - np.asarray(theirs, dtype=float)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(rounds, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    wins, losses = int((diff > 1e-9).sum()), int((diff < -1e-9).sum())
    return float(diff.mean()), float(low), float(high), wins, losses, len(diff) - wins - losses
