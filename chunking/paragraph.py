"""paragraph: pack whole paragraphs into chunks of at most N tokens; split only paragraphs that are too big.

Paragraphs are the text between matches of `ChunkStrategy.paragraph_separator` (a regular expression,
default: a blank line). A paragraph over the limit is cut into sentences, then words, then tokens, so the
size limit holds while cuts stay at the most natural boundary available.
"""

from __future__ import annotations

import re
from functools import lru_cache

from chunking.base import BaseChunker, Span
from chunking.models import Document
from chunking.packing import fit_units, pack_units
from chunking.sentences import sentence_spans


@lru_cache(maxsize=16)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def paragraph_spans(text: str, separator: str) -> list[tuple[int, int]]:
    """Paragraphs of `text` between separator matches, whitespace trimmed (empty matches are ignored)."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for match in _compile(separator).finditer(text):
        if match.end() == match.start():
            continue
        _append_trimmed(text, cursor, match.start(), spans)
        cursor = match.end()
    _append_trimmed(text, cursor, len(text), spans)
    return spans


def _append_trimmed(text: str, start: int, end: int, out: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        out.append((start, end))


class ParagraphChunker(BaseChunker):
    """Greedy packing of paragraphs up to `chunk_size` tokens (default 512, no overlap)."""

    name = "paragraph"

    def spans(self, text: str, document: Document) -> list[Span]:
        size, overlap = self.strategy.sizes_for(self.name)
        units = paragraph_spans(text, self.strategy.paragraph_separator)
        counts = self.counter.count_many([text[s:e] for s, e in units])
        if any(c > size for c in counts):
            fitted: list[tuple[int, int]] = []
            fitted_counts: list[int] = []
            for (s, e), c in zip(units, counts, strict=True):
                if c <= size:
                    fitted.append((s, e))
                    fitted_counts.append(c)
                    continue
                pieces, piece_counts = fit_units(text, sentence_spans(text, s, e), size, self.counter)
                fitted.extend(pieces)
                fitted_counts.extend(piece_counts)
            units, counts = fitted, fitted_counts
        packed = pack_units(text, units, counts, size, overlap, self.counter)
        return [Span(p.start, p.end, token_count=p.token_count) for p in packed]
