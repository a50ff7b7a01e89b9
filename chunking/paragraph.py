"""paragraph: pack whole paragraphs into chunks of at most N tokens; split only paragraphs that are too big.

Paragraphs are the text between matches of `ChunkStrategy.paragraph_separator` (a regular expression,
default: a blank line). A paragraph over the limit is cut into sentences, then words, then tokens, so the
size limit holds while cuts stay at the most natural boundary available.
"""

from __future__ import annotations

import re
from functools import lru_cache

from unichunk.chunking.base import BaseChunker, Span
from unichunk.chunking.models import Document
from unichunk.chunking.packing import pack_units, refine_oversize
from unichunk.chunking.sentences import sentence_spans, split_between
from unichunk.chunking.span_counts import span_counter


@lru_cache(maxsize=16)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def paragraph_spans(text: str, separator: str) -> list[tuple[int, int]]:
    """Paragraphs of `text` between separator matches, whitespace trimmed (empty matches are ignored)."""
    return split_between(text, _compile(separator))


class ParagraphChunker(BaseChunker):
    """Greedy packing of paragraphs up to `chunk_size` tokens (default 512, no overlap)."""

    name = "paragraph"

    def spans(self, text: str, document: Document) -> list[Span]:
        size, overlap = self.strategy.sizes_for(self.name)
        units = paragraph_spans(text, self.strategy.paragraph_separator)
        counter = span_counter(text, self.counter)
        counts = counter.count_spans(units)
        units, counts = refine_oversize(text, units, counts, size, counter, sentence_spans)
        packed = pack_units(text, units, counts, size, overlap, counter)
        return [Span(p.start, p.end, token_count=p.token_count) for p in packed]
