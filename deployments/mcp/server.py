"""unichunk for agents: an MCP server with `search`, `get_chunk`, `get_context`, `entity`, `ingest` and `status`.

    unichunk mcp            # stdio: what a desktop client (Claude Desktop, an IDE) starts
    unichunk mcp --http     # streamable HTTP on http://127.0.0.1:8765/mcp

Built on the official SDK's `MCPServer`; every tool calls `unichunk.Pipeline`, so an agent gets the same
chunks, IDs and offsets as the CLI and Python. Tools return pydantic models (the SDK publishes their
schema); whatever an agent can cause or meet comes back as a one-line tool error, never a traceback;
`ingest` reads only inside the configured roots (UNICHUNK_MCP_ROOTS, else UNICHUNK_SOURCE_ROOT), because an
agent follows text anyone may have written; nothing but protocol reaches stdout; one ingest runs at a time.
Every tool runs as a principal (`unichunk.access`), through `pipeline.scoped(principal)`: the server's own
token's (`--token`, UNICHUNK_TOKEN), or over HTTP the bearer token each request carries (looked up per
request: a revoked one is refused at once); with no token at all, the owner of the data dir, except over
HTTP once tokens exist (then a request must bring one). docs/operations.md, "MCP server for agents", has
the details.
"""

from __future__ import annotations

import os

# Before sentence-transformers (through the Pipeline) is imported: no download or loading bars.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import copy
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import ValidationError

from unichunk import __version__
from unichunk.access import OWNER, Principal
from unichunk.deployments.mcp.schema import (
    Budget,
    ChunkId,
    ChunkOut,
    ChunkRef,
    ContextOut,
    DocumentFilter,
    EntityName,
    FailedOnly,
    Hops,
    IngestPath,
    ListLimit,
    ListOffset,
    PassageOut,
    Query,
    Radius,
    RelationLimit,
    SearchHitOut,
    SearchMode,
    SearchOut,
    SourceFilter,
    SourceName,
    StateFilter,
    TopK,
)
from unichunk.deployments.service.listener import MAX_MCP_BODY_BYTES, listener
from unichunk.deployments.service.webhook_security import (
    WebhookRejected,
    check_document_id,
    check_regular_file,
    resolve_source_path,
)
from unichunk.deployments.settings import ServiceSettings
from unichunk.errors import NotFound, UnichunkError, UsageError
from unichunk.interface import Mode
from unichunk.pipeline import DEFAULT_BUDGET, Pipeline
from unichunk.results import (
    ChunkRecord,
    DocumentInfo,
    DocumentList,
    EntityResult,
    IndexStatus,
    IngestSummary,
    SearchResult,
    StoredChunk,
)
from unichunk.tokens import Tokens

logger = logging.getLogger(__name__)

DEFAULT_HTTP_PORT = 8765
MAX_ERROR_CHARS = 500

INSTRUCTIONS = """\
unichunk indexes documents once into chunks with stable IDs and exact character offsets, searchable by
keywords (BM25) and meaning (vectors). Use `search` to find passages (each hit brings its surrounding
context), `get_context` to read more around a chunk, `get_chunk` to fetch a chunk by ID, `entity` to see what
the knowledge graph knows of a person, organisation or place (aliases, merges, relations),
`list_documents` to see the documents you may read (failures too), `status` (admins) to see what is
indexed, `ingest` to add or update documents from the allowed folders. Cite chunk_id and source_id with
[start_char:end_char] when quoting. Resources: unichunk://documents lists the documents,
unichunk://documents/{document_id} gives one document's chunks."""

# --- the server ----------------------------------------------------------------------------------------------


class UnichunkMCP(MCPServer[Any]):
    """The SDK's server, with argument errors in one line ("invalid k: ...") instead of pydantic's report
    over several, which a model reads worse and a client may show cut."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if type(exc) is ToolError and isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"Error executing tool {name}: {one_line(exc.__cause__)}") from exc.__cause__
            raise


def create_server(
    pipeline: Pipeline | None = None,
    roots: Sequence[Path] | None = None,
    *,
    token: str | None = None,
    http: bool = False,
) -> UnichunkMCP:
    """The MCP server over `pipeline` (default: one from the environment's settings, open for the process's
    life; pass one to close it yourself, as `run_server` does). `ingest` may read inside `roots` only
    (default: `ServiceSettings.mcp_ingest_roots()`; none: ingest is refused). Its tools run as `token`'s
    principal (default: UNICHUNK_TOKEN; none: the owner, but over `http` a request must then bring its
    own once any token was created), or as an HTTP request's own bearer token's; `UsageError` when the token
    names nobody."""
    service = ServiceSettings()
    opened = pipeline if pipeline is not None else Pipeline()
    callers = _Callers(opened, service, token, http=http)
    tools = _Tools(
        opened,
        [Path(r).expanduser().resolve() for r in roots] if roots is not None else service.mcp_ingest_roots(),
        service,
    )
    server = UnichunkMCP("unichunk", version=__version__, instructions=INSTRUCTIONS)
    reading = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=reading, structured_output=True)
    def search(
        ctx: Context,
        query: Query,
        k: TopK = 5,
        document_ids: DocumentFilter = None,
        budget: Budget = DEFAULT_BUDGET,
        mode: SearchMode = "hybrid",
    ) -> SearchOut:
        """Search the indexed documents; the k best chunks, best first. Each hit has its exact offsets in
        its document, its source (folder and path), its heading chain, and `context`: the passage around it
        (neighbouring chunks merged in) to read instead of the bare chunk. `passages` are the top hits'
        best stretches, best first, for when there is room for little text. Then `get_context` reads further
        around a hit, `get_chunk` refetches one by chunk_id."""
        with tool_errors("search"):
            return tools.as_caller(callers.of(ctx)).search(query, k, document_ids, budget, mode)

    @server.tool(annotations=reading, structured_output=True)
    def get_chunk(ctx: Context, chunk_id: ChunkId) -> ChunkOut:
        """One chunk by its ID (from `search` or `get_context`): its text, exact offsets, heading chain and
        source. An unknown ID is an error."""
        with tool_errors("get_chunk"):
            return tools.as_caller(callers.of(ctx)).get_chunk(chunk_id)

    @server.tool(annotations=reading, structured_output=True)
    def get_context(ctx: Context, chunk_id: ChunkId, radius: Radius = 1) -> ContextOut:
        """The chunk and up to `radius` chunks on each side of it in its document, in document order,
        merged into one passage with its document offsets: to read what comes before and after a hit."""
        with tool_errors("get_context"):
            return tools.as_caller(callers.of(ctx)).get_context(chunk_id, radius)

    @server.tool(annotations=reading, structured_output=True)
    def entity(ctx: Context, name: EntityName, hops: Hops = 1, limit: RelationLimit = 20) -> EntityResult:
        """One entity of the knowledge graph by any spelling of its name: its type, description and source
        chunks; `also_known_as`, the entities its name reaches in other documents through an acronym or a
        surname (never merged with it: `ambiguous` when several claim the link); `merges`, the spellings
        merged into it inside a document, per chunk; its strongest relations. A bare surname of several
        people answers with all of them as `candidates` and no `entity`. An unknown name is an error."""
        with tool_errors("entity"):
            return tools.as_caller(callers.of(ctx)).pipeline.entity(name, hops=hops, limit=limit)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
        structured_output=True,
    )
    def ingest(ctx: Context, path: IngestPath, source_name: SourceName | None = None) -> IngestSummary:
        """Index a folder (every .md, .txt, .html, .pdf, .eml under it) or one file, from the allowed roots
        only. Incremental: unchanged documents are skipped, changed ones redone, and documents gone from an
        ingested folder are removed from the index. A document is identified by the folder ingested and its
        path in it: to update files of a folder ingested before, ingest that same folder again (with the
        same source_name, if one was given), not a subfolder or a file of it. Returns counts, and each
        failed document with its error; may take minutes for a large folder."""
        with tool_errors("ingest"):
            return tools.as_caller(callers.of(ctx)).ingest(path, source_name)

    @server.tool(annotations=reading, structured_output=True)
    def status(ctx: Context, failed_only: FailedOnly = False) -> IndexStatus:
        """What is indexed: the index generations (the live one first, with its settings) and the live
        documents per state. With failed_only=true, also every failed document with its error. The full
        document list is the resource unichunk://documents."""
        with tool_errors("status"):
            return tools.as_caller(callers.of(ctx)).status(failed_only)

    @server.tool(annotations=reading, structured_output=True)
    def list_documents(
        ctx: Context,
        state: StateFilter = None,
        source: SourceFilter = None,
        offset: ListOffset = 0,
        limit: ListLimit = 100,
    ) -> DocumentList:
        """The documents you may read, by source and their ID there, a page at a time: each one's state,
        chunk count and labels, and the whole error of one that failed (state="failed" lists only those).
        `status` shows an admin every document; this is any caller's own view."""
        with tool_errors("list_documents"):
            reader = tools.as_caller(callers.of(ctx)).pipeline
            return reader.document_page(state=state, source=source, offset=offset, limit=limit)

    @server.resource(
        "unichunk://documents",
        name="documents",
        description="Every document of the live index: document_id, source_system, source_id, state, "
        "chunk_count, error.",
        mime_type="application/json",
    )
    def documents() -> str:
        with resource_errors():
            found = tools.as_caller(callers.default()).documents()  # static: the SDK gives it no request
            return json.dumps([d.model_dump() for d in found], ensure_ascii=False)

    @server.resource(
        "unichunk://documents/{document_id}",
        name="document",
        description="One document's chunks in order, each with chunk_id, offsets, heading chain and text.",
        mime_type="application/json",
    )
    def document(document_id: str, ctx: Context) -> str:
        with resource_errors():
            return json.dumps(tools.as_caller(callers.of(ctx)).document(document_id), ensure_ascii=False)

    return server


def run_server(
    *, http: bool = False, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT, token: str | None = None
) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP); the stores the
    Pipeline opened are closed either way. `token`: whom the tools run as (see `create_server`)."""
    pipeline = Pipeline()
    server = create_server(pipeline, token=token, http=http)
    try:
        if http:
            listener(http_app(server, host), host, port, log_level=server.settings.log_level.lower()).run()
        else:
            server.run("stdio")
    finally:
        pipeline.close()


def http_app(server: MCPServer, host: str) -> Any:
    """`server`'s streamable HTTP app (at /mcp) for a listener on `host`: bodies over `MAX_MCP_BODY_BYTES`
    answered 413 before they are read; the SDK's DNS-rebinding check on loopback. Served by
    `unichunk.deployments.service.listener` (the service's head limit and open-listener refusal)."""
    return server.streamable_http_app(host=host, max_request_body_size=MAX_MCP_BODY_BYTES)


# --- who calls ------------------------------------------------------------------------------------------------


class _Callers:
    """The principal each tool call runs as: an HTTP request's bearer token (looked up per call, so a
    revoked token is refused at once), else the server's own token's principal, else the owner (stdio,
    or HTTP while no token exists at all)."""

    def __init__(
        self, pipeline: Pipeline, service: ServiceSettings, token: str | None, *, http: bool
    ) -> None:
        admin = service.api_token.get_secret_value() if service.api_token else None
        self.tokens = Tokens(pipeline.settings, admin_token=admin)
        self.http = http
        if token is None and service.token is not None:
            token = service.token.get_secret_value()
        self.token = token  # looked up again at each call: a revocation holds at once
        if token is not None and self.tokens.principal(token) is None:
            raise UsageError("the MCP server's token is unknown or revoked (`unichunk tokens list`)")

    def of(self, ctx: Context) -> Principal:
        """The principal of this call: its HTTP bearer token's, else `default()`."""
        request = _http_request(ctx)
        header = request.headers.get("authorization") if request is not None else None
        if header is None:
            return self.default()
        scheme, _, given = header.partition(" ")
        found = self.tokens.principal(given.strip()) if scheme.lower() == "bearer" else None
        if found is None:
            logger.warning("access denied: mcp reason=bad_token token_id=%s", Tokens.token_id(given) or "-")
            raise ToolError("unknown or revoked bearer token")
        return found

    def default(self) -> Principal:
        """The server's own token's principal; else the owner, unless over HTTP once tokens exist."""
        if self.token is not None:
            found = self.tokens.principal(self.token)
            if found is None:
                logger.warning("access denied: mcp reason=bad_token token_id=%s", Tokens.token_id(self.token))
                raise ToolError("this server's token (UNICHUNK_TOKEN) was revoked")
            return found
        if self.http and self.tokens.required():
            logger.warning("access denied: mcp reason=missing_token token_id=-")
            raise ToolError("a bearer token is required (Authorization: Bearer ...)")
        return OWNER


def _http_request(ctx: Context) -> Any:
    """The HTTP request a tool call came in (streamable HTTP), else None (stdio)."""
    try:
        request = ctx.request_context.request
    except ValueError:  # outside a request
        return None
    return request if hasattr(request, "headers") else None


# --- the work behind the tools --------------------------------------------------------------------------------


class _Tools:
    """What each tool does, apart from the MCP plumbing (which `create_server` keeps in its closures)."""

    def __init__(self, pipeline: Pipeline, roots: list[Path], service: ServiceSettings) -> None:
        self.pipeline = pipeline
        self.roots = roots
        self.service = service
        self._ingesting = threading.Lock()

    def as_caller(self, principal: Principal) -> _Tools:
        """These tools as `principal`: the same stores and ingest lock, its scoped Pipeline."""
        view = copy.copy(self)
        view.pipeline = self.pipeline.scoped(principal)
        return view

    def search(
        self, query: str, k: int, document_ids: list[str] | None, budget: int, mode: Mode
    ) -> SearchOut:
        result = self.pipeline.search(
            query, k, mode=mode, document_ids=document_ids, budget=budget, expand=True, graph=False
        )
        rows = self._rows(hit.document_id for hit in result.hits)
        hits = [
            SearchHitOut(
                **hit.model_dump(include=set(SearchHitOut.model_fields) - set(SOURCE_FIELDS)),
                **_source(rows.get(hit.document_id)),  # the records' source fields, both of them
            )
            for hit in result.hits
        ]
        _attach_contexts(hits, result)
        return SearchOut(
            query=query,
            mode=mode,
            route=result.route,
            hits=hits,
            passages=[PassageOut(**passage.model_dump()) for passage in result.passages],
            context_tokens=result.context.tokens if result.context else 0,
        )

    def get_chunk(self, chunk_id: str) -> ChunkOut:
        chunk = self._chunk(chunk_id)
        return _chunk_out(chunk, self._rows([chunk.document_id]).get(chunk.document_id))

    def get_context(self, chunk_id: str, radius: int) -> ContextOut:
        self._chunk(chunk_id)  # an unknown chunk: the tool's own one-line answer
        context = self.pipeline.context(chunk_id, radius)
        return ContextOut(
            chunk_id=chunk_id,
            document_id=context.document_id,
            **_source(self._rows([context.document_id]).get(context.document_id)),
            start_char=context.start_char,
            end_char=context.end_char,
            text=context.text,
            chunks=[_chunk_ref(c) for c in context.chunks],
        )

    def ingest(self, value: str, source_name: str | None) -> IngestSummary:
        path = self._ingest_path(value)
        folder = path if path.is_dir() else path.parent
        root = self.service.source_root
        if source_name is None and root is not None and folder == root.expanduser().resolve():
            source_name = self.service.source_name  # the served source keeps the IDs its reindex gives
        with self._ingesting:
            return self.pipeline.ingest(path, source_name=source_name)

    def status(self, failed_only: bool) -> IndexStatus:
        found = self.pipeline.status(failed_only=failed_only)
        return found if failed_only else found.model_copy(update={"documents": []})

    def documents(self) -> list[DocumentInfo]:
        """The live documents this caller may read (`status` is for admins)."""
        return list(self.pipeline.documents().values())

    def document(self, document_id: str) -> dict[str, Any]:
        try:
            check_document_id(document_id)
        except WebhookRejected as exc:
            raise ResourceNotFoundError(f"no such document: {exc.detail}") from None
        try:
            found = self.pipeline.document(document_id)
        except NotFound:
            raise ResourceNotFoundError(
                f"no such document: {document_id} (see unichunk://documents)"
            ) from None
        row, chunks = found.document, found.chunks
        return {
            "document_id": document_id,
            "source_system": row.source_system,
            "source_id": row.source_id,
            "state": row.state,
            "chunk_count": row.chunk_count,
            "chunks": [{**_chunk_ref(c).model_dump(), "content": c.content} for c in chunks],
        }

    def _chunk(self, chunk_id: str) -> StoredChunk:
        found = self.pipeline.get_chunks([chunk_id])
        if not found:
            raise ToolError(f"no such chunk: {chunk_id} (chunk IDs come from search results)")
        return found[0]

    def _rows(self, document_ids: Any) -> dict[str, DocumentInfo]:
        """Records of these documents only: their source, at the cost of one indexed status read."""
        return self.pipeline.documents(document_ids)

    def _ingest_path(self, value: str) -> Path:
        """`value` resolved inside one of the roots, and a folder or a regular file there; else a one-line
        refusal. The checks are the webhook receiver's (`resolve_source_path`): no control characters, no
        '..', symlinks resolved before the containment test."""
        if not self.roots:
            raise ToolError(
                "ingest is off: no folder is allowed; set UNICHUNK_MCP_ROOTS (a JSON list of folders) or "
                "UNICHUNK_SOURCE_ROOT and restart the server"
            )
        candidates: list[Path] = []
        for root in self.roots:
            try:
                candidates.append(resolve_source_path(value, root))
            except WebhookRejected as exc:
                if exc.detail != "path is outside the allowed source root":
                    raise ToolError(exc.detail) from None
        if not candidates:
            allowed = ", ".join(str(r) for r in self.roots)
            raise ToolError(f"path is outside the allowed roots ({allowed})")
        path = next((p for p in candidates if p.exists()), None)
        if path is None:
            raise ToolError(f"no such file or directory: {value}")
        if not path.is_dir():
            try:
                check_regular_file(path)
            except WebhookRejected as exc:
                raise ToolError(exc.detail) from None
        return path


SOURCE_FIELDS = ("source_system", "source_id")


def _source(row: DocumentInfo | None) -> dict[str, str | None]:
    return {
        "source_system": row.source_system if row else None,
        "source_id": row.source_id if row else None,
    }


def _chunk_ref(chunk: StoredChunk | ChunkRecord) -> ChunkRef:
    return ChunkRef(
        chunk_id=chunk.chunk_id,
        chunk_index=chunk.chunk_index,
        start_char=chunk.start_char,
        end_char=chunk.end_char,
        heading_chain=list(chunk.heading_chain),
    )


def _chunk_out(chunk: StoredChunk, row: DocumentInfo | None) -> ChunkOut:
    return ChunkOut(
        **_chunk_ref(chunk).model_dump(),
        document_id=chunk.document_id,
        **_source(row),
        title=chunk.title,
        content=chunk.content,
    )


def _attach_contexts(hits: list[SearchHitOut], result: SearchResult) -> None:
    """Give each hit the merged passage that holds it, once: a later hit in the same passage points at the
    first (`context_in`) rather than repeating its text, which would spend the reader's tokens twice."""
    spans = result.context.spans if result.context else []
    first_in: dict[int, str] = {}
    for hit in hits:  # best first
        at = next((i for i, s in enumerate(spans) if hit.chunk_id in s.hit_chunk_ids), None)
        if at is None:
            continue  # left out by the token budget
        if at in first_in:
            hit.context_in = first_in[at]
            continue
        first_in[at] = hit.chunk_id
        span = spans[at]
        hit.context, hit.context_start, hit.context_end = span.text, span.start_char, span.end_char


# --- errors -----------------------------------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """What went wrong, in one line a model can act on: our errors and OS errors say it themselves,
    argument errors name the argument, anything else is named by its type."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"invalid {'.'.join(str(p) for p in error['loc']) or 'input'}: {error['msg']}"
            for error in exc.errors()[:3]
        )
    if isinstance(exc, WebhookRejected):
        return exc.detail
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0][:MAX_ERROR_CHARS] if lines else ""
    if isinstance(exc, UnichunkError | OSError | ValueError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _expected(exc: BaseException) -> bool:
    """Failures with a cause the message names (ours, the OS's, bad values), as opposed to bugs."""
    return isinstance(exc, UnichunkError | OSError | ValueError)


@contextmanager
def tool_errors(tool: str) -> Iterator[None]:
    """Any failure as a one-line `ToolError` (the SDK's way to answer `isError` with our text rather than
    its generic "Error executing tool"); an unexpected one also logs its traceback, to stderr."""
    try:
        yield
    except ToolError:
        raise
    except Exception as exc:
        if not _expected(exc):
            logger.error("tool %s failed", tool, exc_info=exc)
        raise ToolError(one_line(exc)) from None


@contextmanager
def resource_errors() -> Iterator[None]:
    """The resources' counterpart of `tool_errors`: a `ResourceError` carries our one line to the client."""
    try:
        yield
    except ResourceError:
        raise
    except Exception as exc:
        if not _expected(exc):
            logger.error("resource read failed", exc_info=exc)
        raise ResourceError(one_line(exc)) from None
