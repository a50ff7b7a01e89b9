"""The CLI's side of a running service: `search`, `status` and `delete` ask it instead of loading models.

A service is used when one is running for this data dir (`unichunk.deployments.service.discovery`: UNICHUNK_SERVICE_URL,
else the `service.json` a live `unichunk serve` wrote). When none is, or it cannot be reached, the caller
gets `ServiceUnavailable` and works in-process as before; an answer the service gives (404, 401, 503) is
the answer, raised as `ServiceError` with the service's message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from unichunk.chunking.errors import UnichunkError
from unichunk.deployments.service.discovery import running_service_url
from unichunk.deployments.settings import ServiceSettings
from unichunk.retrieval.results import SearchResult

T = TypeVar("T")
TIMEOUT = httpx.Timeout(60.0, connect=1.0)  # a search can wait for a run's hand-over; connecting cannot


class ServiceUnavailable(Exception):
    """No running service to talk to: work in-process."""


class ServiceError(UnichunkError):
    """The service answered with an error; `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ServiceRefused(ServiceError):
    """A 4xx: the request is at fault (an unknown document, a missing or wrong token)."""


def ask_service(call: Callable[[ServiceClient], T]) -> T | None:
    """`call` on the service running for this data dir; None when none is running or reachable (the
    caller then works in-process). The service's own error answers are raised, not retried in-process."""
    try:
        client = ServiceClient.running()
    except ServiceUnavailable:
        return None
    try:
        return call(client)
    except ServiceUnavailable:
        return None
    finally:
        client.close()


class ServiceClient:
    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url
        self._http = httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT, trust_env=False)

    @classmethod
    def running(cls) -> ServiceClient:
        """A client of the service running for this data dir; ServiceUnavailable when there is none."""
        url = running_service_url()
        if url is None:
            raise ServiceUnavailable("no service running")
        token = ServiceSettings().api_token
        return cls(url, token.get_secret_value() if token else None)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServiceUnavailable(f"{self.url}: {exc}") from exc
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            kind = ServiceRefused if response.status_code < 500 else ServiceError
            raise kind(response.status_code, detail if isinstance(detail, str) else str(detail))
        return response.json()

    def search(self, query: str, k: int, **options: Any) -> SearchResult:
        params = {"q": query, "k": k, **{key: str(v).lower() for key, v in options.items()}}
        return SearchResult.model_validate(self._call("GET", "/search", params=params))

    def status(self, *, failed: bool = False) -> dict[str, Any]:
        return self._call("GET", "/status", params={"failed": str(failed).lower()})

    def delete(self, document_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/documents/{quote(document_id, safe='')}", params={"wait": "true"})

    def close(self) -> None:
        self._http.close()
