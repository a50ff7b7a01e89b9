"""`/ui`: a small web UI of the service, behind the API's token: search, the document view (chunk
boundaries, overlaps, headings, each chunk's graph), and the latest evaluation report.

Pages are rendered on the server (`ui_pages`) from the same `Pipeline` reads as the API, with a little
JavaScript; every asset is served from `/ui/static` by the service itself, so the UI works offline. A
browser logs in once at `/ui/login` (`ui_auth`: an HttpOnly, SameSite=Strict cookie holding the token).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any, cast, get_args
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from unichunk.access import Principal
from unichunk.deployments.service import ui_pages
from unichunk.deployments.service.auth import denied
from unichunk.deployments.service.ui_auth import (
    COOKIE,
    TokenCheck,
    browser_auth,
    token_accepted,
    token_required,
)
from unichunk.errors import NotFound, UnichunkError, UsageError
from unichunk.interface import DocumentState, Mode
from unichunk.pipeline import Pipeline

STATIC_FILES = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
LATEST_REPORT = Path("evaluations") / "latest.json"
MAX_FORM_BYTES = 16_384
MODES: tuple[str, ...] = get_args(Mode)  # the search modes the page offers: every one the API has
STATES: tuple[str, ...] = get_args(DocumentState)  # the document states the documents page filters by
DEFAULT_K = 10
ADMIN_ONLY = "The evaluation report is for admin tokens: its questions and references may quote any document."
# No page of the UI may run a script or load anything the service did not serve.
CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"


def create_ui_router(pipeline: Pipeline, check: TokenCheck, data_dir: Path) -> APIRouter:
    """The `/ui` routes, reading through `pipeline`; `check` is the API's token check."""
    router = APIRouter(include_in_schema=False)
    caller_of = Depends(browser_auth(check, redirect=True))  # each page reads as its caller's principal

    def html(body: str, status: int = 200, headers: Mapping[str, str] | None = None) -> HTMLResponse:
        return HTMLResponse(body, status, headers={**(headers or {}), "Content-Security-Policy": CSP})

    @router.get("/ui/static/{name}")
    def static(name: str) -> Response:  # the stylesheet and script: public, like a login page's
        if name not in STATIC_FILES:
            raise HTTPException(404, "no such file")
        content = resources.files("unichunk.deployments.service").joinpath("ui_static", name).read_bytes()
        return Response(content, media_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})

    @router.get("/ui/login")
    def login_form(next: str = "/ui", failed: bool = False) -> Response:
        if not token_required(check):
            return RedirectResponse("/ui", 303)
        return html(ui_pages.login_page(_local(next), failed), 401 if failed else 200)

    @router.post("/ui/login")
    async def login(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
        form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        target = _local(form.get("next", "/ui"))
        token = form.get("token", "")
        if not token_accepted(check, request, token):
            return html(ui_pages.login_page(target, failed=True), 401)
        response = RedirectResponse(target, 303)
        response.set_cookie(
            COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
        )
        return response

    @router.post("/ui/logout")
    def logout() -> Response:
        response = RedirectResponse("/ui/login", 303)
        response.delete_cookie(COOKIE, path="/")
        return response

    @router.get("/ui")
    def search(q: str = "", k: str = "", mode: str = "hybrid", caller: Principal = caller_of) -> HTMLResponse:
        # A page's parameters come from a URL a person may have typed: a bad one is named on the page
        # (or, for `k`, left at its default), never answered with the API's JSON 422.
        wanted = min(max(_int(k, DEFAULT_K), 1), 50)
        if mode not in MODES:
            error = f"no search mode {mode!r}: one of {', '.join(MODES)}"
            return html(ui_pages.search_page(q, None, error, modes=MODES), 422)
        if not q.strip():
            return html(ui_pages.search_page(q, None, mode=mode, modes=MODES))
        try:
            found = pipeline.scoped(caller).search(
                q, wanted, mode=cast(Mode, mode), graph=False, expand=False
            )
        except UsageError as exc:
            return html(ui_pages.search_page(q, None, str(exc), mode=mode, modes=MODES), 422)
        except HTTPException as exc:  # the stores: busy while a run writes them, or unavailable
            if exc.status_code != 503:
                raise
            return html(ui_pages.search_page(q, None, exc.detail, mode=mode, modes=MODES), 503, exc.headers)
        return html(ui_pages.search_page(q, found, mode=mode, modes=MODES))

    @router.get("/ui/documents")
    def documents(state: str = "", offset: str = "", caller: Principal = caller_of) -> HTMLResponse:
        """The documents the caller may read, a page at a time (`GET /documents`'s list as a page)."""
        if state and state not in STATES:
            error = f"no document state {state!r}: one of {', '.join(STATES)}"
            return html(ui_pages.documents_page([], state=state, states=STATES, error=error), 422)
        start = max(_int(offset, 0), 0)
        listed = pipeline.scoped(caller).document_page(state=cast(DocumentState, state or None), offset=start)
        return html(
            ui_pages.documents_page(
                listed.documents, state=state or None, states=STATES, total=listed.total, offset=start
            )
        )

    @router.get("/ui/documents/{document_id:path}")
    def document(
        document_id: str, start: str = "", end: str = "", chunk: str = "", caller: Principal = caller_of
    ) -> HTMLResponse:
        reader = pipeline.scoped(caller)
        try:
            found = reader.document(document_id)
        except NotFound as exc:
            return html(ui_pages.page("Not found", f"<p class='error'>{escape(str(exc))}</p>"), 404)
        except HTTPException as exc:  # as in `search`: a page saying so, not the API's JSON
            if exc.status_code != 503:
                raise
            body = f"<p class='error'>{escape(str(exc.detail))}</p>"
            return html(ui_pages.page("Unavailable", body), 503, exc.headers)
        graphs, graph_error = None, None
        try:
            graphs = reader.chunk_graphs([c.chunk_id for c in found.chunks])
        except (UnichunkError, OSError, HTTPException) as exc:  # the text still shows without the graph
            graph_error = exc.detail if isinstance(exc, HTTPException) else str(exc)
        a, b = _int(start, None), _int(end, None)
        highlight = (a, b) if a is not None and b is not None and a < b else None
        return html(ui_pages.document_page(found, graphs, highlight, graph_error, focus=chunk or None))

    @router.get("/ui/evaluation")
    def evaluation(request: Request, caller: Principal = caller_of) -> HTMLResponse:
        if not caller.admin:  # its questions and references may quote any document
            denied(request, "forbidden", caller.token_id)  # counted and logged as the API's 403s are
            return html(ui_pages.evaluation_page(None, ADMIN_ONLY), 403)  # a page with its nav, not JSON
        report, error = _latest_report(data_dir / LATEST_REPORT)
        return html(ui_pages.evaluation_page(report, error))

    return router


def _latest_report(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path.name} cannot be read: {exc}"
    if not isinstance(loaded, dict):
        return None, f"{path.name} is not an evaluation report (a JSON object)"
    return loaded, None


def _int(value: str, default: Any) -> Any:
    """`value` as an integer, else `default` (a page's number typed into its URL by a person)."""
    try:
        return int(value.strip())
    except ValueError:
        return default


def _local(target: str) -> str:
    """`target` if it is a path of this service, else `/ui` (no redirect to another site after login,
    nothing that could split the Location header)."""
    local = target.startswith("/") and not target.startswith("//") and "\\" not in target
    if local and target.isprintable() and not any(c.isspace() for c in target):
        return target
    return "/ui"
