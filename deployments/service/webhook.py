"""Webhook receiver: turns a signed "document changed" call from a source system into a Prefect event.

Prefect Cloud's incoming webhooks do not exist on a self-hosted server, so this small FastAPI app plays
that part. It only verifies and translates: the event fires the `ingest-document` / `delete-document`
deployments' triggers, and those runs touch the stores, never the receiver. The same app is the service's
API (`unichunk.deployments.service.api`, bearer auth in `.auth`).

Checks, in order (`webhook_security`): size -> 413, content type -> 415, HMAC signature and timestamp
freshness -> 401, replayed signature or delivery id -> 409, JSON shape, unsafe ids or paths -> 422, a
source (or a document of a source) other than the one whose secret signed it -> 403 (`signing_secrets`). The
event's id is derived from the delivery id, so a sender's retry never starts a second run (Prefect drops
an event id it has seen); if Prefect cannot take the event the answer is 503 and the sender retries. An
`updated` webhook is also queued under the event's id before the event fires (`unichunk.update_queue`), so
the run that next takes the store lock applies every update waiting, one start-up for a burst.
docs/operations.md ("Webhooks") has the headers a sender signs.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prefect.events import Event
from prefect.settings import get_current_settings
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError

from unichunk.deployments.service.api import (
    SinksProvider,
    create_search_router,
    open_stores,
    service_pipeline,
    service_tokens,
)
from unichunk.deployments.service.api_docs import WITHOUT_OPEN_DOCS, add_api_docs
from unichunk.deployments.service.auth import refuse_denied_access
from unichunk.deployments.service.discovery import announce, withdraw
from unichunk.deployments.service.http_metrics import HttpMetrics
from unichunk.deployments.service.listener import listener
from unichunk.deployments.service.prefect_outage import prefect_reachability
from unichunk.deployments.service.ui import create_ui_router
from unichunk.deployments.service.ui_auth import token_check
from unichunk.deployments.service.webhook_security import (
    WebhookRejected,
    authenticate_source,
    check_document_id,
    check_regular_file,
    check_source_id,
    check_source_system,
    event_id_for,
    replay_keys,
    resolve_source_path,
)
from unichunk.deployments.serving.multiprocess_metrics import metrics_page
from unichunk.deployments.settings import ServiceSettings
from unichunk.pipeline import Pipeline
from unichunk.replay_cache import open_replay_cache
from unichunk.settings import SinkSettings
from unichunk.update_queue import UpdateQueue, open_update_queue
from unichunk.warm_stores import WarmStores

EVENT_NAMES = {"updated": "document.updated", "deleted": "document.deleted"}
RESOURCE_PREFIX = "unichunk.document."

WEBHOOKS_ACCEPTED = Counter(
    "unichunk_webhooks_accepted_total", "Webhooks verified and turned into a Prefect event.", ["event"]
)
WEBHOOKS_REJECTED = Counter(
    "unichunk_webhooks_rejected_total",
    "Webhooks refused, by reason (signature, replay, size...).",
    ["reason"],
)

logger = logging.getLogger(__name__)


class WebhookPayload(BaseModel):
    """The body a source system sends. Strict types: a number where a string belongs is an error."""

    model_config = ConfigDict(extra="forbid", strict=True)

    event: Literal["updated", "deleted"]
    document_id: StrictStr | None = None
    source_system: StrictStr | None = None  # the configured source's name when left out
    source_id: StrictStr
    path: StrictStr | None = None
    # The document's own access labels (docs/access.md, "Labels"); left out: kept as they are.
    labels: list[StrictStr] | None = None


class PrefectEventSink:
    """Sends events to a Prefect server's REST API (POST /api/events) and probes its health.

    A direct HTTP call, rather than `emit_event`'s background websocket worker, so the receiver
    knows whether Prefect took the event and can answer 503 when it did not.
    """

    def __init__(self, api_url: str | None, timeout: float = 10.0) -> None:
        self.api_url = api_url.rstrip("/") if api_url else None
        headers: dict[str, str] = {}
        api = get_current_settings().api
        if api.auth_string:
            token = base64.b64encode(api.auth_string.get_secret_value().encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        elif api.key:
            headers["Authorization"] = f"Bearer {api.key.get_secret_value()}"
        self._headers = headers
        self._timeout = timeout

    async def emit(self, event: dict[str, Any]) -> None:
        """Post the event; what Prefect answered, or did not, is told to the process's reachability
        tracker (`prefect_outage`: one line when Prefect goes away, one when it is back)."""
        if not self.api_url:
            raise ConnectionError("PREFECT_API_URL is not set")
        watch = prefect_reachability()
        try:
            async with httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as client:
                response = await client.post(f"{self.api_url}/events", json=[event])
        except httpx.TransportError:
            if watch is not None:
                watch.check()
            raise
        if watch is not None:
            watch.answered()
        response.raise_for_status()

    async def healthy(self) -> tuple[bool, str]:
        if not self.api_url:
            return False, "PREFECT_API_URL is not set"
        try:
            async with httpx.AsyncClient(timeout=3.0, headers=self._headers) as client:
                response = await client.get(f"{self.api_url}/health")
            return response.status_code == 200, f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            return False, f"{type(exc).__name__}: {exc}"


def default_prefect_api_url() -> str | None:
    """PREFECT_API_URL from the environment first (it may be set after Prefect was imported)."""
    if url := os.environ.get("PREFECT_API_URL"):
        return url
    return get_current_settings().api.url


def build_event(
    payload: WebhookPayload, event_id: uuid.UUID, settings: ServiceSettings, known: Callable[[str], bool]
) -> dict[str, Any]:
    """The Prefect event for a verified payload; raises WebhookRejected(422) on anything that would only
    start a run bound to fail: an unsafe value, another source than the configured one, an `updated` path
    that is not a regular file inside the source root, a `deleted` document `known` does not know.

    Every payload key is always present (path may be null) so the triggers' Jinja templates
    (`{{ event.payload.path }}`) never meet an undefined value.
    """
    source_system = _source_system(payload, settings)
    if payload.event == "updated" and settings.source_root is not None:
        _check_listed_source(source_system, settings)
    source_id = check_source_id(payload.source_id)
    if payload.document_id is not None:
        document_id = check_document_id(payload.document_id)
    else:
        document_id = Pipeline.document_id_for(source_system, source_id)
    path: str | None = None
    if payload.event == "updated":
        path = _listed_path(payload, source_id, settings)
    elif payload.path is not None:
        path = str(resolve_source_path(payload.path, settings.source_root))
    labels = None if payload.labels is None else _labels(payload.labels)
    if payload.event == "deleted" and not known(document_id):
        raise WebhookRejected(422, "unknown_document", f"no document {document_id} in the live index")
    event = Event(
        id=event_id,
        event=EVENT_NAMES[payload.event],
        resource={"prefect.resource.id": RESOURCE_PREFIX + document_id, "prefect.resource.name": source_id},
        payload={
            "document_id": document_id,
            "source_system": source_system,
            "source_id": source_id,
            "path": path,
            "labels": labels,
        },
    )
    return event.model_dump(mode="json")


def _labels(labels: list[str]) -> list[str]:
    """The payload's labels, normalised; a bad one is the request's error (422), naming it."""
    try:
        return list(Pipeline.normalise_labels(labels))
    except ValueError as exc:
        raise WebhookRejected(422, "bad_label", str(exc)) from exc


def _listed_path(payload: WebhookPayload, source_id: str, settings: ServiceSettings) -> str:
    """The file an `updated` event names, accepted only where the source's scan would list it as
    `source_id`: the path (by default `source_id` itself) must be a regular file inside the root, its
    place in the root must be `source_id`, and the scan's own rule (`Pipeline.scan_refusal`: patterns, no
    symlinks) must take it. Otherwise a webhook could store a document no rescan ever deletes."""
    named = payload.path or source_id  # no explicit path: the source id is the path under the root
    check_regular_file(resolve_source_path(named, settings.source_root))
    source = settings.source()
    assert settings.source_root is not None and source is not None  # resolve_source_path refuses no root
    base = settings.source_root.expanduser().resolve()
    candidate = Path(named)
    place = Path(os.path.normpath(candidate if candidate.is_absolute() else base / candidate))
    if not place.is_relative_to(base):  # a link outside the root that leads into it
        raise WebhookRejected(422, "unsafe_path", "path is outside the allowed source root")
    relative = place.relative_to(base).as_posix()
    if relative != source_id:
        raise WebhookRejected(
            422,
            "source_id_mismatch",
            f"source_id {source_id!r} is not the file's path in the source root ({relative!r}), which is "
            "the ID a scan gives it: send source_id equal to that path",
        )
    refusal = Pipeline.scan_refusal(source, source_id)
    if refusal is not None:
        raise WebhookRejected(
            422, "not_in_source", f"{source_id} {refusal}: a scan of the source would not list it"
        )
    return str(base / source_id)


def _source_system(payload: WebhookPayload, settings: ServiceSettings) -> str:
    """The event's source: the configured one (UNICHUNK_SOURCE_ROOT), which a payload may name but not change."""
    configured = settings.source_system()
    if payload.source_system is None:
        if configured is None:
            raise WebhookRejected(
                422,
                "unknown_source",
                "name the source (source_system): no UNICHUNK_SOURCE_ROOT is configured",
            )
        return configured
    named = check_source_system(payload.source_system)
    if configured is not None and named != configured and named not in settings.webhook_secrets:
        raise WebhookRejected(
            422, "unknown_source", f"this receiver serves the source {configured!r}, not {named!r}"
        )
    return named


def _check_listed_source(source_system: str, settings: ServiceSettings) -> None:
    """An update is for the configured source, the one folder this receiver lists (another source with
    its own secret may send deletions only)."""
    if source_system != settings.source_system():
        raise WebhookRejected(
            422,
            "unknown_source",
            f"updates are for the source {settings.source_system()!r}, whose folder this receiver lists; "
            f"{source_system!r} may only send deletions",
        )


def signing_secrets(settings: ServiceSettings) -> list[tuple[str | None, str]]:
    """Who may sign for which source, as (source, secret) pairs: each UNICHUNK_WEBHOOK_SECRETS entry for
    its own source; the shared UNICHUNK_WEBHOOK_SECRET for any source (None) while no per-source secret
    is set (the single-source setup, as before), else for the configured source (UNICHUNK_SOURCE_ROOT's)
    only, beside its own secret if it has one, and for none without a configured source."""
    pairs: list[tuple[str | None, str]] = [
        (name, secret.get_secret_value()) for name, secret in settings.webhook_secrets.items()
    ]
    shared = settings.webhook_secret.get_secret_value() if settings.webhook_secret else ""
    if shared and not pairs:
        pairs.append((None, shared))
    elif shared and (configured := settings.source_system()) is not None:
        pairs.append((configured, shared))
    elif shared:
        logger.warning(
            "UNICHUNK_WEBHOOK_SECRET signs for no source: UNICHUNK_WEBHOOK_SECRETS is set and no "
            "UNICHUNK_SOURCE_ROOT names the source it would be for"
        )
    return pairs


def _signed_source(payload: WebhookPayload, signed_for: str | None) -> WebhookPayload:
    """A payload signed with a source's own secret names that source by default."""
    if signed_for is None or payload.source_system is not None:
        return payload
    return payload.model_copy(update={"source_system": signed_for})


def _check_signed_source(event: dict[str, Any], signed_for: str | None, index: Pipeline) -> None:
    """A delivery signed with a source's secret touches that source only: its event names that source,
    and a document it names by ID, if recorded, is one of that source's (403 otherwise)."""
    if signed_for is None:
        return
    payload = event["payload"]
    if payload["source_system"] != signed_for:
        raise WebhookRejected(
            403, "wrong_source", f"signed with the secret of {signed_for!r}: it may not name another source"
        )
    recorded = index.documents([payload["document_id"]]).get(payload["document_id"])
    if recorded is not None and recorded.source_system != signed_for:
        raise WebhookRejected(
            403, "wrong_source", f"signed with the secret of {signed_for!r}: the document is another source's"
        )


def _check_declared_length(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise WebhookRejected(400, "bad_content_length", "invalid Content-Length")
        if int(declared) > limit:
            raise WebhookRejected(413, "too_large", f"body over {limit} bytes")


async def _read_body(request: Request, limit: int) -> bytes:
    """Read at most `limit` bytes: a body streamed without (or lying about) its length is cut off early."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise WebhookRejected(413, "too_large", f"body over {limit} bytes")
    return bytes(body)


def _check_content_type(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise WebhookRejected(415, "content_type", "Content-Type must be application/json")


def create_app(
    settings: ServiceSettings | None = None,
    events: PrefectEventSink | None = None,
    clock: Callable[[], float] = time.time,
    search_sinks: SinksProvider | None = None,
    data_dir: Path | None = None,
) -> FastAPI:
    """Build the receiver. `events` and `clock` are seams (a Prefect server URL, the time) for tests.

    `search_sinks` provides the stores `GET /search` reads (default: the live ones, on first use). The
    replay cache lives under `data_dir` (default: the configured data dir), in `webhook/replay.db`, or in
    the server-mode database (UNICHUNK_DATABASE_URL).
    """
    settings = settings or ServiceSettings()
    events = events or PrefectEventSink(default_prefect_api_url())
    secrets = signing_secrets(settings)
    records = SinkSettings() if data_dir is None else SinkSettings(data_dir=Path(data_dir))
    data_dir = records.data_dir
    replay = open_replay_cache(records)
    # Updates wait here for the run that next takes the store lock (`unichunk.update_queue`); the event's
    # run finds its update applied, or applies it with every other one waiting.
    updates = open_update_queue(records) if settings.webhook_batching else None
    index = Pipeline(records)  # which documents a `deleted` event may name: the live ones
    tokens = service_tokens(settings, records)  # who each API request is (`auth`)

    stores = open_stores(search_sinks, settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if isinstance(stores, WarmStores):  # load the models now, so the first query is warm
            threading.Thread(target=_warm, args=(stores,), name="warm-stores", daemon=True).start()
        yield
        replay.close()
        if isinstance(stores, WarmStores):
            stores.close()

    # OpenAPI at /docs and /openapi.json, and the web UI at /ui, behind the API's token (`api_docs`, `ui`)
    app = FastAPI(title="unichunk service", lifespan=lifespan, **WITHOUT_OPEN_DOCS)
    check = token_check(tokens)
    add_api_docs(app, check)
    app.add_middleware(HttpMetrics)
    refuse_denied_access(app)
    app.state.replay = replay
    app.state.events = events
    app.state.stores = stores
    app.include_router(create_search_router(stores, settings, tokens, records))
    app.include_router(create_ui_router(service_pipeline(stores, settings, records), check, data_dir))

    @app.exception_handler(WebhookRejected)
    async def _rejected(_request: Request, exc: WebhookRejected) -> JSONResponse:
        WEBHOOKS_REJECTED.labels(reason=exc.reason).inc()
        return JSONResponse({"error": exc.reason, "detail": exc.detail}, status_code=exc.status)

    @app.post("/webhooks/documents", status_code=202)
    async def receive(request: Request) -> JSONResponse:
        _check_declared_length(request, settings.webhook_max_body)
        _check_content_type(request)
        body = await _read_body(request, settings.webhook_max_body)
        now = clock()
        signed_for, (timestamp, signature_hex, delivery) = authenticate_source(
            secrets, request.headers, body, tolerance=settings.webhook_tolerance, now=now
        )
        keys = replay_keys(signature_hex, delivery, timestamp, tolerance=settings.webhook_tolerance, now=now)
        if not replay.reserve(keys, now):
            raise WebhookRejected(409, "replay", "this signature or delivery id was already accepted")
        try:
            try:
                payload = WebhookPayload.model_validate_json(body)
            except ValidationError as exc:
                reason = "malformed_json" if _is_json_error(exc) else "invalid_payload"
                raise WebhookRejected(422, reason, _short_errors(exc)) from None
            payload = _signed_source(payload, signed_for)
            event_id = event_id_for(delivery, signature_hex)
            event = build_event(payload, event_id, settings, lambda d: bool(index.documents([d])))
            _check_signed_source(event, signed_for, index)
            queued = _enqueue(updates, event)
            try:
                await events.emit(event)
            except (httpx.HTTPError, ConnectionError) as exc:
                if queued is not None and updates is not None:
                    updates.withdraw(queued)  # not accepted: no run may apply it on its behalf
                raise WebhookRejected(
                    503, "prefect_unavailable", f"Prefect did not take the event: {exc}"
                ) from None
        except WebhookRejected:
            replay.release(list(keys))  # not accepted: the sender's retry must go through
            raise
        WEBHOOKS_ACCEPTED.labels(event=event["event"]).inc()
        return JSONResponse(
            {
                "event_id": str(event_id),
                "event": event["event"],
                "document_id": event["payload"]["document_id"],
            },
            status_code=202,
        )

    @app.get("/health")
    async def health() -> JSONResponse:
        """Open to probes, so it says nothing internal: no URL, no error text; only whether the service can
        take webhooks (Prefect answers)."""
        ok, _detail = await events.healthy()
        return JSONResponse({"status": "ok" if ok else "unavailable"}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        body, content_type = metrics_page()  # every served run's samples too, under `unichunk serve`
        return Response(body, media_type=content_type)

    return app


def _enqueue(updates: UpdateQueue | None, event: dict[str, Any]) -> str | None:
    """Queue an `updated` event's update under the event's id (what its run is given); the entry, or None
    when nothing was queued (a deletion, or batching off)."""
    if updates is None or event["event"] != EVENT_NAMES["updated"]:
        return None
    payload = event["payload"]
    updates.enqueue(event["id"], payload["source_system"], payload["source_id"], payload["path"])
    return event["id"]


def _is_json_error(exc: ValidationError) -> bool:
    return any(err.get("type") == "json_invalid" for err in exc.errors())


def _short_errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5])


def _warm(stores: WarmStores) -> None:
    try:
        stores.warm()
    except Exception as exc:  # the first search reports it again, to its caller
        logger.warning("could not warm the stores: %s: %s", type(exc).__name__, exc)


def run_receiver(host: str = "127.0.0.1", port: int = 8787) -> None:
    """Serve the service with uvicorn (blocking) and announce it in the data dir (`service_file`) for the
    CLI. Bind 0.0.0.0 only behind TLS termination, and only with UNICHUNK_API_TOKEN (`service.listener`:
    that rule and the request limits, shared with the MCP server over HTTP)."""
    server = listener(create_app(), host, port)  # refuses an open listener without a token (`listener`)
    path = announce(host, port)
    try:
        server.run()
    finally:
        withdraw(path)
