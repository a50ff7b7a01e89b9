"""HTML chunking on the extracted text, following the page structure (`Document.blocks`) when it has one.

Two modes. *structured*: heading blocks open sections (a chunk never spans two) and give the heading
chain; list runs and tables stay whole when they fit. *flat* (all paragraphs, as PDFs produce): headings are
guessed (ALL-CAPS lines, or short unpunctuated lines before a longer paragraph); if none is found, chunks
are labelled "Section N of M". Both pack by words (readers and rerankers think in words), at sentence
boundaries, carrying the last `overlap_sentences` sentences into the next chunk, and never over the token
ceiling `sizes_for("html")[0]`.

Decisions: overlap only carries whole sentences of prose (never list items, table rows or code lines) and
never crosses a section boundary. A chunk closes once it reaches `target_words`, or before a unit that would
push it past `max_words` or the token ceiling. A section's last chunk with fewer than `min_words` new words
merges into the chunk before it when the merged chunk stays within `max_words` and the token ceiling; a
short *section* stays alone, since it has its own heading chain.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from unichunk.chunking.base import BaseChunker, Span
from unichunk.chunking.models import Block, Document
from unichunk.chunking.packing import split_to_fit
from unichunk.chunking.sentences import sentence_spans
from unichunk.chunking.span_counts import SpanCounter, span_counter

_WORD = re.compile(r"\S+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_STRUCTURE_KINDS = frozenset({"heading", "list_item", "table"})
_PROSE_KINDS = frozenset({"paragraph", "quote", "other"})
_HEADING_MAX_WORDS = 10
_TERMINAL_PUNCTUATION = tuple(".!?,;:…")


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str
    start: int
    end: int
    level: int = 0


@dataclass(frozen=True, slots=True)
class _Unit:
    start: int
    end: int
    words: int
    tokens: int
    sentence: bool  # a whole sentence of prose: the only kind of unit overlap may repeat


@dataclass(slots=True)
class _Section:
    chain: tuple[str, ...]
    title: str
    blocks: list[_Block] = field(default_factory=list)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def paragraph_blocks(text: str, start: int = 0, end: int | None = None) -> list[_Block]:
    """Blank-line separated paragraphs of text[start:end], trimmed: structure for text without blocks."""
    end = len(text) if end is None else end
    out, cursor = [], start
    for match in [*_PARAGRAPH_BREAK.finditer(text, start, end), None]:
        stop = match.start() if match else end
        a, b = cursor, stop
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append(_Block("paragraph", a, b))
        cursor = match.end() if match else end
    return out


def usable_blocks(text: str, blocks: tuple[Block, ...]) -> list[_Block]:
    """`blocks` clipped to the text and made non-overlapping; text they miss becomes paragraphs."""
    out: list[_Block] = []
    cursor = 0
    for block in sorted(blocks, key=lambda b: (b.start, b.end)):
        start, end = max(block.start, cursor), min(block.end, len(text))
        if end <= start or text[start:end].isspace():
            continue
        if text[cursor:start].strip():
            out.extend(paragraph_blocks(text, cursor, start))
        out.append(_Block(block.kind, start, end, block.level))
        cursor = end
    if text[cursor:].strip():
        out.extend(paragraph_blocks(text, cursor, len(text)))
    return out


def _looks_like_heading(text: str, following: str | None) -> int:
    """Heading level guessed for a flat paragraph: 1 for ALL-CAPS, 2 for a short title line, else 0."""
    stripped = text.strip()
    words = stripped.split()
    if not 0 < len(words) < _HEADING_MAX_WORDS or "\n" in stripped:
        return 0
    if stripped.isupper() and sum(ch.isalpha() for ch in stripped) >= 2:
        return 1
    first_alpha = next((ch for ch in stripped if ch.isalpha()), "")
    if (
        following is not None
        and not stripped.endswith(_TERMINAL_PUNCTUATION)
        and (stripped[0].isdigit() or first_alpha.isupper())
        and len(following.split()) >= max(_HEADING_MAX_WORDS, len(words) + 1)
    ):
        return 2
    return 0


def _sections(text: str, blocks: list[_Block], headings: dict[int, int]) -> list[_Section]:
    """Group blocks under headings (`headings`: block index -> level), tracking the heading chain."""
    stack: list[tuple[int, str]] = []
    sections = [_Section((), "")]
    for index, block in enumerate(blocks):
        level = headings.get(index)
        if level is None:
            sections[-1].blocks.append(block)
            continue
        title = _collapse(text[block.start : block.end])
        stack = [(lvl, t) for lvl, t in stack if lvl < level]
        stack.append((level, title))
        sections.append(_Section(tuple(t for _, t in stack), title, [block]))
    return [s for s in sections if s.blocks]


class HtmlChunker(BaseChunker):
    """Word-packed chunks of extracted HTML (or flat paragraph text), following its headings."""

    name = "html"

    def spans(self, text: str, document: Document) -> list[Span]:
        blocks = usable_blocks(text, document.blocks) if document.blocks else paragraph_blocks(text)
        mode = self.strategy.html_mode
        if mode == "auto":
            mode = "structured" if any(b.kind in _STRUCTURE_KINDS for b in blocks) else "flat"
        if mode == "structured":
            headings = {i: max(1, b.level) for i, b in enumerate(blocks) if b.kind == "heading"}
        else:
            texts = [text[b.start : b.end] for b in blocks]
            headings = {}
            for i, block in enumerate(blocks):
                following = (
                    texts[i + 1] if i + 1 < len(blocks) and blocks[i + 1].kind in _PROSE_KINDS else None
                )
                if block.kind in _PROSE_KINDS and (level := _looks_like_heading(texts[i], following)):
                    headings[i] = level
        spans: list[Span] = []
        counter = span_counter(text, self.counter)
        for index, section in enumerate(_sections(text, blocks, headings)):
            metadata = {"html_mode": mode, "section": section.title, "section_index": index}
            units = self._units(text, section.blocks, counter)
            for start, end, tokens in self._pack(units, counter):
                spans.append(Span(start, end, tokens, section.chain, metadata))
        if mode == "flat" and not headings:
            total = len(spans)
            spans = [
                Span(
                    s.start,
                    s.end,
                    s.token_count,
                    (label := f"Section {n} of {total}",),
                    {**s.metadata, "section": label, "section_index": n - 1},
                )
                for n, s in enumerate(spans, start=1)
            ]
        return spans

    # -- units -------------------------------------------------------------------------------------

    def _fits(self, text: str, start: int, end: int, counter: SpanCounter) -> bool:
        words = len(text[start:end].split())
        return words <= self.strategy.max_words and counter.count_span(start, end) <= self._ceiling

    @property
    def _ceiling(self) -> int:
        return self.strategy.sizes_for("html")[0]

    def _units(self, text: str, blocks: list[_Block], counter: SpanCounter) -> list[_Unit]:
        """Units of one section: sentences of prose; list runs, tables and code whole when they fit."""
        raw: list[tuple[int, int, bool]] = []
        i = 0
        while i < len(blocks):
            block = blocks[i]
            if block.kind == "list_item":
                j = i
                while j < len(blocks) and blocks[j].kind == "list_item":
                    j += 1
                raw.extend(self._list_units(text, blocks[i:j], counter))
                i = j
                continue
            if block.kind == "heading":
                raw.append((block.start, block.end, False))
            elif block.kind in ("table", "code"):
                if self._fits(text, block.start, block.end, counter):
                    raw.append((block.start, block.end, False))
                else:  # rows / lines
                    raw.extend((a, b, False) for a, b in _lines(text, block.start, block.end))
            else:
                raw.extend((a, b, True) for a, b in sentence_spans(text, block.start, block.end))
            i += 1
        return self._measure(text, raw, counter)

    def _list_units(
        self, text: str, items: list[_Block], counter: SpanCounter
    ) -> list[tuple[int, int, bool]]:
        """A run of list items whole if it fits, else each top-level item with its nested items, else each item."""
        if self._fits(text, items[0].start, items[-1].end, counter):
            return [(items[0].start, items[-1].end, False)]
        top = min(b.level for b in items)
        out: list[tuple[int, int, bool]] = []
        groups: list[list[_Block]] = []
        for item in items:
            if item.level <= top or not groups:
                groups.append([item])
            else:
                groups[-1].append(item)
        for group in groups:
            if self._fits(text, group[0].start, group[-1].end, counter):
                out.append((group[0].start, group[-1].end, False))
                continue
            for item in group:
                if self._fits(text, item.start, item.end, counter):
                    out.append((item.start, item.end, False))
                else:
                    out.extend((a, b, True) for a, b in sentence_spans(text, item.start, item.end))
        return out

    def _measure(self, text: str, raw: list[tuple[int, int, bool]], counter: SpanCounter) -> list[_Unit]:
        """Word and token counts; a unit over max_words or the token ceiling is cut (last resort)."""
        max_words, ceiling = self.strategy.max_words, self._ceiling
        tokens = counter.count_spans([(a, b) for a, b, _ in raw])
        units: list[_Unit] = []
        for (start, end, sentence), count in zip(raw, tokens, strict=True):
            words = len(text[start:end].split())
            if words <= max_words and count <= ceiling:
                units.append(_Unit(start, end, words, count, sentence))
                continue
            pieces = [
                piece
                for a, b in _split_words(text, start, end, max_words)
                for piece in split_to_fit(text, a, b, ceiling, counter)
            ]
            counts = counter.count_spans(pieces)
            units.extend(
                _Unit(a, b, len(text[a:b].split()), c, False)
                for (a, b), c in zip(pieces, counts, strict=True)
            )
        return units

    # -- packing -----------------------------------------------------------------------------------

    def _pack(self, units: list[_Unit], counter: SpanCounter) -> list[tuple[int, int, int]]:
        """(start, end, exact tokens) of the chunks of one section (see the module docstring)."""
        s = self.strategy
        ceiling = self._ceiling
        chunks: list[tuple[int, int, int]] = []  # (first unit, one past last unit, exact tokens)
        i, n = 0, len(units)
        while i < n:
            j, words, tokens = i, 0, 0
            while j < n:
                unit = units[j]
                if j > i and (
                    words >= s.target_words
                    or words + unit.words > s.max_words
                    or tokens + unit.tokens > ceiling
                ):
                    break
                words, tokens, j = words + unit.words, tokens + unit.tokens, j + 1
            exact = counter.count_span(units[i].start, units[j - 1].end)
            while exact > ceiling and j - 1 > i:
                j -= 1
                exact = counter.count_span(units[i].start, units[j - 1].end)
            chunks.append((i, j, exact))
            if j >= n:
                break
            k, carried_words, carried_tokens = j, 0, 0
            while (
                k - 1 > i
                and j - k < s.overlap_sentences
                and units[k - 1].sentence
                and carried_words + units[k - 1].words + units[j].words <= s.max_words
                and carried_tokens + units[k - 1].tokens + units[j].tokens <= ceiling
            ):
                k -= 1
                carried_words += units[k].words
                carried_tokens += units[k].tokens
            i = k
        chunks = self._merge_tail(units, chunks, counter)
        return [(units[a].start, units[b - 1].end, tokens) for a, b, tokens in chunks]

    def _merge_tail(
        self, units: list[_Unit], chunks: list[tuple[int, int, int]], counter: SpanCounter
    ) -> list[tuple[int, int, int]]:
        if len(chunks) < 2:
            return chunks
        (a, b, _), (_, d, _) = chunks[-2], chunks[-1]
        new_words = sum(u.words for u in units[b:d])
        if new_words >= self.strategy.min_words or sum(u.words for u in units[a:d]) > self.strategy.max_words:
            return chunks
        tokens = counter.count_span(units[a].start, units[d - 1].end)
        if tokens > self._ceiling:
            return chunks
        return [*chunks[:-2], (a, d, tokens)]


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Non-blank lines of text[start:end], each from its start (indentation kept) to its last visible character."""
    out, cursor = [], start
    while cursor < end:
        stop = text.find("\n", cursor, end)
        stop = end if stop < 0 else stop
        line_end = stop
        while line_end > cursor and text[line_end - 1].isspace():
            line_end -= 1
        if line_end > cursor:
            out.append((cursor, line_end))
        cursor = stop + 1
    return out


def _split_words(text: str, start: int, end: int, max_words: int) -> list[tuple[int, int]]:
    """Cut text[start:end] between words into near-equal pieces of at most max_words words."""
    words = [m.span() for m in _WORD.finditer(text, start, end)]
    if len(words) <= max_words:
        return [(start, end)]
    per = math.ceil(len(words) / math.ceil(len(words) / max_words))
    return [(words[k][0], words[min(k + per, len(words)) - 1][1]) for k in range(0, len(words), per)]
