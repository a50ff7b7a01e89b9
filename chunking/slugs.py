"""GitHub-style heading anchors, so a chunk can link back to `README.md#its-section`.

Mirrors github-slugger (what github.com renders): lowercase, drop every character that is not a letter,
mark, number, space, `-` or `_`, turn each space into `-`, and number repeats `-1`, `-2`... in document
order. Inline Markdown is stripped first because GitHub slugs the rendered text, not the source.
"""

from __future__ import annotations

import re
import unicodedata

_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_TAG = re.compile(r"<[^>]*>")
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![^\W_])_+|_+(?![^\W_])")
_ASCII_DROP = re.compile(r"[^a-z0-9 _-]")


def strip_inline_markdown(text: str) -> str:
    """The visible text of a heading: links and images reduced to their label, HTML tags dropped."""
    text = _TAG.sub("", _LINK.sub(r"\1", text))
    return _EMPHASIS_UNDERSCORE.sub("", text)


def github_slug(text: str) -> str:
    """Slug of one heading, without de-duplication (e.g. "2.1 Méthodes & Co" -> "21-méthodes--co")."""
    visible = (
        strip_inline_markdown(text).strip().lower()
        if ("[" in text or "<" in text or "_" in text)
        else text.strip().lower()
    )
    if visible.isascii():  # fast path, same result as the loop below
        return _ASCII_DROP.sub("", visible).replace(" ", "-")
    out = []
    for ch in visible:
        if ch == " ":
            out.append("-")
        elif ch in "-_" or unicodedata.category(ch)[0] in "LMN":
            out.append(ch)
    return "".join(out)


class Slugger:
    """Assigns unique slugs within one document, the way GitHub numbers repeated headings."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def slug(self, text: str) -> str:
        base = result = github_slug(text)
        while result in self._seen:
            self._seen[base] += 1
            result = f"{base}-{self._seen[base]}"
        self._seen[result] = 0
        return result
