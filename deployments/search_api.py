"""Read-only search over HTTP: `GET /search?q=...&k=...`, mounted on the webhook receiver's app.

It answers with the ranked chunks (IDs, offsets, scores per retriever), the route that answered, the
assembled context (neighbours, merged spans, source headers, token budget) and the graph context. The
sinks are opened on the first request, not at start-up (they load models and may start FalkorDB), through
a provider so tests and other hosts can pass their own; retrieval blocks, so the endpoint is a sync
function FastAPI runs in its thread pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

SinksProvider = Callable[[], Mapping[str, Any]]
SEARCH_SINKS: tuple[str, ...] = ("keywords", "vectors", "graph")


def default_sinks() -> Mapping[str, Any]:
    """The process-wide sinks of the configured stores (opened once, shared with served flows)."""
    from sinks.config import SinkSettings
    from tasks.resources import get_sinks

    return get_sinks(SEARCH_SINKS, SinkSettings())


def local_vector_store() -> bool:
    """True when Qdrant runs in local mode, where only one process may hold its directory at a time."""
    from sinks.config import SinkSettings

    return not SinkSettings().qdrant_url


def open_for_request() -> Mapping[str, Any]:
    """Sinks opened for one request and closed after it (see `create_search_router`)."""
    from sinks.config import SinkSettings
    from sinks.factory import open_sinks

    return open_sinks(SinkSettings(), SEARCH_SINKS)


def search_payload(
    sinks: Mapping[str, Any],
    query: str,
    k: int = 5,
    *,
    mode: str = "hybrid",
    route_threshold: float | None = None,
    expand: bool = True,
    budget: int = 8000,
    graph: bool = True,
) -> dict[str, Any]:
    """Everything the endpoint returns, as plain JSON-able data (also usable without HTTP)."""
    from sinks.context import assemble_context, graph_context, titles_for
    from sinks.retrieval import RetrievalSettings, retrieve

    found = retrieve(sinks, query, k, RetrievalSettings(mode=mode, route_threshold=route_threshold))  # type: ignore[arg-type]
    titles = titles_for(sinks, found.hits)
    context = assemble_context(
        found.hits, sinks.get("keywords"), titles=titles, radius=1 if expand else 0, budget=budget
    )
    graph_sink = sinks.get("graph") if graph else None
    kg = graph_context(graph_sink, [h.chunk_id for h in found.hits]) if graph_sink is not None else None
    return {
        "query": found.query,
        "k": k,
        "route": found.route,
        "keyword_top_score": found.keyword_top_score,
        "hits": [
            {
                "rank": rank,
                "chunk_id": h.chunk_id,
                "document_id": h.document_id,
                "title": titles.get(h.document_id),
                "start_char": h.start_char,
                "end_char": h.end_char,
                "score": h.score,
                "ranks": h.ranks,
                "scores": h.scores,
                "heading_chain": list(h.heading_chain),
                "content": h.content,
            }
            for rank, h in enumerate(found.hits, start=1)
        ],
        "context": {
            "text": context.text,
            "tokens": context.tokens,
            "budget": context.budget,
            "dropped_chunk_ids": context.dropped,
            "spans": [
                {
                    "document_id": s.document_id,
                    "title": s.title,
                    "start_char": s.start_char,
                    "end_char": s.end_char,
                    "heading_chain": list(s.heading_chain),
                    "chunk_ids": s.chunk_ids,
                    "hit_chunk_ids": s.hit_chunk_ids,
                    "truncated": s.truncated,
                }
                for s in context.spans
            ],
        },
        "graph": None
        if kg is None
        else {
            "entities": [
                {"name": e.display_name, "key": e.name, "type": e.type, "description": e.description}
                for e in kg.entities
            ],
            "relations": [
                {
                    "source": r.source,
                    "target": r.target,
                    "keywords": r.keywords,
                    "description": r.description,
                    "weight": r.weight,
                    "source_chunk_ids": list(r.source_chunk_ids),
                }
                for r in kg.relations
            ],
        },
    }


def create_search_router(
    provider: SinksProvider | None = None, *, per_request: bool | None = None
) -> APIRouter:
    """A router with `GET /search`; `provider` returns the sinks (default: the configured stores).

    With Qdrant in local mode, the served deployments run their flows in subprocesses that must open the
    same Qdrant directory, which only one process may hold. So by default, in local mode, the sinks are
    opened for each request and closed after it (a few seconds per query; a run in progress answers 503),
    and kept open only when a Qdrant server is configured. `per_request` overrides that choice.
    """
    if per_request is None:
        per_request = provider is None and local_vector_store()
    if provider is None:
        provider = open_for_request if per_request else default_sinks
    router = APIRouter()
    lock = threading.Lock()  # one opening of the sinks, however many first requests arrive together
    opened: dict[str, Mapping[str, Any]] = {}

    def sinks() -> Mapping[str, Any]:
        with lock:
            if "sinks" not in opened:
                opened["sinks"] = provider()
            return opened["sinks"]

    @router.get("/search")
    def search(
        q: Annotated[str, Query(min_length=1, max_length=2000, description="The query.")],
        k: Annotated[int, Query(ge=1, le=50)] = 5,
        mode: Literal["hybrid", "keywords", "vectors"] = "hybrid",
        route_threshold: Annotated[float | None, Query(ge=0)] = None,
        expand: bool = True,
        budget: Annotated[int, Query(ge=64, le=128_000)] = 8000,
        graph: bool = True,
    ) -> dict[str, Any]:
        if not q.strip():
            raise HTTPException(422, "q must not be blank")
        from sinks.base import SinkError

        try:
            stores = provider() if per_request else sinks()
        except SinkError as exc:
            raise HTTPException(503, f"store unavailable: {exc}") from exc
        try:
            return search_payload(
                stores, q, k, mode=mode, route_threshold=route_threshold, expand=expand, budget=budget,
                graph=graph,
            )  # fmt: skip
        except SinkError as exc:
            raise HTTPException(503, f"store unavailable: {exc}") from exc
        finally:
            if per_request:
                for sink in stores.values():
                    sink.close()

    return router
