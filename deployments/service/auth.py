"""Who calls the service's API routes: the bearer token resolved to a `Principal`, the rule that a
non-loopback listener needs a token, and the audit of every refusal.

`Authorization: Bearer <token>` names the caller: UNICHUNK_API_TOKEN is the admin (reads everything, may
write); a token from `unichunk tokens create` is its principal, looked up in the records on every request,
so a revoked one is refused by the next request (`unichunk.tokens`). A missing, malformed, unknown or
revoked token is 401 (with `WWW-Authenticate: Bearer`); each route then runs as
`pipeline.scoped(principal)`, and what the principal may not do (`AccessDenied`) is 403. /docs and
/openapi.json need a token like the data routes (`api_docs`); `/health` and `/metrics` stay open (probes,
scrapers); the webhook route has its own HMAC auth.

With no token at all (no UNICHUNK_API_TOKEN and no token ever created) the API is open and its caller is
the `OWNER`, which `listen_refusal` allows only on loopback; the first created token closes it for good
(revoking every token does not open it again).

Every refusal is counted (`unichunk_access_denied_total{route,reason}`: the route template, never the
token) and logged in one line with the route, the reason and the token's public id when it has one; never
the token, never document text.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter

from unichunk.access import OWNER, AccessDenied, Principal
from unichunk.deployments.service.http_metrics import route_template
from unichunk.deployments.settings import ServiceSettings
from unichunk.tokens import Tokens

TOKEN_VARIABLE = "UNICHUNK_API_TOKEN"
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="unichunk"'}

ACCESS_DENIED = Counter(
    "unichunk_access_denied",
    "API requests refused: 401 (reason missing_token, bad_token) or 403 (forbidden, or the refusal's own "
    "reason), by route template. Never the token.",
    ["route", "reason"],
)

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name resolving to who knows what: treat as exposed


def listen_refusal(host: str, settings: ServiceSettings | None = None) -> str | None:
    """Why the service must not listen on `host` (None: it may): anything but loopback needs a token."""
    token = (settings or ServiceSettings()).api_token
    if is_loopback(host) or (token and token.get_secret_value()):
        return None
    return (
        f"refusing to listen on {host} without {TOKEN_VARIABLE}: set it (clients send it as a bearer token)"
    )


def denied(request: Request, reason: str, token_id: str | None = None) -> None:
    """Count and log one refusal (route template, reason, the token's public id; nothing else)."""
    route = route_template(request.scope)
    ACCESS_DENIED.labels(route=route, reason=reason).inc()
    logger.warning(
        "access denied: %s %s reason=%s token_id=%s", request.method, route, reason, token_id or "-"
    )


def principal_auth(tokens: Tokens) -> Callable[[Request], Principal]:
    """A FastAPI dependency: the caller's principal, or 401. Open (the owner) while no token exists."""

    def principal(request: Request) -> Principal:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        given = given.strip() if scheme.lower() == "bearer" else ""
        found = tokens.principal(given) if given else None
        if found is not None:
            request.state.principal = found
            return found
        if not tokens.required():  # no token exists that could name anyone: the open (loopback) API
            return OWNER
        if not given:
            denied(request, "missing_token")
            raise HTTPException(401, "missing bearer token", headers=CHALLENGE)
        denied(request, "bad_token", Tokens.token_id(given))
        raise HTTPException(401, "unknown or revoked bearer token", headers=CHALLENGE)

    return principal


def bearer_auth(tokens: Tokens) -> Callable[[Request], None]:
    """The same check for routes that need a caller but not who (the API's docs)."""
    resolve = principal_auth(tokens)

    def check(request: Request) -> None:
        resolve(request)

    return check


def refuse_denied_access(app: FastAPI) -> None:
    """Answer `AccessDenied` from any route with 403 and its one-line reason, counted and logged."""

    @app.exception_handler(AccessDenied)
    async def _forbidden(request: Request, exc: AccessDenied) -> JSONResponse:
        principal: Any = getattr(request.state, "principal", None)
        denied(request, getattr(exc, "reason", "forbidden"), getattr(principal, "token_id", None))
        return JSONResponse({"detail": str(exc)}, status_code=403)
