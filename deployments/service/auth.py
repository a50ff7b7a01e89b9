"""Bearer-token auth of the service's API routes, and the rule that a non-loopback listener needs a token.

With UNICHUNK_API_TOKEN set, /search, /documents and /status answer 401 (with `WWW-Authenticate: Bearer`)
unless the request carries `Authorization: Bearer <token>`; compared in constant time; so do /docs, /redoc
and /openapi.json (`api_docs`). `/health` (status only) and `/metrics` stay open (probes, scrapers), the
webhook route has its own HMAC auth.
Without a token the API is open, which `check_listen_host` allows only on loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable

from fastapi import HTTPException, Request

from unichunk.deployments.settings import ServiceSettings

TOKEN_VARIABLE = "UNICHUNK_API_TOKEN"


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


def bearer_auth(settings: ServiceSettings) -> Callable[[Request], None]:
    """A FastAPI dependency enforcing the configured token (a no-op without one)."""
    token = settings.api_token.get_secret_value().encode() if settings.api_token else b""

    def check(request: Request) -> None:
        if not token:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": 'Bearer realm="unichunk"'}
            )

    return check
