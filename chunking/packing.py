"""Greedy packing of small units (sentences, paragraphs, list items) into chunks of at most N tokens.

Every unit-based strategy (sentence, paragraph, markdown, html) ends here, so "at most N tokens, with M
tokens of overlap, cut only between units" is implemented once. Units are (start, end) character spans
of the original text; a packed chunk is the text from its first unit's start to its last unit's end, so
offsets stay exact by construction. The token count of every packed chunk is measured on its real
text, so the size limit holds exactly, not just on the estimate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from unichunk.chunking.pieces import token_starts
from unichunk.chunking.span_counts import SpanCounter

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Packed:
    start: int
    end: int
    token_count: int


def _gap_tokens(text: str, units: Sequence[tuple[int, int]]) -> list[int]:
    """Estimated tokens of the whitespace before each unit: a newline or a run of spaces is its own
    token, a single space merges into the next word (0 before the first unit)."""
    gaps = [0] * len(units)
    for j in range(1, len(units)):
        end, start = units[j - 1][1], units[j][0]
        gaps[j] = 1 if start - end > 1 or (start - end == 1 and text[end] == "\n") else 0
    return gaps


def split_to_fit(
    text: str, start: int, end: int, max_tokens: int, counter: SpanCounter
) -> list[tuple[int, int]]:
    """Cut `text[start:end]` into pieces of at most ~max_tokens tokens: between words, else between tokens."""
    if counter.count_span(start, end) <= max_tokens:
        return [(start, end)]
    words = [(m.start(), m.end()) for m in _WORD.finditer(text, start, end)]
    if len(words) > 1:
        pieces = [p for w in words for p in split_to_fit(text, w[0], w[1], max_tokens, counter)]
        counts = counter.count_spans(pieces)
        return [(p.start, p.end) for p in pack_units(text, pieces, counts, max_tokens, 0, counter)]
    # one run without whitespace: cut between tokens, a little under the limit so re-encoding fits
    step = max(1, max_tokens - 4)
    offsets = token_starts(text[start:end], counter.encoding_name)
    cuts = sorted({int(offsets[i]) for i in range(0, len(offsets) - 1, step)} | {end - start})
    return [(start + a, start + b) for a, b in pairwise(cuts) if b > a]


def fit_units(
    text: str, units: Sequence[tuple[int, int]], max_tokens: int, counter: SpanCounter
) -> tuple[list[tuple[int, int]], list[int]]:
    """Count each unit's tokens and split any unit larger than max_tokens; returns (units, counts)."""
    counts = counter.count_spans(units)
    if all(c <= max_tokens for c in counts):
        return list(units), counts
    fitted: list[tuple[int, int]] = []
    fitted_counts: list[int] = []
    for (s, e), c in zip(units, counts, strict=True):
        if c <= max_tokens:
            fitted.append((s, e))
            fitted_counts.append(c)
        else:  # count only the new pieces: re-counting every unit doubled the cost
            for piece, count in _split_counted(text, s, e, max_tokens, counter):
                fitted.append(piece)
                fitted_counts.append(count)
    return fitted, fitted_counts


def refine_oversize(
    text: str,
    units: Sequence[tuple[int, int]],
    counts: Sequence[int],
    max_tokens: int,
    counter: SpanCounter,
    finer: Callable[[str, int, int], list[tuple[int, int]]],
) -> tuple[list[tuple[int, int]], list[int]]:
    """Replace every unit over max_tokens by its `finer(text, start, end)` pieces, fitted with `fit_units`.

    The step down one level of the LlamaIndex-style hierarchy (paragraph -> sentence -> clause -> word ->
    token): units that fit keep their counts, only oversize ones are split and counted again.
    """
    if all(c <= max_tokens for c in counts):
        return list(units), list(counts)
    out_units: list[tuple[int, int]] = []
    out_counts: list[int] = []
    for (s, e), c in zip(units, counts, strict=True):
        if c <= max_tokens:
            out_units.append((s, e))
            out_counts.append(c)
            continue
        pieces, piece_counts = fit_units(text, finer(text, s, e), max_tokens, counter)
        out_units.extend(pieces)
        out_counts.extend(piece_counts)
    return out_units, out_counts


def _split_counted(
    text: str, start: int, end: int, max_tokens: int, counter: SpanCounter
) -> list[tuple[tuple[int, int], int]]:
    """`split_to_fit` plus counts; a piece that re-encodes to more than max_tokens is split again."""
    pieces = split_to_fit(text, start, end, max_tokens, counter)
    out: list[tuple[tuple[int, int], int]] = []
    for (a, b), count in zip(pieces, counter.count_spans(pieces), strict=True):
        if count > max_tokens and (a, b) != (start, end) and b - a > 1:
            out.extend(_split_counted(text, a, b, max_tokens, counter))
        else:
            out.append(((a, b), count))
    return out


def pack_units(
    text: str,
    units: Sequence[tuple[int, int]],
    unit_tokens: Sequence[int],
    max_tokens: int,
    overlap_tokens: int,
    counter: SpanCounter,
) -> list[Packed]:
    """Greedily pack consecutive units into chunks of at most max_tokens (measured on the real text).

    The next chunk starts with the trailing units of the previous one that fit in overlap_tokens (never
    the whole previous chunk, so packing always advances). A single unit larger than max_tokens becomes
    its own chunk; use `fit_units` first to prevent that.
    """
    packed: list[Packed] = []
    n = len(units)
    gaps = _gap_tokens(text, units)
    i = 0
    while i < n:
        j, estimate = i, 0
        while j < n:
            cost = unit_tokens[j] + (gaps[j] if j > i else 0)
            if j > i and estimate + cost > max_tokens:
                break
            estimate += cost
            j += 1
        while True:
            exact = counter.count_span(units[i][0], units[j - 1][1])
            if exact <= max_tokens or j - 1 == i:
                break
            # drop just enough trailing units (by their counts) to remove the excess, then re-measure
            excess = exact - max_tokens
            while j - 1 > i and excess > 0:
                j -= 1
                excess -= unit_tokens[j] + gaps[j]
        packed.append(Packed(units[i][0], units[j - 1][1], exact))
        if j >= n:
            break
        k, carried = j, 0
        while k - 1 > i and carried + unit_tokens[k - 1] <= overlap_tokens:
            k -= 1
            carried += unit_tokens[k]
        # the next chunk must reach at least one new unit, or it would repeat a tail of this one
        while k < j and carried + unit_tokens[j] > max_tokens:
            carried -= unit_tokens[k]
            k += 1
        i = k
    return packed
