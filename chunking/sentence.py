"""sentence (a.k.a. adaptive): pack whole sentences into chunks of at most N tokens with M tokens of overlap.

Same semantics as LlamaIndex's `SentenceSplitter` (paragraph -> sentence -> sub-sentence -> words), but
built on exact character spans: sentences come from `sentence_spans` (which also splits at blank lines),
a sentence longer than the limit is cut at clause punctuation, then between words, then between tokens
(`fit_units`), and `pack_units` packs with overlap measured in tokens. No chunk exceeds `chunk_size`.
"""

from __future__ import annotations

import re

from chunking.base import BaseChunker, Span
from chunking.models import Document
from chunking.packing import fit_units, pack_units
from chunking.sentences import sentence_spans

# LlamaIndex's secondary chunking regex splits after these; we cut after them when whitespace follows
# (Latin) or right after them (CJK, which has no spaces).
_CLAUSE_END = re.compile(r"[,;:](?=\s)|[，；：、]")


def clause_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Clauses of text[start:end] (cut after , ; : and CJK equivalents), whitespace trimmed, in order."""
    spans: list[tuple[int, int]] = []
    cursor = start
    for match in _CLAUSE_END.finditer(text, start, end):
        _append_trimmed(text, cursor, match.end(), spans)
        cursor = match.end()
    _append_trimmed(text, cursor, end, spans)
    return spans


def _append_trimmed(text: str, start: int, end: int, out: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        out.append((start, end))


def fit_with_clauses(
    text: str, units: list[tuple[int, int]], counts: list[int], max_tokens: int, chunker: BaseChunker
) -> tuple[list[tuple[int, int]], list[int]]:
    """Replace every unit over max_tokens by its clauses (then words/tokens via `fit_units`)."""
    if all(c <= max_tokens for c in counts):
        return units, counts
    out_units: list[tuple[int, int]] = []
    out_counts: list[int] = []
    for (s, e), c in zip(units, counts, strict=True):
        if c <= max_tokens:
            out_units.append((s, e))
            out_counts.append(c)
            continue
        pieces, piece_counts = fit_units(text, clause_spans(text, s, e), max_tokens, chunker.counter)
        out_units.extend(pieces)
        out_counts.extend(piece_counts)
    return out_units, out_counts


class SentenceChunker(BaseChunker):
    """Sentence-aware packing to `chunk_size` tokens (default 512) with `chunk_overlap` (default 128)."""

    name = "sentence"

    def spans(self, text: str, document: Document) -> list[Span]:
        size, overlap = self.strategy.sizes_for(self.name)
        units = sentence_spans(text)
        counts = self.counter.count_many([text[s:e] for s, e in units])
        units, counts = fit_with_clauses(text, units, counts, size, self)
        packed = pack_units(text, units, counts, size, overlap, self.counter)
        return [Span(p.start, p.end, token_count=p.token_count) for p in packed]
