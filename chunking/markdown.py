"""Section-aware Markdown chunking on the raw source (`Document.text` stays Markdown).

ATX headings `#`..`####` (and setext `===`/`---` under a one-line paragraph) are hard boundaries, so a
chunk never mixes two sections and carries its heading chain, GitHub anchor and section number. A section
that fits the token limit is one chunk; a larger one is packed from units that are never cut inside:
sentences of prose, and code blocks, lists, tables and display equations kept whole when they fit (else
cut between lines, items or rows). A line scanner, not a Markdown AST: it is linear and never fails on
text that is not Markdown at all.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from unichunk.chunking.base import BaseChunker, Span
from unichunk.chunking.models import Document
from unichunk.chunking.packing import pack_units, split_to_fit
from unichunk.chunking.sentences import sentence_spans
from unichunk.chunking.slugs import Slugger
from unichunk.chunking.span_counts import SpanCounter, span_counter

BOUNDARY_LEVEL = 4  # deeper headings (#####, ######) are ordinary text
_EQUATION_SEARCH_LINES = 500  # an unclosed $$ / \[ further than this is text, not an equation
_MAX_LIST_DEPTH = 32  # deeper nesting is cut between lines

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_THEMATIC = re.compile(r" {0,3}([-*_])[ \t]*(?:\1[ \t]*){2,}")
_LIST_MARKER = re.compile(r"([ \t]*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_TABLE_DELIMITER = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")
_INLINE_EQUATION = re.compile(r"\$\$.{1,4000}?\$\$|\\\[.{1,4000}?\\\]", re.DOTALL)
_SECTION_NUMBER = re.compile(r"(\d{1,3}(?:\.\d{1,3})+|\d{1,3}(?=\.))\.?(?:\s|$)")
_LINE_BREAK = re.compile(r"(\r\n|\r|\n)")


@dataclass(slots=True)
class _Block:
    kind: str  # heading | paragraph | code | list | table | math | other
    first: int  # first line
    stop: int  # one past the last line
    level: int = 0
    title: str = ""


class _Lines:
    """The lines of a text (any of \\n, \\r\\n, \\r ends a line) with their character offsets."""

    def __init__(self, text: str) -> None:
        parts = _LINE_BREAK.split(text)
        self.content: list[str] = parts[0::2]
        self.start: list[int] = []
        pos = 0
        for i, line in enumerate(self.content):
            self.start.append(pos)
            pos += len(line) + (len(parts[2 * i + 1]) if 2 * i + 1 < len(parts) else 0)

    def end(self, i: int) -> int:
        """Offset just after the last non-whitespace character of line i (its start if blank)."""
        return self.start[i] + len(self.content[i].rstrip())


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


def _atx(line: str) -> tuple[int, str] | None:
    match = _ATX.fullmatch(line)
    if not match:
        return None
    return len(match[1]), _ATX_CLOSING.sub("", (match[2] or "").strip()).strip()


def _fence_close(lines: list[str], i: int, char: str, length: int) -> int:
    """Index of the line closing the fence opened at line i, or the last line (unclosed runs to the end)."""
    for j in range(i + 1, len(lines)):
        stripped = lines[j].strip()
        if stripped.startswith(char * length) and not stripped.strip(char):
            return j
    return len(lines) - 1


def _fence_open(line: str) -> tuple[str, int] | None:
    match = _FENCE.fullmatch(line)
    if not match or (match[1][0] == "`" and "`" in match[2]):
        return None
    return match[1][0], len(match[1])


def _equation_close(lines: list[str], i: int) -> int | None:
    """Last line of a display equation opened at line i, None if it is not closed soon enough."""
    stripped = lines[i].strip()
    closing = "$$" if stripped.startswith("$$") else "\\]"
    if closing in stripped[2:]:
        return i
    for j in range(i + 1, min(len(lines), i + _EQUATION_SEARCH_LINES)):
        if closing in lines[j]:
            return j
    return None


def scan_blocks(lines: list[str]) -> list[_Block]:
    """Split lines into Markdown blocks (headings, fences, lists, tables, equations, paragraphs)."""
    blocks: list[_Block] = []
    open_kind: str | None = None
    open_first = last_text = 0
    blank_before = False

    def close() -> None:
        nonlocal open_kind
        if open_kind is not None:
            blocks.append(_Block(open_kind, open_first, last_text + 1))
        open_kind = None

    def start(kind: str, i: int) -> None:
        nonlocal open_kind, open_first
        close()
        open_kind, open_first = kind, i

    i, n = 0, len(lines)
    if n > 2 and lines[0].rstrip() == "---":  # YAML front matter
        for j in range(1, min(n, _EQUATION_SEARCH_LINES)):
            if lines[j].rstrip() in ("---", "..."):
                blocks.append(_Block("code", 0, j + 1))
                i = j + 1
                break
    while i < n:
        line = lines[i]
        if not line.strip():
            if open_kind in ("paragraph", "table"):
                close()
            blank_before = True
            i += 1
            continue
        stripped = line.lstrip()
        indent = len(line) - len(stripped) if "\t" not in line[: len(line) - len(stripped)] else _indent(line)
        lead = stripped[0]  # cheap guards: most lines are prose and skip every regex below
        fence = _fence_open(line) if lead in "`~" else None
        marker = lead in "-*+0123456789" and _LIST_MARKER.match(line) is not None
        in_list = open_kind == "list" and (indent >= 2 or not blank_before)
        if fence and (indent <= 3 or in_list):
            stop = _fence_close(lines, i, *fence)
            if in_list:  # a fence inside a list item stays in the list
                last_text = stop
            else:
                close()
                blocks.append(_Block("code", i, stop + 1))
            i, blank_before = stop + 1, False
            continue
        if in_list and (indent >= 2 or marker):
            last_text, blank_before = i, False
            i += 1
            continue
        heading = _atx(line) if lead == "#" else None
        setext = _SETEXT.fullmatch(line) if lead in "=-" else None
        if heading:
            close()
            blocks.append(_Block("heading", i, i + 1, heading[0], heading[1]))
        elif setext and open_kind == "paragraph" and open_first == i - 1 and not blank_before:
            open_kind = None
            blocks.append(
                _Block("heading", i - 1, i + 1, 1 if setext[1][0] == "=" else 2, lines[i - 1].strip())
            )
        elif lead in "-*_" and _THEMATIC.fullmatch(line):
            close()
            blocks.append(_Block("other", i, i + 1))
        elif (
            indent <= 3
            and lead in "$\\"
            and stripped.startswith(("$$", "\\["))
            and (stop := _equation_close(lines, i)) is not None
        ):
            close()
            blocks.append(_Block("math", i, stop + 1))
            i = stop
        elif "|" in line and (
            open_kind == "table"
            or (indent <= 3 and line.lstrip().startswith("|"))
            or (i + 1 < n and "|" in lines[i + 1] and _TABLE_DELIMITER.fullmatch(lines[i + 1]))
        ):
            if open_kind != "table":
                start("table", i)
        elif marker and indent <= 3:
            if open_kind != "list":
                start("list", i)
        elif indent >= 4 and open_kind not in ("paragraph", "list"):
            if open_kind != "code":
                start("code", i)
        elif open_kind not in ("paragraph", "list") or (open_kind == "list" and blank_before):
            start("paragraph", i)
        last_text, blank_before = i, False
        i += 1
    close()
    return blocks


_WHOLE_KINDS = frozenset({"code", "list", "table", "math"})  # kept whole when they fit


def code_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of a Markdown text's code blocks (fenced, indented, and front matter) as its
    chunker finds them: what the graph's extractor is not given (`unichunk.chunking.segments`)."""
    lines = _Lines(text)
    blocks = scan_blocks(lines.content)
    return [(lines.start[b.first], lines.end(b.stop - 1)) for b in blocks if b.kind == "code"]


@dataclass(slots=True)
class _Section:
    blocks: list[_Block]
    chain: tuple[str, ...]
    metadata: dict[str, Any]


def section_number(title: str) -> str | None:
    """Dotted numbering that opens a heading ("2.1 Methods" -> "2.1", "3. Results" -> "3"), else None."""
    match = _SECTION_NUMBER.match(title)
    return match[1] if match else None


def split_sections(blocks: list[_Block]) -> list[_Section]:
    """Group blocks under their boundary heading, with heading chain, anchor, level and numbering."""
    slugger = Slugger()
    stack: list[tuple[int, str]] = []
    sections = [_Section([], (), {"heading_level": 0})]
    for block in blocks:
        if block.kind == "heading":
            anchor = slugger.slug(block.title)  # every heading counts, as on GitHub
            if block.level <= BOUNDARY_LEVEL:
                stack = [(level, title) for level, title in stack if level < block.level]
                stack.append((block.level, block.title))
                metadata: dict[str, Any] = {"heading_level": block.level, "anchor": anchor}
                if (number := section_number(block.title)) is not None:
                    metadata["section_number"] = number
                sections.append(_Section([block], tuple(title for _, title in stack), metadata))
                continue
        sections[-1].blocks.append(block)
    return [section for section in sections if section.blocks]


class MarkdownChunker(BaseChunker):
    """One chunk per section when it fits; otherwise sections packed from unbreakable units."""

    name = "markdown"

    def spans(self, text: str, document: Document) -> list[Span]:
        size, overlap = self.strategy.sizes_for("markdown")
        lines = _Lines(text)
        sections = split_sections(scan_blocks(lines.content))
        ranges = [(lines.start[s.blocks[0].first], lines.end(s.blocks[-1].stop - 1)) for s in sections]
        counter = span_counter(text, self.counter)
        counts = counter.count_spans(ranges)
        spans: list[Span] = []
        for section, (start, end), count in zip(sections, ranges, counts, strict=True):
            if count <= size:
                spans.append(Span(start, end, count, section.chain, section.metadata))
                continue
            units, unit_counts = self._units(text, lines, section.blocks, size, counter)
            for packed in pack_units(text, units, unit_counts, size, overlap, counter):
                spans.append(
                    Span(packed.start, packed.end, packed.token_count, section.chain, section.metadata)
                )
        return spans

    def _units(
        self, text: str, lines: _Lines, blocks: list[_Block], size: int, counter: SpanCounter
    ) -> tuple[list[tuple[int, int]], list[int]]:
        """Units of an oversize section, each at most `size` tokens, equations glued to what precedes."""
        units: list[tuple[int, int]] = []
        glue: list[bool] = []
        ranges = [(lines.start[b.first], lines.end(b.stop - 1)) for b in blocks]
        whole = [i for i, b in enumerate(blocks) if b.kind in _WHOLE_KINDS]
        whole_counts = dict(zip(whole, counter.count_spans([ranges[i] for i in whole]), strict=True))
        for i, block in enumerate(blocks):
            start, end = ranges[i]
            if block.kind == "heading" and block.level <= BOUNDARY_LEVEL:
                parts, joined = [(start, end)], [False]
            elif block.kind not in _WHOLE_KINDS:
                parts, joined = _prose_units(text, start, end)
            elif whole_counts[i] <= size:
                parts, joined = [(start, end)], [False]
            elif block.kind == "list":
                parts = self._list_units(text, lines, block.first, block.stop, size, 0, counter)
                joined = [False] * len(parts)
            else:
                parts, joined = _line_units(lines, block.first, block.stop, header=block.kind == "table")
            if block.kind == "math" and joined:
                joined[0] = True
            units.extend(parts)
            glue.extend(joined)
        return self._fit_and_glue(text, units, glue, size, counter)

    def _list_units(
        self,
        text: str,
        lines: _Lines,
        first: int,
        stop: int,
        size: int,
        depth: int,
        counter: SpanCounter,
    ) -> list[tuple[int, int]]:
        """Top-level items (with their nested items) that fit; larger items split into their children."""
        markers = [i for i in range(first, stop) if _LIST_MARKER.match(lines.content[i])]
        if not markers or depth >= _MAX_LIST_DEPTH:
            return _line_units(lines, first, stop)[0]
        base = min(_indent(lines.content[i]) for i in markers)
        tops = [i for i in markers if _indent(lines.content[i]) == base]
        if tops[0] != first:
            tops.insert(0, first)
        items = list(zip(tops, [*tops[1:], stop], strict=True))
        ranges = [(lines.start[a], lines.end(_last_text_line(lines, a, b))) for a, b in items]
        counts = counter.count_spans(ranges)
        units: list[tuple[int, int]] = []
        for (a, b), (start, end), count in zip(items, ranges, counts, strict=True):
            if count <= size:
                units.append((start, end))
                continue
            nested = next((i for i in markers if a < i < b and _indent(lines.content[i]) > base), b)
            head_end = lines.end(_last_text_line(lines, a, nested))
            units.extend(_prose_units(text, start, head_end)[0])
            if nested < b:
                units.extend(self._list_units(text, lines, nested, b, size, depth + 1, counter))
        return units

    def _fit_and_glue(
        self, text: str, units: list[tuple[int, int]], glue: list[bool], size: int, counter: SpanCounter
    ) -> tuple[list[tuple[int, int]], list[int]]:
        """Split units over `size` (last resort), then merge glued units when the result still fits."""
        counts = counter.count_spans(units)
        fitted: list[tuple[int, int]] = []
        fitted_counts: list[int] = []
        fitted_glue: list[bool] = []
        for unit, count, joined in zip(units, counts, glue, strict=True):
            pieces = [unit] if count <= size else split_to_fit(text, *unit, size, counter)
            fitted.extend(pieces)
            fitted_counts.extend([count] if len(pieces) == 1 else counter.count_spans(pieces))
            fitted_glue.extend([joined] + [False] * (len(pieces) - 1))
        groups: list[list[int]] = []
        for k, joined in enumerate(fitted_glue):
            if joined and groups and sum(fitted_counts[x] for x in groups[-1]) + fitted_counts[k] <= size:
                groups[-1].append(k)
            else:
                groups.append([k])
        merged = [g for g in groups if len(g) > 1]
        exact = dict(
            zip(
                map(id, merged),
                counter.count_spans([(fitted[g[0]][0], fitted[g[-1]][1]) for g in merged]),
                strict=True,
            )
        )
        out_units: list[tuple[int, int]] = []
        out_counts: list[int] = []
        for group in groups:
            if len(group) > 1 and exact[id(group)] <= size:
                out_units.append((fitted[group[0]][0], fitted[group[-1]][1]))
                out_counts.append(exact[id(group)])
            else:
                out_units.extend(fitted[k] for k in group)
                out_counts.extend(fitted_counts[k] for k in group)
        return out_units, out_counts


def _last_text_line(lines: _Lines, first: int, stop: int) -> int:
    """The last non-blank line in [first, stop), or `first` if all are blank."""
    for i in range(stop - 1, first, -1):
        if lines.content[i].strip():
            return i
    return first


def _line_units(
    lines: _Lines, first: int, stop: int, header: bool = False
) -> tuple[list[tuple[int, int]], list[bool]]:
    """Each non-blank line, from its very start (indentation kept); a table's delimiter row glued to its header."""
    units = [(lines.start[i], lines.end(i)) for i in range(first, stop) if lines.content[i].strip()]
    glue = [False] * len(units)
    if header and len(units) > 1 and _TABLE_DELIMITER.fullmatch(lines.content[first + 1]):
        glue[1] = True
    return units, glue


def _prose_units(text: str, start: int, end: int) -> tuple[list[tuple[int, int]], list[bool]]:
    """Sentences, each glued to the previous one when it starts at or inside an inline display equation."""
    units = sentence_spans(text, start, end)
    equations = [(m.start(), m.end()) for m in _INLINE_EQUATION.finditer(text, start, end)]
    if not equations:
        return units, [False] * len(units)
    eq_starts = [a for a, _ in equations]
    glue = []
    for unit_start, _ in units:
        k = bisect_right(eq_starts, unit_start) - 1
        glue.append(k >= 0 and unit_start < equations[k][1])
    return units, glue
