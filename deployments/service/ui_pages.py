"""The pages of the service's `/ui`, rendered from the application layer's results as plain HTML.

Everything a document, a query or a report holds is user text, and documents are hostile: every such
string goes through `html.escape` here, in text and in attributes alike, and URLs are built with
`urllib.parse.quote`. The only scripts are the service's own `/ui/static/ui.js`; no asset comes from
elsewhere, so the pages work offline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from itertools import pairwise
from typing import Any
from urllib.parse import quote, urlencode

from unichunk.eval_report_html import STYLE as REPORT_STYLE
from unichunk.eval_report_html import report_body
from unichunk.results import ChunkRecord, DocumentChunks, DocumentInfo, GraphResult, SearchResult

STATIC = "/ui/static"
SNIPPET_CHARS = 280


def page(title: str, body: str, *, nav: bool = True, extra_style: str = "") -> str:
    """One page: the UI's stylesheet and script, a navigation bar, `body` (already escaped)."""
    links = (
        '<nav><a href="/ui">Search</a> <a href="/ui/documents">Documents</a> '
        '<a href="/ui/evaluation">Evaluation</a> <a href="/docs">API</a>'
        '<form method="post" action="/ui/logout" class="logout"><button type="submit">Log out</button>'
        "</form></nav>"
        if nav
        else ""
    )
    style = f"<style>{extra_style}</style>" if extra_style else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · unichunk</title>"
        f'<link rel="stylesheet" href="{STATIC}/ui.css">{style}'
        f'<script src="{STATIC}/ui.js" defer></script></head>'
        f"<body>{links}<main>{body}</main></body></html>"
    )


def login_page(next_path: str, failed: bool) -> str:
    error = '<p class="error" id="login-error">That token was not accepted.</p>' if failed else ""
    body = (
        "<h1>unichunk</h1><p>Log in with your access token: one made for you with <code>unichunk tokens "
        "create</code>, or the service's <code>UNICHUNK_API_TOKEN</code>.</p>"
        f'{error}<form method="post" action="/ui/login" class="login">'
        f'<input type="hidden" name="next" value="{escape(next_path)}">'
        '<label>Token <input type="password" name="token" id="token" autocomplete="current-password" '
        'autofocus required></label> <button type="submit" id="login">Log in</button></form>'
    )
    return page("Log in", body, nav=False)


MODE_NAMES = {
    "hybrid": "hybrid (keywords + vectors)",
    "keywords": "keywords (BM25)",
    "vectors": "vectors (meaning)",
    "graph": "graph (entities named)",
}


def search_page(
    query: str,
    found: SearchResult | None,
    error: str | None = None,
    *,
    mode: str = "hybrid",
    modes: Sequence[str] = ("hybrid",),
) -> str:
    options = "".join(
        f'<option value="{escape(m)}"{" selected" if m == mode else ""}>{escape(MODE_NAMES.get(m, m))}</option>'
        for m in modes
    )
    form = (
        '<form method="get" action="/ui" class="search" role="search">'
        f'<input type="search" name="q" id="q" value="{escape(query)}" placeholder="Search the index" '
        "autofocus> "
        f'<select name="mode" id="mode" aria-label="Search mode">{options}</select> '
        '<button type="submit">Search</button></form>'
    )
    if error:
        return page("Search", form + f'<p class="error">{escape(error)}</p>')
    if found is None:
        return page("Search", form)
    if not found.hits:
        return page(f"Search: {query}", form + '<p class="muted" id="summary">No hits.</p>')
    items = []
    for hit in found.hits:
        title = hit.title or hit.path or hit.source_id or hit.document_id
        link = document_link(hit.document_id, hit.start_char, hit.end_char, hit.chunk_id)
        shown = found.preview(hit)  # its best passage, where the search cut it into some
        snippet = shown if len(shown) <= SNIPPET_CHARS else shown[:SNIPPET_CHARS] + "…"
        items.append(
            f'<li class="hit"><a class="hit-link" href="{escape(link)}">{escape(title)}</a> '
            f'<span class="score">score {hit.score:.4f}</span>'
            f'<div class="headings">{_headings(hit.heading_chain)}</div>'
            f'<p class="snippet">{escape(snippet)}</p>'
            f'<div class="muted">{escape(hit.path or hit.source_id or hit.document_id)} · '
            f"chars {hit.start_char}–{hit.end_char} · "
            f"{escape(', '.join(f'{k} #{v}' for k, v in hit.ranks.items()))}</div></li>"
        )
    count = f"{len(found.hits)} hit{'' if len(found.hits) == 1 else 's'}"
    summary = f'<p class="muted" id="summary">{count} · {escape(found.route)}</p>'
    return page(f"Search: {query}", form + summary + f'<ol class="hits">{"".join(items)}</ol>')


def documents_page(
    documents: Sequence[DocumentInfo],
    *,
    state: str | None = None,
    states: Sequence[str] = (),
    total: int = 0,
    offset: int = 0,
    error: str | None = None,
) -> str:
    """The documents the caller may read (`documents`, one page of `total` from `offset`): each one's
    source, state and chunk count, linking to its view; a failed one's error whole, under it."""
    choices = [("", "all"), *((s, s) for s in states)]
    filters = " ".join(
        f'<a href="/ui/documents{"?" + urlencode({"state": value}) if value else ""}"'
        f"{' aria-current=page' if value == (state or '') else ''}>{escape(name)}</a>"
        for value, name in choices
    )
    head = f'<h1>Documents</h1><p class="filters" id="filters">{filters}</p>'
    if error:
        return page("Documents", head + f'<p class="error">{escape(error)}</p>')
    if not documents:
        return page("Documents", head + '<p class="muted" id="summary">No documents.</p>')
    rows = []
    for d in documents:
        name = escape(d.source_id or d.document_id)
        cell = (
            f'<a href="/ui/documents/{quote(d.document_id, safe="")}">{name}</a>' if d.chunk_count else name
        )
        rows.append(
            f'<tr class="document {escape(d.state)}"><td>{cell}</td><td>{escape(d.source_system or "")}</td>'
            f"<td>{escape(d.state)}</td><td>{d.chunk_count}</td><td>{escape(d.updated_at[:19])}</td></tr>"
        )
        if d.state == "failed" and d.error:
            rows.append(f'<tr class="failure"><td colspan="5" class="error">{escape(d.error)}</td></tr>')
    last = offset + len(documents)
    summary = f"{offset + 1}–{last} of {total}" if offset or last < total else f"{total}"
    more = (
        f' · <a id="next" href="/ui/documents?{urlencode({"state": state or "", "offset": last})}">next</a>'
        if last < total
        else ""
    )
    table = (
        '<table class="documents"><thead><tr><th>document</th><th>source</th><th>state</th><th>chunks</th>'
        f"<th>updated</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return page("Documents", head + f'<p class="muted" id="summary">{summary} documents{more}</p>' + table)


def document_link(document_id: str, start: int, end: int, chunk_id: str | None = None) -> str:
    """The document view with the span `start`..`end` highlighted (anchor `#hit`)."""
    params: dict[str, Any] = {"start": start, "end": end}
    if chunk_id:
        params["chunk"] = chunk_id
    return f"/ui/documents/{quote(document_id, safe='')}?{urlencode(params)}#hit"


@dataclass(frozen=True)
class Segment:
    """A run of the document's text covered by the same chunks (and inside or outside the highlight)."""

    start: int
    end: int
    chunks: tuple[int, ...]  # chunk indexes covering it; () for text between chunks that no chunk holds
    hit: bool


def segments(chunks: Sequence[ChunkRecord], highlight: tuple[int, int] | None) -> tuple[str, list[Segment]]:
    """The document's text laid out from its chunks' exact offsets (text no chunk holds shows as spaces:
    the stores keep chunks, not documents), cut at every chunk boundary and at the highlight's ends."""
    length = max((c.end_char for c in chunks), default=0)
    text = [" "] * length
    for c in chunks:
        text[c.start_char : c.start_char + len(c.content)] = c.content
    cuts = {0, length}
    for c in chunks:
        cuts.update((c.start_char, c.end_char))
    if highlight:
        cuts.update(max(0, min(length, x)) for x in highlight)
    starting: dict[int, list[int]] = {}
    ending: dict[int, list[int]] = {}
    for c in chunks:
        if c.start_char < c.end_char:
            starting.setdefault(c.start_char, []).append(c.chunk_index)
            ending.setdefault(c.end_char, []).append(c.chunk_index)
    active: set[int] = set()  # one sweep over the cuts: a long document's view stays linear
    out = []
    for a, b in pairwise(sorted(cuts)):
        active.difference_update(ending.get(a, ()))
        active.update(starting.get(a, ()))
        hit = highlight is not None and highlight[0] <= a and b <= highlight[1]
        out.append(Segment(a, b, tuple(sorted(active)), hit))
    return "".join(text), out


def document_page(
    found: DocumentChunks,
    graphs: Mapping[str, GraphResult] | None,
    highlight: tuple[int, int] | None,
    graph_error: str | None = None,
    focus: str | None = None,
) -> str:
    """The document's text from its chunks' offsets beside its chunk list; `focus` (a chunk ID: the search
    hit's) is marked in the list, which the script scrolls to."""
    info = found.document
    title = info.path or info.source_id or info.document_id
    text, parts = segments(found.chunks, highlight)
    starts = {c.start_char: c.chunk_index for c in found.chunks}
    html_text = []
    in_hit = False
    for s in parts:
        if s.start in starts and s.chunks:
            n = starts[s.start]
            html_text.append(f'<span class="boundary" data-chunk="{n}" title="chunk {n} starts">{n}</span>')
        if s.hit and not in_hit:
            html_text.append('<mark id="hit" class="hit">')
            in_hit = True
        elif not s.hit and in_hit:
            html_text.append("</mark>")
            in_hit = False
        if not s.chunks:
            kind = "gap"
        elif len(s.chunks) > 1:
            kind = "overlap"
        else:
            kind = f"chunk c{s.chunks[0] % 2}"
        html_text.append(
            f'<span class="seg {kind}" data-chunks="{" ".join(map(str, s.chunks))}">'
            f"{escape(text[s.start : s.end])}</span>"
        )
    if in_hit:
        html_text.append("</mark>")
    overlaps = sum(1 for s in parts if len(s.chunks) > 1)
    legend = (
        f'<p class="legend"><span class="seg chunk c0">chunk</span> <span class="seg chunk c1">next chunk'
        f'</span> <span class="seg overlap">overlap ({overlaps})</span> <span class="boundary">n</span> '
        "chunk n starts · <mark>search hit</mark></p>"
    )
    chunk_items = [
        _chunk_item(c, (graphs or {}).get(c.chunk_id), focus == c.chunk_id)
        for c in sorted(found.chunks, key=lambda c: c.chunk_index)
    ]
    graph_note = f'<p class="error">Graph unavailable: {escape(graph_error)}</p>' if graph_error else ""
    body = (
        f'<h1 id="doc-title">{escape(title)}</h1>'
        f'<p class="muted">{escape(info.document_id)} · {len(found.chunks)} chunks · {escape(info.state)}</p>'
        f'{legend}<div class="doc-layout"><pre class="doc-text" id="doc-text">{"".join(html_text)}</pre>'
        f'<aside class="chunks">{graph_note}<ol id="chunk-list">{"".join(chunk_items)}</ol></aside></div>'
    )
    return page(title, body)


def _chunk_item(chunk: ChunkRecord, graph: GraphResult | None, focus: bool = False) -> str:
    entities = "".join(
        f'<li class="entity">{escape(e.name)} <span class="muted">{escape(e.type)}</span></li>'
        for e in (graph.entities if graph else [])
    )
    relations = "".join(
        f'<li class="relation">{escape(r.source)} → {escape(r.target)} '
        f'<span class="muted">{escape(r.keywords)}</span></li>'
        for r in (graph.relations if graph else [])
    )
    graph_html = (f'<ul class="entities">{entities}</ul>' if entities else "") + (
        f'<ul class="relations">{relations}</ul>' if relations else ""
    ) or '<p class="muted">nothing in the graph</p>'
    return (
        f'<li class="chunk-item{" focus" if focus else ""}" data-chunk="{chunk.chunk_index}" '
        f'id="chunk-{chunk.chunk_index}">'
        f"<b>chunk {chunk.chunk_index}</b> "
        f'<span class="muted">chars {chunk.start_char}–{chunk.end_char}</span>'
        f'<div class="headings">{_headings(chunk.heading_chain)}</div>{graph_html}</li>'
    )


def evaluation_page(report: Mapping[str, Any] | None, error: str | None = None) -> str:
    if error:
        return page("Evaluation", f'<h1>Evaluation</h1><p class="error">{escape(error)}</p>')
    if report is None:
        return page(
            "Evaluation",
            '<h1>Evaluation</h1><p class="muted" id="no-evaluation">No evaluation yet: '
            "<code>unichunk eval QUESTIONS</code> saves one.</p>",
        )
    return page("Evaluation", report_body(report), extra_style=REPORT_STYLE)


def _headings(chain: Sequence[str]) -> str:
    return " › ".join(escape(h) for h in chain) or '<span class="muted">(no heading)</span>'
