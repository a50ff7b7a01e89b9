"""sentence (a.k.a. adaptive): pack whole sentences into chunks of at most N tokens with M tokens of overlap.

Same semantics as LlamaIndex's `SentenceSplitter` (paragraph -> sentence -> sub-sentence -> words), but
built on exact character spans: sentences come from `sentence_spans` (which also splits at blank lines),
a sentence longer than the limit is cut at clause punctuation, then between words, then between tokens
(`fit_units`), and `pack_units` packs with overlap measured in tokens. No chunk exceeds `chunk_size`.
"""

from __future__ import annotations

import re

from unichunk.chunking.base import BaseChunker, Span
from unichunk.chunking.models import Document
from unichunk.chunking.packing import pack_units, refine_oversize
from unichunk.chunking.sentences import sentence_spans, split_between
from unichunk.chunking.span_counts import span_counter

# LlamaIndex's secondary chunking regex splits after these; we cut after them when whitespace follows
# (Latin) or right after them (CJK, which has no spaces).
_CLAUSE_END = re.compile(r"[,;:](?=\s)|[，；：、]")


def clause_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Clauses of text[start:end] (cut after , ; : and CJK equivalents), whitespace trimmed, in order."""
    return split_between(text, _CLAUSE_END, start, end, keep_match=True)


class SentenceChunker(BaseChunker):
    """Sentence-aware packing to `chunk_size` tokens (default 512) with `chunk_overlap` (default 128)."""

    name = "sentence"

    def spans(self, text: str, document: Document) -> list[Span]:
        size, overlap = self.strategy.sizes_for(self.name)
        units = sentence_spans(text)
        counter = span_counter(text, self.counter)
        counts = counter.count_spans(units)
        units, counts = refine_oversize(text, units, counts, size, counter, clause_spans)
        packed = pack_units(text, units, counts, size, overlap, counter)
        return [Span(p.start, p.end, token_count=p.token_count) for p in packed]
