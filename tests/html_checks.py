"""A strict reading of the HTML the service and the report renderer write, for tests.

`parse_html` runs the standard library's HTML parser and checks what a browser would silently repair: every
element opened is closed, in order (void elements excepted). It collects the tags, attributes and script
bodies so a test can say "no script came from content" and "no asset from another host".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# SVG shapes this project writes self-closed or empty
SELF_CLOSING_OK = {"circle", "line", "rect", "polyline", "path", "stop"}


@dataclass
class Parsed:
    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def attrs(self, tag: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag]

    def external_refs(self) -> list[str]:
        """Every src/href/action naming another host (http:, https:, protocol-relative)."""
        refs = []
        for _, attrs in self.tags:
            for name in ("src", "href", "action", "xlink:href"):
                value = (attrs.get(name) or "").strip().lower()
                if value.startswith(("http:", "https:", "//")):
                    refs.append(value)
        return refs


class _Strict(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parsed = Parsed()
        self.stack: list[str] = []
        self._script: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parsed.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = []
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parsed.tags.append((tag, dict(attrs)))
        assert tag in VOID or tag in SELF_CLOSING_OK, f"<{tag}/> is not a void element"

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        assert self.stack, f"</{tag}> closes nothing"
        opened = self.stack.pop()
        assert opened == tag, f"</{tag}> closes <{opened}>"
        if tag == "script" and self._script is not None:
            self.parsed.scripts.append("".join(self._script))
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script.append(data)
        else:
            self.parsed.text.append(data)


def parse_html(page: str) -> Parsed:
    """The page's tags, scripts and text; AssertionError where an element is not closed in order."""
    parser = _Strict()
    parser.feed(page)
    parser.close()
    assert not parser.stack, f"unclosed elements: {parser.stack}"
    return parser.parsed
