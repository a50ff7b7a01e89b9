"""fixed_chars: windows of N characters advancing by N - overlap; optionally end a window at a sentence end.

The cheapest strategy, and the one whose chunks are most predictable in size. Cuts are plain character
offsets, so a cut can fall inside a word (or between a base character and its combining mark) unless
`prefer_sentence_end` finds a sentence end in the last fifth of the window.
"""

from __future__ import annotations

import re

from unichunk.chunking.base import BaseChunker, Span
from unichunk.chunking.models import Document

_SENTENCE_END = re.compile(r"[.!?](?=\s)")
SENTENCE_SEARCH_SHARE = 0.2  # look for a sentence end in the last 20% of a window


class FixedCharsChunker(BaseChunker):
    """Windows [0, 900), [780, 1680), ... of characters; whitespace-only windows are dropped by the base."""

    name = "fixed_chars"

    def spans(self, text: str, document: Document) -> list[Span]:
        size, overlap = self.strategy.sizes_for(self.name)
        n = len(text)
        search = max(1, int(size * SENTENCE_SEARCH_SHARE)) if self.strategy.prefer_sentence_end else 0
        spans: list[Span] = []
        start = 0
        while True:
            end = min(start + size, n)
            if search and end < n:
                end = _last_sentence_end(text, end - search, end) or end
            spans.append(Span(start, end))
            if end >= n:
                return spans
            # the next window must bring at least one character the previous one did not have
            start = max(end - overlap, start + 1)


def _last_sentence_end(text: str, begin: int, end: int) -> int | None:
    """Offset just after the last `[.!?]` followed by whitespace in text[begin:end], if any."""
    last = None
    for match in _SENTENCE_END.finditer(text, begin, end + 1):
        if match.end() <= end:
            last = match.end()
    return last
