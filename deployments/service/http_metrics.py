"""HTTP metrics of the service's API: requests by route template, method and status, and their latency.

A plain ASGI middleware (`app.add_middleware(HttpMetrics)`), so it sees every response, the ones an
exception handler or a 404 produced too. The `route` label is the matched route's template
(`/documents/{document_id}`, never the filled-in path) or `<unmatched>`, so a scanner probing random URLs
cannot create series without bound (methods outside `METHODS` are `OTHER`).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from unichunk.metrics import DURATION_BUCKETS

UNMATCHED = "<unmatched>"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})  # any other: "OTHER"

HTTP_REQUESTS = Counter(
    "unichunk_http_requests",
    "HTTP requests answered by the service's API, by route template, method and status code.",
    ["route", "method", "status"],
)
HTTP_SECONDS = Histogram(
    "unichunk_http_request_duration_seconds",
    "Time from a request's arrival to the end of its response, by route template and method.",
    ["route", "method"],
    buckets=DURATION_BUCKETS,
)


def route_template(scope: Scope) -> str:
    """The template of the route Starlette matched (it sets scope["route"] when routing), else UNMATCHED."""
    route: Any = scope.get("route")
    return getattr(route, "path", None) or UNMATCHED


class HttpMetrics:
    """Count and time every HTTP request (lifespan and websocket scopes pass through untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before it starts a response

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            route = route_template(scope)
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            HTTP_REQUESTS.labels(route=route, method=method, status=str(status)).inc()
            HTTP_SECONDS.labels(route=route, method=method).observe(time.perf_counter() - started)
