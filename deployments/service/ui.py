"""`/ui`: a small web UI of the service, behind the API's token: search, the document view (chunk
boundaries, overlaps, headings, each chunk's graph), and the latest evaluation report.

Pages are rendered on the server (`ui_pages`) from the same `Pipeline` reads as the API, with a little
JavaScript; every asset is served from `/ui/static` by the service itself, so the UI works offline. A
browser logs in once at `/ui/login` (`ui_auth`: an HttpOnly, SameSite=Strict cookie holding the token).
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from unichunk.access import AccessDenied, Principal
from unichunk.deployments.service import ui_pages
from unichunk.deployments.service.ui_auth import (
    COOKIE,
    TokenCheck,
    browser_auth,
    token_accepted,
    token_required,
)
from unichunk.errors import NotFound, UnichunkError, UsageError
from unichunk.pipeline import Pipeline

STATIC_FILES = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
LATEST_REPORT = Path("evaluations") / "latest.json"
MAX_FORM_BYTES = 16_384
# No page of the UI may run a script or load anything the service did not serve.
CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"


def create_ui_router(pipeline: Pipeline, check: TokenCheck, data_dir: Path) -> APIRouter:
    """The `/ui` routes, reading through `pipeline`; `check` is the API's token check."""
    router = APIRouter(include_in_schema=False)
    caller_of = Depends(browser_auth(check, redirect=True))  # each page reads as its caller's principal

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status, headers={"Content-Security-Policy": CSP})

    @router.get("/ui/static/{name}")
    def static(name: str) -> Response:  # the stylesheet and script: public, like a login page's
        if name not in STATIC_FILES:
            raise HTTPException(404, "no such file")
        content = resources.files("unichunk.deployments.service").joinpath("ui_static", name).read_bytes()
        return Response(content, media_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})

    @router.get("/ui/login")
    def login_form(request: Request, next: str = "/ui", failed: bool = False) -> Response:
        if not token_required(check, request):
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
    def search(q: str = "", k: int = 10, caller: Principal = caller_of) -> HTMLResponse:
        if not q.strip():
            return html(ui_pages.search_page(q, None))
        try:
            found = pipeline.scoped(caller).search(q, max(1, min(k, 50)), graph=False, expand=False)
        except UsageError as exc:
            return html(ui_pages.search_page(q, None, str(exc)), 422)
        return html(ui_pages.search_page(q, found))

    @router.get("/ui/documents/{document_id:path}")
    def document(
        document_id: str, start: int | None = None, end: int | None = None, caller: Principal = caller_of
    ) -> HTMLResponse:
        reader = pipeline.scoped(caller)
        try:
            found = reader.document(document_id)
        except NotFound as exc:
            return html(ui_pages.page("Not found", f"<p class='error'>{escape(str(exc))}</p>"), 404)
        graphs, graph_error = None, None
        try:
            graphs = reader.chunk_graphs([c.chunk_id for c in found.chunks])
        except (UnichunkError, OSError, HTTPException) as exc:  # the text still shows without the graph
            graph_error = exc.detail if isinstance(exc, HTTPException) else str(exc)
        highlight = (start, end) if start is not None and end is not None and start < end else None
        return html(ui_pages.document_page(found, graphs, highlight, graph_error))

    @router.get("/ui/evaluation")
    def evaluation(caller: Principal = caller_of) -> HTMLResponse:
        if not caller.admin:  # its questions and references may quote any document
            raise AccessDenied("the evaluation report is for admin tokens: it may quote any document")
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


def _local(target: str) -> str:
    """`target` if it is a path of this service, else `/ui` (no redirect to another site after login,
    nothing that could split the Location header)."""
    local = target.startswith("/") and not target.startswith("//") and "\\" not in target
    if local and target.isprintable() and not any(c.isspace() for c in target):
        return target
    return "/ui"
