"""The CLI's client of a running service: `unichunk.interface.IndexService` over HTTP, so `search`,
`status` and `delete` get from `unichunk serve` the very types a `Pipeline` returns, without loading
models here.

A service is used when one is running for this data dir (`unichunk.deployments.service.discovery`:
UNICHUNK_SERVICE_URL, else the `service.json` a live `unichunk serve` wrote); `running_service()` is None
when there is none, or it cannot be reached, and the CLI works in-process. An answer the service gives is
the answer: a 404 is `NotFound`, a 403 `AccessDenied`, another 4xx a `ServiceRefused` (a usage error), a
5xx `ServiceError`. The bearer token sent is UNICHUNK_TOKEN (or `--token`: the caller's own), else
UNICHUNK_API_TOKEN (the service's admin token, where the CLI runs beside the service).
"""

from __future__ import annotations

from typing import Unpack
from urllib.parse import quote

import httpx

from unichunk.access import AccessDenied
from unichunk.deployments.service.discovery import running_service_url
from unichunk.deployments.settings import ServiceSettings
from unichunk.errors import NotFound, UnichunkError, Unreachable, UsageError
from unichunk.interface import DocumentState, SearchArgs
from unichunk.request_limits import MAX_LISTED
from unichunk.results import DocumentInfo, DocumentList, EntityResult, Generations, IndexStatus, SearchResult

TIMEOUT = httpx.Timeout(60.0, connect=1.0)  # a search can wait for a run's hand-over; connecting cannot


class ServiceUnavailable(Unreachable):
    """No running service to talk to: work in-process."""


class ServiceError(UnichunkError):
    """The service answered with an error; `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ServiceRefused(ServiceError, UsageError):
    """A 4xx: the request is at fault (a missing or wrong token, a bad argument)."""


class ServiceNotFound(ServiceRefused, NotFound):
    """A 404: what the request names does not exist there."""


class ServiceDenied(ServiceRefused, AccessDenied):
    """A 403: the token sent may not do this (exit 4, as `AccessDenied` in-process)."""


class ServiceClient:
    """A running service, answering what a `Pipeline` answers (`unichunk.interface.IndexService`)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url
        self._http = httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT, trust_env=False)

    def _call(self, method: str, path: str, **kwargs: object) -> object:
        try:
            response = self._http.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.TransportError as exc:
            raise ServiceUnavailable(f"{self.url}: {exc}") from exc
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            status = response.status_code
            kind = {404: ServiceNotFound, 403: ServiceDenied}.get(
                status, ServiceRefused if status < 500 else ServiceError
            )
            raise kind(status, detail if isinstance(detail, str) else str(detail))
        return response.json()

    def search(self, query: str, k: int = 5, **options: Unpack[SearchArgs]) -> SearchResult:
        params = {
            "q": query,
            "k": k,
            "mode": options.get("mode", "hybrid"),
            "expand": str(options.get("expand", True)).lower(),
            "graph": str(options.get("graph", True)).lower(),
            "document": list(options.get("document_ids") or ()),
            **({"source": options["source"]} if options.get("source") is not None else {}),
        }
        return SearchResult.model_validate(self._call("GET", "/search", params=params))

    def entity(self, name: str, hops: int = 1, limit: int = 20) -> EntityResult:
        # a lone surrogate (an argv byte that is no UTF-8) has no UTF-8 form: sent as "?", found as nothing
        path = f"/entities/{quote(name, safe='', errors='replace')}"
        answer = self._call("GET", path, params={"hops": hops, "limit": limit})
        return EntityResult.model_validate(answer)

    def status(self, *, failed_only: bool = False) -> IndexStatus:
        answer = self._call("GET", "/status", params={"failed": str(failed_only).lower()})
        return IndexStatus.model_validate(answer)

    def generations(self) -> Generations:
        answer = self._call("GET", "/status", params={"failed": "true"})  # the shortest answer that has them
        return Generations.model_validate(answer)

    def documents(
        self, *, state: DocumentState | None = None, source: str | None = None
    ) -> dict[str, DocumentInfo]:
        """Every page of `GET /documents`, in the service's order (a page that adds nothing new, as when
        documents vanish between pages, ends the listing)."""
        asked = {name: value for name, value in (("state", state), ("source", source)) if value is not None}
        found: dict[str, DocumentInfo] = {}
        while True:
            params = {**asked, "offset": len(found), "limit": MAX_LISTED}
            page = DocumentList.model_validate(self._call("GET", "/documents", params=params))
            before = len(found)
            found.update((d.document_id, d) for d in page.documents)
            if len(found) == before or len(found) >= page.total:
                return found

    def delete(self, document_id: str) -> dict[str, int]:
        """Chunks removed per store, as the served run reports them ({} when its result is not kept)."""
        answer = self._call("DELETE", f"/documents/{quote(document_id, safe='')}", params={"wait": "true"})
        removed = answer.get("removed") if isinstance(answer, dict) else None
        return removed or {}

    def close(self) -> None:
        self._http.close()


def running_service(token: str | None = None) -> ServiceClient | None:
    """A client of the service running for this data dir, sending `token` (default: UNICHUNK_TOKEN, else
    UNICHUNK_API_TOKEN, the service's admin token); None when there is none (work in-process)."""
    url = running_service_url()
    if url is None:
        return None
    if token is None:
        settings = ServiceSettings()
        configured = settings.token or settings.api_token
        token = configured.get_secret_value() if configured else None
    return ServiceClient(url, token)
