"""Sentence boundaries as character spans, for every strategy that cuts "at sentence boundaries".

A regular expression rather than a trained model: it is linear, exact about offsets (it never rewrites
text), and good enough for packing. It splits after `.`, `!`, `?`, `…` (with closing quotes/brackets)
followed by whitespace and a character that is not a lowercase letter, after CJK full stops, and at blank
lines. Common abbreviations ("e.g.", "Dr.", single initials) do not end a sentence.
"""

from __future__ import annotations

import re

# A terminator run plus closing quotes, then whitespace; or CJK terminators; or a blank line. Written as
# one character class followed by the three cases (told apart by a lookbehind at that character), so the
# regex engine skips ahead to the next candidate character in C, far faster than three alternatives.
_BOUNDARY = re.compile(
    r"""[.!?…。！？\n](?:"""
    r"""(?<=[.!?…])(?P<latin>[.!?…]*[\"'”’»)\]]*)(?P<ws>\s+)(?=[^\s])"""
    r"""|(?<=[。！？])(?P<cjk>[。！？]*[」』”’)）]*)(?P<cjkws>\s*)"""
    r"""|(?<=\n)(?P<blank>[ \t]*\n\s*))"""
)
_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "cf",
        "fig",
        "no",
        "vol",
        "al",
        "approx",
        "dept",
        "est",
        "inc",
        "ltd",
        "co",
        "corp",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "u.s",
        "u.k",
    ]
)
_WORD_BEFORE = re.compile(r"([\w.]+)$")


def _is_abbreviation(text: str, terminator_start: int) -> bool:
    """True when the `.` at terminator_start closes an abbreviation or an initial, not a sentence."""
    match = _WORD_BEFORE.search(text, max(0, terminator_start - 12), terminator_start)
    if not match:
        return False
    word = match.group(1).lower().rstrip(".")
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Non-empty sentences of `text[start:end]` as (start, end) offsets into `text`, whitespace trimmed.

    Whitespace between sentences belongs to no sentence; every non-whitespace character of the range
    belongs to exactly one span, and spans are in order.
    """
    end = len(text) if end is None else end
    spans: list[tuple[int, int]] = []
    cursor = start
    for match in _BOUNDARY.finditer(text, start, end):
        case = match.lastgroup  # the last group of the case that matched
        if case == "ws":  # Latin: the terminator run is [match start, end of "latin")
            if text[match.end()].islower() or (
                not match["latin"] and text[match.start()] == "." and _is_abbreviation(text, match.start())
            ):
                continue
            cut, resume = match.end("latin"), match.end()
        elif case == "cjkws":
            cut, resume = match.end("cjk"), match.end()
        else:
            cut, resume = match.start(), match.end()
        append_trimmed(text, cursor, cut, spans)
        cursor = resume
    append_trimmed(text, cursor, end, spans)
    return spans


def append_trimmed(text: str, start: int, end: int, out: list[tuple[int, int]]) -> None:
    """Append `(start, end)` to `out` with surrounding whitespace trimmed, unless nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        out.append((start, end))


def split_between(
    text: str, pattern: re.Pattern[str], start: int = 0, end: int | None = None, *, keep_match: bool = False
) -> list[tuple[int, int]]:
    """Pieces of `text[start:end]` between matches of `pattern`, whitespace trimmed, in order.

    With keep_match the matched text ends the piece before it (clause punctuation); otherwise the match is
    dropped (paragraph separators). Empty matches are ignored.
    """
    end = len(text) if end is None else end
    spans: list[tuple[int, int]] = []
    cursor = start
    for match in pattern.finditer(text, start, end):
        if match.end() == match.start():
            continue
        append_trimmed(text, cursor, match.end() if keep_match else match.start(), spans)
        cursor = match.end()
    append_trimmed(text, cursor, end, spans)
    return spans
