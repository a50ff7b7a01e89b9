"""The main content of a web page: which of its blocks are the page's own text, and which are its chrome
(navigation, site header, footer, sidebars, cookie banners), so that the chrome never becomes a chunk.

trafilatura, a well-kept main-content extractor, decides; the text stays ours. Its output is re-normalised
text, which would lose exact offsets and the blocks' structure, so it only votes: its words and the page's
blocks are aligned in document order (`_align`), and a block belongs to the main content when most of its
words are aligned. Blocks in chrome landmarks never do; headings that introduce kept text stay. Recall mode
with figures kept, because a RAG index loses more from a missing paragraph than from a stray one; the whole
page is kept when too little is found (`MIN_MAIN_WORDS`, `MIN_MAIN_SHARE`), so no document empties here.
docs/design.md ("Web pages: main content only") has each rule and its reason.
"""

from __future__ import annotations

import logging
import math
import re
import unicodedata
from bisect import bisect_left
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import TypeVar

import trafilatura

MIN_MAIN_WORDS = 25
MIN_MAIN_SHARE = 0.5
_ALIGNED_SHARE = 0.5  # a block is main content when at least this share of its words is aligned
_WORD = re.compile(r"\w+")
_HEADING_SKIP = 1  # dropped blocks (a byline, a date) a heading may skip to reach its kept text
_DIFFLIB_CELLS = 40_000  # stretches up to this many (page words x main words) are aligned by difflib

_LOGGER = logging.getLogger("trafilatura")
if _LOGGER.level == logging.NOTSET:
    _LOGGER.setLevel(logging.CRITICAL)

Part = TypeVar("Part", bound=tuple[str, int, str])  # (block kind, level, text), as html_extract collects them


def _tokens(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFC", text).casefold())


def main_text(markup: str) -> str | None:
    """trafilatura's main text of `markup` (plain text, tables included, comments left out), or None
    when it finds none or fails on the input."""
    try:
        return trafilatura.extract(
            markup,
            include_comments=False,
            include_tables=True,
            include_images=True,  # keeps <figure>: code listings and captions, not only images
            include_links=False,
            include_formatting=False,
            with_metadata=False,
            deduplicate=False,
            favor_recall=True,
        )
    except Exception:  # a bug of the extractor on odd markup: the page is kept whole, not failed
        return None


def main_blocks(markup: str, parts: Sequence[Part], chrome: Sequence[bool]) -> list[Part]:
    """The blocks of `parts` (the page's blocks, in order) that are the page's main content, or all of
    them when main content cannot be told (see the module docstring). `chrome[i]` says that block i lies
    in a page-chrome landmark (navigation, a sidebar, the page's footer, a dialog): never main content."""
    words = [_tokens(text) for _, _, text in parts]
    total = sum(map(len, words))
    extracted = main_text(markup) if total else None
    if not extracted:
        return list(parts)
    candidates = [index for index, inside in enumerate(chrome) if not inside]
    aligned = iter(_align([token for i in candidates for token in words[i]], _tokens(extracted)))
    keep = [False] * len(parts)
    for index in candidates:
        hits = sum(next(aligned) for _ in words[index])
        keep[index] = bool(words[index]) and hits >= _ALIGNED_SHARE * len(words[index])
    for index in range(1, len(parts)):
        if chrome[index] or keep[index]:
            continue
        if not words[index] or (keep[index - 1] and parts[index][2] == parts[index - 1][2]):
            keep[index] = keep[index - 1]  # no word character, or a repeat of the kept block before
    _decide_headings(parts, keep, chrome)
    kept = sum(len(block) for block, wanted in zip(words, keep, strict=True) if wanted)
    if kept < MIN_MAIN_WORDS and kept < MIN_MAIN_SHARE * total:
        return list(parts)
    return [part for part, wanted in zip(parts, keep, strict=True) if wanted]


def _decide_headings(parts: Sequence[Part], keep: list[bool], chrome: Sequence[bool]) -> None:
    """Keep the headings that introduce kept text, drop those left without any (see the docstring)."""
    for index in range(len(parts) - 1, -1, -1):
        if parts[index][0] != "heading" or keep[index] or chrome[index]:
            continue
        for after in range(index + 1, min(index + 2 + _HEADING_SKIP, len(parts))):
            if keep[after] or parts[after][0] == "heading":
                keep[index] = keep[after]
                break
    has_text, shallowest = False, math.inf  # after the block at hand: kept text, and the shallowest
    for index in range(len(parts) - 1, -1, -1):  # kept heading before it
        if not keep[index]:
            continue
        kind, level, _ = parts[index]
        if kind != "heading":
            has_text, shallowest = True, math.inf
        elif has_text and shallowest > level:
            shallowest = level
        else:
            keep[index] = False


def _align(page: list[str], main: list[str]) -> list[bool]:
    """For each token of `page`, whether it is aligned with a token of `main` (an in-order alignment).

    difflib alone is quadratic on long pages, so, as in patience diff, each stretch loses its common head
    and tail, then is cut at anchors: word trigrams that occur once in each side of the stretch, kept in
    increasing order on both sides (a longest increasing subsequence) and extended while the tokens agree;
    the stretches between anchors are handled alike. Stretches short enough are aligned by difflib; a long
    one without any anchor is left unaligned."""
    aligned = [False] * len(page)
    stack = [(0, len(page), 0, len(main))]
    while stack:
        a0, a1, b0, b1 = stack.pop()
        while a0 < a1 and b0 < b1 and page[a0] == main[b0]:  # common head and tail first
            aligned[a0] = True
            a0, b0 = a0 + 1, b0 + 1
        while a0 < a1 and b0 < b1 and page[a1 - 1] == main[b1 - 1]:
            aligned[a1 - 1] = True
            a1, b1 = a1 - 1, b1 - 1
        if a0 >= a1 or b0 >= b1:
            continue
        if (a1 - a0) * (b1 - b0) <= _DIFFLIB_CELLS:
            matcher = SequenceMatcher(None, page[a0:a1], main[b0:b1], autojunk=False)
            for i, _, size in matcher.get_matching_blocks():
                aligned[a0 + i : a0 + i + size] = [True] * size
            continue
        low_a, low_b = a0, b0
        for i, j in _anchors(page, a0, a1, main, b0, b1):
            if i < low_a or j < low_b:  # inside the previous anchor's extension
                continue
            back = 0
            while i - back > low_a and j - back > low_b and page[i - back - 1] == main[j - back - 1]:
                back += 1
            ahead = 0
            while i + ahead < a1 and j + ahead < b1 and page[i + ahead] == main[j + ahead]:
                ahead += 1
            aligned[i - back : i + ahead] = [True] * (back + ahead)
            stack.append((low_a, i - back, low_b, j - back))
            low_a, low_b = i + ahead, j + ahead
        if (low_a, low_b) != (a0, b0):  # anchors found: align what is left after the last one
            stack.append((low_a, a1, low_b, b1))
    return aligned


def _anchors(page: list[str], a0: int, a1: int, main: list[str], b0: int, b1: int) -> list[tuple[int, int]]:
    """(page index, main index) of trigrams unique in both stretches, increasing on both sides."""
    in_page, in_main = _unique_trigrams(page, a0, a1), _unique_trigrams(main, b0, b1)
    pairs = sorted((i, in_main[key]) for key, i in in_page.items() if i >= 0 and in_main.get(key, -1) >= 0)
    # longest increasing subsequence of the main indices (patience sorting), kept in page order
    tail_values: list[int] = []  # smallest main index ending an increasing run of each length
    tails: list[int] = []  # the pair holding it
    previous = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        length = bisect_left(tail_values, j)
        if length > 0:
            previous[k] = tails[length - 1]
        if length == len(tails):
            tail_values.append(j)
            tails.append(k)
        else:
            tail_values[length], tails[length] = j, k
    chain, k = [], tails[-1] if tails else -1
    while k >= 0:
        chain.append(pairs[k])
        k = previous[k]
    return chain[::-1]


def _unique_trigrams(tokens: list[str], start: int, end: int) -> dict[tuple[str, ...], int]:
    """Trigram -> its start index when it occurs once in tokens[start:end], -1 when more often."""
    seen: dict[tuple[str, ...], int] = {}
    for k in range(start, end - 2):
        key = (tokens[k], tokens[k + 1], tokens[k + 2])
        seen[key] = -1 if key in seen else k
    return seen
