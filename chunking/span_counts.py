"""Exact token counts of spans of one text, from a single tokenization of the whole text.

The packing strategies (sentence, paragraph, markdown, html) count every unit, then every packed chunk;
encoding each slice would tokenize the text over and over. `IndexedCounter` tokenizes the text once and
counts a span [a, b) as

    tokens(text[a:x1]) + (whole-text tokens starting in [x1, x2)) + tokens(text[x2:b])

where x1 and x2 are the first and last safe cuts inside the span (`unichunk.chunking.pieces`: positions where
cl100k's pre-tokenizer starts a piece whatever surrounds them). At a safe cut the tokens of a text are
the tokens before it followed by the tokens after it, so this equals encoding `text[a:b]` alone, exactly.
Head and tail are a word or two, cached by string; a span without a safe cut inside is encoded. Encodings
whose cut rules are not verified get `SliceCounter`, which encodes every span.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Protocol

import numpy as np

from unichunk.chunking.pieces import (
    SEGMENTABLE_ENCODINGS,
    char_offsets,
    safe_cut_tokens,
    segment_bounds,
    token_table,
)
from unichunk.chunking.tokenizer import TokenCounter, token_array

INDEX_SEGMENT_CHARS = 1 << 20  # the text is tokenized in segments this long, so temporaries stay small
_CACHED_CHARS = 48  # heads, tails and short spans up to this long are counted once per distinct string
_CACHE_ENTRIES = 200_000  # then the cache starts over (bounded memory)
_CACHES: dict[str, dict[str, int]] = {}


class SpanCounter(Protocol):
    """Token counts of `[start, end)` spans of the one text the counter was made for."""

    encoding_name: str

    def count_span(self, start: int, end: int) -> int: ...

    def count_spans(self, spans: Sequence[tuple[int, int]]) -> list[int]: ...


def span_counter(text: str, counter: TokenCounter) -> SpanCounter:
    """The fastest exact counter for spans of `text` measured in `counter`'s encoding."""
    if counter.encoding_name in SEGMENTABLE_ENCODINGS:
        try:
            return IndexedCounter(text, counter)
        except UnicodeEncodeError:  # a lone surrogate, which tiktoken reads its own way in each slice
            pass
    return SliceCounter(text, counter)


class SliceCounter:
    """Encodes each span's slice (`TokenCounter`), for encodings without verified cut rules."""

    def __init__(self, text: str, counter: TokenCounter) -> None:
        self.text, self.counter, self.encoding_name = text, counter, counter.encoding_name

    def count_span(self, start: int, end: int) -> int:
        return self.counter.count(self.text[start:end])

    def count_spans(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        return self.counter.count_many([self.text[a:b] for a, b in spans])


class IndexedCounter:
    """Counts spans of `text` from its safe cuts and their token indices (see the module docstring)."""

    def __init__(self, text: str, counter: TokenCounter, segment_chars: int = INDEX_SEGMENT_CHARS) -> None:
        self.text, self.counter, self.encoding_name = text, counter, counter.encoding_name
        self._cache = _CACHES.setdefault(self.encoding_name, {})
        table = token_table(self.encoding_name)
        cut_chars: list[np.ndarray] = []  # character offset of each safe cut, ascending
        cut_tokens: list[np.ndarray] = []  # index of the whole-text token that starts there
        base_token = 0
        for seg_start, seg_end in segment_bounds(text, segment_chars, self.encoding_name):
            segment = text[seg_start:seg_end] if seg_end - seg_start < len(text) else text
            tokens = token_array(segment, self.encoding_name, surrogates=False)
            cuts = safe_cut_tokens(tokens, table)
            cut_chars.append(char_offsets(tokens, table, at=cuts) + seg_start)
            cut_tokens.append(cuts + base_token)
            base_token += len(tokens)
        self._cut_chars = np.concatenate(cut_chars) if cut_chars else np.zeros(0, dtype=np.int64)
        self._cut_tokens = np.concatenate(cut_tokens) if cut_tokens else np.zeros(0, dtype=np.int64)

    def count_span(self, start: int, end: int) -> int:
        """`count_spans` for one span (packing checks each chunk it closes), without array set-up."""
        cuts = self._cut_chars
        first, last = int(cuts.searchsorted(start + 1)), int(cuts.searchsorted(end - 1)) - 1
        if first > last:
            return self._piece_count(self.text[start:end])
        middle = int(self._cut_tokens[last] - self._cut_tokens[first])
        head, tail = self.text[start : int(cuts[first])], self.text[int(cuts[last]) : end]
        return self._piece_count(head) + middle + self._piece_count(tail)

    def count_spans(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        if not spans:
            return []
        bounds = np.fromiter(chain.from_iterable(spans), dtype=np.int64, count=2 * len(spans))
        starts, ends = bounds[0::2], bounds[1::2]
        # usable cuts lie in [start + 1, end - 2]: each rule looks at the characters either side of the cut
        first = np.searchsorted(self._cut_chars, starts + 1)
        last = np.searchsorted(self._cut_chars, ends - 1) - 1
        usable = (first <= last).tolist()
        if len(self._cut_chars):
            first, last = np.minimum(first, len(self._cut_chars) - 1), np.maximum(last, 0)
            x1, x2 = self._cut_chars[first], self._cut_chars[last]
            middle = (self._cut_tokens[last] - self._cut_tokens[first]).tolist()  # tokens in [x1, x2)
        else:
            x1, x2, middle = starts, ends, [0] * len(spans)
        text, cached, piece = self.text, self._cache.get, self._piece_count
        counts = []
        for a, b, c1, c2, mid, ok in zip(
            starts.tolist(), ends.tolist(), x1.tolist(), x2.tolist(), middle, usable, strict=True
        ):
            if ok:  # a non-empty piece has at least one token, so a cached count is never 0
                head, tail = text[a:c1], text[c2:b]
                counts.append((cached(head) or piece(head)) + mid + (cached(tail) or piece(tail)))
            else:
                whole = text[a:b]
                counts.append(cached(whole) or piece(whole))
        return counts

    def _piece_count(self, piece: str) -> int:
        """Tokens of `piece` encoded alone; short pieces (a word or two, mostly) from the cache."""
        if len(piece) > _CACHED_CHARS:
            return self.counter.count(piece)
        count = self._cache.get(piece)
        if count is None:
            if len(self._cache) >= _CACHE_ENTRIES:
                self._cache.clear()
            count = self._cache[piece] = self.counter.count(piece)
        return count
