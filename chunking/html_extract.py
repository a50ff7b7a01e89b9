"""HTML to text plus structure: the text a `Document` keeps and the `Block`s the html strategy follows.

Chunks must be exact slices of `Document.text`, so markup is converted once, here, into plain text whose
block offsets are known by construction (texts joined with a blank line). The tree is walked with an
explicit stack, never by recursion, so pathological nesting (thousands of levels) or malformed markup
cannot exhaust Python's recursion limit. Each block also records whether it lies in page chrome (navigation,
a sidebar, the page's footer, a dialog), for `extract_html(..., main_content=True)` (`unichunk.chunking.html_main`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bs4 import BeautifulSoup, CData, NavigableString, Tag

from unichunk.chunking.html_main import main_blocks
from unichunk.chunking.models import Block, BlockKind

SEPARATOR = "\n\n"

# Never content: scripts, styles, templates, metadata.
_SKIP = frozenset({"script", "style", "noscript", "template", "head", "title", "meta", "link"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_LISTS = frozenset({"ul", "ol", "menu", "dl"})
_LIST_ITEMS = frozenset({"li", "dt", "dd"})
# Elements that end the text run around them (their loose text becomes its own paragraph).
_BREAKING = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "aside",
        "header",
        "footer",
        "nav",
        "body",
        "html",
        "form",
        "fieldset",
        "figure",
        "figcaption",
        "details",
        "summary",
        "address",
        "center",
        "hr",
        "caption",
        "legend",
        "dialog",
        "hgroup",
        "search",
    }
    | _LISTS
)
# Page chrome (`_is_chrome`): landmarks that are never a page's main content, and the sections in which a
# <footer> is an article's own (its tags, its author) rather than the page's.
_CHROME_TAGS = frozenset({"nav", "aside", "dialog"})
_CHROME_ROLES = frozenset({"navigation", "complementary", "contentinfo", "search", "dialog", "alertdialog"})
_SECTIONS = frozenset({"article", "main", "section"})
_TEXT_TYPES = (NavigableString, CData)  # exact types: Comment, Doctype, Script... are subclasses
# Tags whose text never runs into its neighbours' ("<p>a</p><p>b</p>" reads "a b", not "ab").
_SEPARATED = _BREAKING | _LIST_ITEMS | set(_HEADINGS) | {"blockquote", "pre", "table", "tr", "td", "th"}


@dataclass(frozen=True, slots=True)
class ExtractedHtml:
    """Plain text of a page, its structural blocks (offsets into `text`), and its title."""

    text: str
    blocks: tuple[Block, ...]
    title: str | None


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _strings(node: Tag) -> list[str]:
    """Every visible string under `node`, in document order, iteratively (no recursion)."""
    out: list[str] = []
    stack: list[object] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Tag):
            if current.name in _SKIP:
                continue
            if current.name == "br":
                out.append("\n")
            elif current.name in _SEPARATED and current is not node:
                out.append("\n")
                stack.append("\n")  # a plain str: emitted after the children
            stack.extend(reversed(current.contents))
        elif type(current) in _TEXT_TYPES or type(current) is str:
            out.append(str(current))
    return out


_END_ROW = object()


def _table_text(table: Tag) -> str:
    """One line per row, cells joined by " | "; a table nested in a cell is flattened into that cell.

    One iterative pass over the table: each cell's text is read once, so nested tables cost linear time.
    """
    lines: list[str] = []
    row: list[str] | None = None
    stack: list[object] = list(reversed(table.contents))
    while stack:
        node = stack.pop()
        if node is _END_ROW:
            if row and any(row):
                lines.append(" | ".join(row))
            row = None
        elif not isinstance(node, Tag) or node.name in _SKIP:
            continue
        elif node.name in ("td", "th"):
            cell = _collapse("".join(_strings(node)))
            if row is not None:
                row.append(cell)
            elif cell:  # a cell outside any row: a row of its own
                lines.append(cell)
        elif node.name == "tr" and row is None:
            row = []
            stack.append(_END_ROW)
            stack.extend(reversed(node.contents))
        else:
            stack.extend(reversed(node.contents))
    return "\n".join(lines)


def _pre_text(node: Tag) -> str:
    text = "".join(_strings(node))
    return text.strip("\n").rstrip()


class _Collector:
    """Accumulates (kind, level, text) blocks; loose inline text gathers into the open run.

    `chrome` is how many page-chrome landmarks (`_is_chrome`) enclose the walk; `in_chrome` records, for
    each block, whether it was inside one."""

    def __init__(self) -> None:
        self.blocks: list[tuple[BlockKind, int, str]] = []
        self.in_chrome: list[bool] = []
        self.chrome = 0
        self.run: list[str] = []
        self.run_kind: BlockKind = "paragraph"
        self.run_level = 0

    def add(self, kind: BlockKind, level: int, text: str) -> None:
        if text and not text.isspace():
            self.blocks.append((kind, level, text))
            self.in_chrome.append(self.chrome > 0)

    def flush(self, kind: BlockKind = "paragraph", level: int = 0) -> None:
        """Close the open run as a block, and open a new one of the given kind."""
        self.add(self.run_kind, self.run_level, _collapse("".join(self.run)))
        self.run, self.run_kind, self.run_level = [], kind, level


def _parse(markup: str) -> BeautifulSoup:
    try:
        return BeautifulSoup(markup, "lxml")
    except Exception:  # lxml refuses some inputs (e.g. lone surrogates); the stdlib parser does not
        return BeautifulSoup(markup, "html.parser")


def extract_html(markup: str, *, main_content: bool = False) -> ExtractedHtml:
    """Extract the visible text of `markup` as blocks in document order (see module docstring).

    With `main_content`, only the blocks of the page's main content are kept (`unichunk.chunking.html_main`):
    navigation, site headers, footers, sidebars and cookie banners are left out before the text is
    assembled, so offsets stay exact by construction. The title is still read from the whole page."""
    out, title = _walk(_parse(markup))
    parts = main_blocks(markup, out.blocks, out.in_chrome) if main_content else out.blocks
    return _assemble(parts, title)


def _is_chrome(tag: Tag, in_section: bool) -> bool:
    """Whether a block-level element is a page-chrome landmark: navigation, a sidebar, a dialog (cookie
    banners), the page's footer (a <footer> outside any article, main or section), or an element whose
    ARIA role says so. A page-level <header> is not: it often holds the page's <h1>."""
    if tag.name in _CHROME_TAGS or (tag.name == "footer" and not in_section):
        return True
    role = tag.get("role")
    words = role.split() if isinstance(role, str) else []  # the first role is the one in force
    return bool(words) and words[0].lower() in _CHROME_ROLES


def _walk(soup: BeautifulSoup) -> tuple[_Collector, str | None]:
    """Every block of the parsed page in document order (with whether it is page chrome), and its title."""
    title_tag = soup.find("title")
    title = _collapse(title_tag.get_text()) if title_tag else ""
    # The whole tree, not just soup.body: parsers put content after a stray </html> outside the body.
    out = _Collector()
    # Stack entries: a node to enter, or ("exit", is_list, is_chrome, is_section) to close the container
    # on top of `context`.
    stack: list[object] = list(reversed(soup.contents))
    list_depth = sections = 0
    context: list[tuple[BlockKind, int]] = [("paragraph", 0)]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            _, was_list, was_chrome, was_section = item
            list_depth -= was_list
            context.pop()
            out.flush(*context[-1])
            out.chrome -= was_chrome
            sections -= was_section
            continue
        if not isinstance(item, Tag):
            if type(item) in _TEXT_TYPES:
                out.run.append(str(item))
            continue
        name = item.name
        if name in _SKIP:
            continue
        if name == "br":
            out.run.append(" ")
            continue
        if name in _HEADINGS:
            out.flush(*context[-1])
            text = _collapse("".join(_strings(item)))
            out.add("heading", _HEADINGS[name], text)
            if not title and name == "h1":
                title = text
            continue
        if name == "pre":
            out.flush(*context[-1])
            out.add("code", 0, _pre_text(item))
            continue
        if name in ("code", "samp"):  # read once, never descended: nested <code> stays linear
            text = "".join(_strings(item))
            if "\n" in text.strip() and not any(part.strip() for part in out.run):
                out.flush(*context[-1])  # a multi-line <code> opening its container is a code block
                out.add("code", 0, text.strip("\n").rstrip())
            else:
                out.run.append(text)
            continue
        if name == "table":
            out.flush(*context[-1])
            out.add("table", 0, _table_text(item))
            continue
        if name == "blockquote":
            out.flush(*context[-1])
            out.add("quote", 0, _collapse("".join(_strings(item))))
            continue
        if name in _LIST_ITEMS:
            kind, level = "list_item", max(list_depth, 1)
        elif name in _BREAKING:
            kind, level = (
                context[-1] if context[-1][0] == "list_item" and name not in _LISTS else ("paragraph", 0)
            )
        else:  # inline element: its text joins the open run
            stack.extend(reversed(item.contents))
            continue
        out.flush(kind, level)
        is_list = int(name in _LISTS)
        is_chrome = int(_is_chrome(item, sections > 0))
        is_section = int(name in _SECTIONS)
        list_depth += is_list
        out.chrome += is_chrome
        sections += is_section
        context.append((kind, level))
        stack.append(("exit", is_list, is_chrome, is_section))
        stack.extend(reversed(item.contents))
    out.flush()
    return out, title or None


def _assemble(parts: list[tuple[BlockKind, int, str]], title: str | None) -> ExtractedHtml:
    texts: list[str] = []
    blocks: list[Block] = []
    offset = 0
    for kind, level, text in parts:
        if texts:
            offset += len(SEPARATOR)
        texts.append(text)
        blocks.append(Block(kind=kind, start=offset, end=offset + len(text), level=level))
        offset += len(text)
    return ExtractedHtml(text=SEPARATOR.join(texts), blocks=tuple(blocks), title=title)
