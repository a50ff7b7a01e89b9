"""The service's read/write API, mounted on the receiver's app: search, documents, status, delete.

Each route parses its query, asks a `unichunk.Pipeline` whose readers are the service's warm stores
(`unichunk.warm_stores.WarmStores`) or a provider's (tests), and serves the typed result as JSON; the
routes are listed in docs/operations.md ("The service"); `GET /entities/{name}` explores the knowledge graph; `POST /eval` (admins) takes the questions in its
body, not a path, so the service opens no file a caller names. `DELETE /documents/{id}` is the one piece of
Prefect orchestration done here: it starts the `delete-document` deployment's run, because the served
runner, not this process, must write (under the store lock). Retrieval blocks, so the endpoints are sync
functions FastAPI runs in its thread pool. Every route resolves the bearer token to the caller's
`Principal` (`unichunk.deployments.service.auth`) and runs as `pipeline.scoped(principal)`: reads filtered
to what it may read, writes refused unless it may write (`AccessDenied`: 403).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, Security
from fastapi.security import HTTPBearer
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings
from starlette.concurrency import run_in_threadpool

from unichunk.access import Principal
from unichunk.deployments.service.auth import principal_auth
from unichunk.deployments.settings import ServiceSettings
from unichunk.errors import DiskFull, NotFound, SinkError, StoreBusy, UsageError
from unichunk.interface import DocumentState, Mode
from unichunk.pipeline import (
    BUDGETS,
    DEFAULT_BUDGET,
    DEFAULT_K,
    MAX_HOPS,
    Pipeline,
    QuestionsFormat,
    Readers,
    ReadersProvider,
    run_result,
)
from unichunk.request_limits import DEFAULT_LISTED, MAX_LISTED, MAX_QUERY_CHARS
from unichunk.results import DocumentChunks, DocumentList, EntityResult, IndexStatus, SearchResult
from unichunk.settings import SinkSettings
from unichunk.tokens import Tokens
from unichunk.warm_stores import WarmStores

SinksProvider = Callable[[], Mapping[str, object]]
DELETE_DEPLOYMENT = "delete-document/delete-document"
# The API's scheme as the OpenAPI document declares it (Swagger UI's "Authorize" sends it)
BEARER_SCHEME = HTTPBearer(auto_error=False, description="UNICHUNK_API_TOKEN, when the service has one.")
SERVED_BY = "x-unichunk-served-by"  # response header naming the answering service (the CLI checks it)
# `POST /eval`: the questions come in the body, by type (docs/evaluation.md has both formats)
QUESTIONS_TYPES: dict[str, QuestionsFormat] = {
    "text/csv": "csv",
    "application/jsonl": "jsonl",
    "application/x-ndjson": "jsonl",
}
MAX_EVAL_BODY_BYTES = 8 * 1024 * 1024  # thousands of questions with their quoted references
EVAL_BODY = {
    "requestBody": {
        "required": True,
        "description": "The questions: CSV (question, references, corpus_id) or JSON lines (docs/evaluation.md).",
        "content": {kind: {"schema": {"type": "string"}} for kind in QUESTIONS_TYPES},
    }
}


class ReaderSource(Protocol):
    def readers(self) -> AbstractContextManager[Readers]: ...


class ProvidedStores:
    """Stores a caller opened (tests, other hosts), kept for the process."""

    def __init__(self, provider: SinksProvider) -> None:
        self._provider = provider
        self._readers: Readers | None = None

    @contextmanager
    def readers(self) -> Iterator[Readers]:
        if self._readers is None:
            self._readers = Readers.of(self._provider())
        yield self._readers


def open_stores(provider: SinksProvider | None, settings: ServiceSettings) -> ReaderSource:
    """The provider's stores, else the live ones kept warm (`WarmStores`; the app warms them at start)."""
    return ProvidedStores(provider) if provider is not None else WarmStores(settings.service_busy_wait)


def service_pipeline(
    stores: ReaderSource, settings: ServiceSettings, records: SinkSettings | None = None
) -> Pipeline:
    """A Pipeline reading `stores` and the records of `records`' data dir (default: the configured one),
    whose labels decide what each caller may read: a busy or unavailable store is a 503 (with Retry-After
    when busy)."""
    retry_after = str(max(1, math.ceil(settings.service_busy_wait)))

    @contextmanager
    def readers() -> Iterator[Readers]:
        try:
            with stores.readers() as opened:
                yield opened
        except StoreBusy as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": retry_after}) from exc
        except (SinkError, DiskFull) as exc:  # a full disk refuses to open the vector store: no crash
            raise HTTPException(503, f"store unavailable: {exc}") from exc

    provider: ReadersProvider = readers
    return Pipeline(records, readers=provider)


def service_tokens(settings: ServiceSettings, records: SinkSettings | None = None) -> Tokens:
    """Who may call: the tokens of `records`' data dir (default: the configured one) and the configured
    admin token (`unichunk.tokens`)."""
    admin = settings.api_token.get_secret_value() if settings.api_token else None
    return Tokens(records, admin_token=admin)


def create_search_router(
    stores: ReaderSource,
    settings: ServiceSettings | None = None,
    tokens: Tokens | None = None,
    records: SinkSettings | None = None,
) -> APIRouter:
    """The API routes, reading `stores` and `records`' data dir; each runs as the principal its bearer
    token names (`tokens`: default, the data dir's and the configured admin token)."""
    settings = settings or ServiceSettings()
    tokens = tokens or service_tokens(settings, records)
    # HTTPBearer (no auto error: `principal_auth` answers) declares the scheme in the OpenAPI document
    router = APIRouter(dependencies=[Security(BEARER_SCHEME)])
    caller_of = Depends(principal_auth(tokens))  # a default, not an annotation: the routes are local
    pipeline = service_pipeline(stores, settings, records)

    @router.get("/search", response_model=SearchResult)
    def search_endpoint(
        response: Response,
        q: Annotated[
            str, Query(description=f"The query: not blank, at most {MAX_QUERY_CHARS} characters (else 422).")
        ],
        k: Annotated[int, Query(ge=1, le=100)] = 5,
        mode: Mode = "hybrid",
        route_threshold: Annotated[float | None, Query(ge=0)] = None,
        expand: bool = True,
        budget: Annotated[int, Query(ge=64, le=128_000)] = DEFAULT_BUDGET,
        graph: bool = True,
        source: Annotated[
            str | None, Query(min_length=1, description="Only this source's documents.")
        ] = None,
        document: Annotated[
            list[str] | None, Query(description="Only these document IDs (repeatable).")
        ] = None,
        caller: Principal = caller_of,
    ) -> SearchResult:
        response.headers[SERVED_BY] = "unichunk-serve"
        try:
            return pipeline.scoped(caller).search(
                q,
                k,
                mode=mode,
                route_threshold=route_threshold,
                expand=expand,
                budget=budget,
                graph=graph,
                source=source,
                document_ids=document,
            )
        except UsageError as exc:  # the query itself (`unichunk.request_limits`): the caller must change it
            raise HTTPException(422, f"q: {exc}") from exc

    @router.get(
        "/entities/{name:path}",
        response_model=EntityResult,
        responses={404: {"description": "No entity of that name that the caller may see."}},
    )
    def entity_endpoint(
        name: str,
        hops: Annotated[int, Query(ge=1, le=MAX_HOPS, description="Relation steps out from the entity.")] = 1,
        limit: Annotated[int, Query(ge=1, le=200, description="The strongest relations shown.")] = 20,
        caller: Principal = caller_of,
    ) -> EntityResult:
        """One entity of the knowledge graph by any spelling of its name, as `unichunk entity --json` prints
        it: its sources, the entities its name reaches in other documents through an acronym or a surname
        (ambiguous ones marked; a bare surname of several people answers with them all as `candidates`),
        the spellings merged into it per chunk, its strongest relations. Only what the caller may read
        taught the graph: an entity it may not see is a 404, as an unknown one; a blank name or one over
        the query limit is a 422."""
        try:
            return pipeline.scoped(caller).entity(name, hops=hops, limit=limit)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        except UsageError as exc:
            raise HTTPException(422, f"name: {exc}") from exc

    @router.get("/documents", response_model=DocumentList)
    def documents_endpoint(
        state: Annotated[DocumentState | None, Query(description="Only documents in this state.")] = None,
        source: Annotated[
            str | None, Query(min_length=1, description="Only this source's documents.")
        ] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = DEFAULT_LISTED,
        caller: Principal = caller_of,
    ) -> DocumentList:
        """The documents the caller may read, by source and their ID there, a page at a time: each one's
        record (state, chunk count, labels, the error of one that failed), not its chunks
        (`/documents/{id}`). A reader lists here what `/status` shows an admin, its own sources' failures
        included."""
        return pipeline.scoped(caller).document_page(state=state, source=source, offset=offset, limit=limit)

    @router.get("/documents/{document_id:path}", response_model=DocumentChunks)
    def document_endpoint(document_id: str, caller: Principal = caller_of) -> DocumentChunks:
        try:
            return pipeline.scoped(caller).document(document_id)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc

    @router.delete("/documents/{document_id:path}")
    def delete_endpoint(
        document_id: str, response: Response, wait: bool = False, caller: Principal = caller_of
    ) -> dict[str, Any]:
        reader = pipeline.scoped(caller)
        reader.require_write("delete")  # the served run writes, not `Pipeline.delete`: checked here
        if not reader.knows(document_id):
            raise HTTPException(404, f"no such document: {document_id} (`unichunk status` lists them)")
        with _prefect_api():
            run = run_deployment(
                DELETE_DEPLOYMENT, parameters={"document_id": document_id}, timeout=None if wait else 0
            )
        state = run.state
        body: dict[str, Any] = {
            "document_id": document_id,
            "flow_run_id": str(run.id),
            "flow_run_name": run.name,
            "state": state.type.value if state else None,
        }
        if wait:
            body["removed"] = _result_or_none(state)
            if state is None or not state.is_completed():
                raise HTTPException(500, {**body, "error": state.message if state else "no state"})
        else:
            response.status_code = 202
        return body

    @router.get("/status", response_model=IndexStatus)
    def status_endpoint(failed: bool = False, caller: Principal = caller_of) -> IndexStatus:
        return pipeline.scoped(caller).status(failed_only=failed)

    @router.post("/eval", openapi_extra=EVAL_BODY)
    async def eval_endpoint(
        request: Request,
        generation: Annotated[
            str | None, Query(min_length=1, description="The generation to evaluate (default: the live one).")
        ] = None,
        against: Annotated[
            str | None, Query(min_length=1, description="A second generation, compared question by question.")
        ] = None,
        budgets: Annotated[
            list[int] | None, Query(description="Character budgets (repeatable; default 1000, 2000, 4000).")
        ] = None,
        k: Annotated[int, Query(ge=1, le=100, description="Hits judged for hit@k and MRR.")] = DEFAULT_K,
        retrievers: Annotated[bool, Query(description="Also each retriever alone.")] = False,
        caller: Principal = caller_of,
    ) -> dict[str, Any]:
        """Score the search on the questions in the body, as `unichunk eval --json` does (admin tokens only:
        the references quote any document). The body is the questions themselves, CSV (`text/csv`) or
        JSON lines (`application/jsonl`), never a path: the service opens no file on a caller's word. The
        report is also saved as `<data dir>/evaluations/latest.json`."""
        scoped = pipeline.scoped(caller)
        scoped.require_admin("eval")  # before reading a body up to 8 MiB
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        questions_format = QUESTIONS_TYPES.get(kind)
        if questions_format is None:
            raise HTTPException(
                415, f"send the questions as one of {', '.join(QUESTIONS_TYPES)}, not {kind!r}"
            )
        try:
            questions = (await _read_limited(request, MAX_EVAL_BODY_BYTES)).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise HTTPException(422, f"the questions are not UTF-8: {exc}") from exc

        def run() -> dict[str, Any]:
            return scoped.eval_text(
                questions,
                questions_format,
                generation=generation,
                against=against,
                budgets=budgets or BUDGETS,
                k=k,
                retrievers=retrievers,
            )

        try:
            return await run_in_threadpool(run)  # retrieval blocks: off the event loop
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        except UsageError as exc:
            raise HTTPException(422, str(exc)) from exc

    return router


async def _read_limited(request: Request, limit: int) -> bytes:
    """The request's body, or 413 as soon as it passes `limit` bytes (declared or sent)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"body over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"body over {limit} bytes")
    return bytes(body)


def _prefect_api() -> AbstractContextManager[object]:
    """The Prefect server of the environment for this call: PREFECT_API_URL may be set after Prefect was
    imported, and a server thread does not inherit the settings context of the thread that set it (it would
    otherwise start a temporary server of its own, where the deployment does not exist)."""
    url = os.environ.get("PREFECT_API_URL")
    return temporary_settings(updates={PREFECT_API_URL: url}) if url else nullcontext()


def _result_or_none(state: Any) -> dict[str, int] | None:
    """The run's return value when Prefect kept it (results persist only when configured to)."""
    try:
        value = run_result(state)
    except Exception:
        return None
    return value if isinstance(value, dict) else None
