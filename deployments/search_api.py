"""Read-only search over HTTP: `GET /search?q=...&k=...`, mounted on the webhook receiver's app.

It answers with `retrieval.search`'s typed result: the ranked chunks (IDs, offsets, scores per retriever),
the route that answered, the assembled context and the graph context. The stores are opened on the first
request, not at start-up (they load models and may start FalkorDB), through a provider so tests and other
hosts can pass their own; retrieval blocks, so the endpoint is a sync function FastAPI runs in its thread
pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from retrieval.context import DEFAULT_BUDGET
from retrieval.ranking import Mode
from retrieval.readers import Readers, open_readers, readers_for_one_search
from retrieval.results import SearchResult
from retrieval.search import SearchOptions, search
from sinks.base import SinkError
from sinks.config import SinkSettings

SinksProvider = Callable[[], Mapping[str, object]]


def local_vector_store() -> bool:
    """True when Qdrant runs in local mode, where only one process may hold its directory at a time."""
    return not SinkSettings().qdrant_url


def create_search_router(provider: SinksProvider | None = None) -> APIRouter:
    """A router with `GET /search`; `provider` returns the stores by sink name, opened once and kept.

    Without a provider it reads the live generation's stores. With Qdrant in local mode, the served
    deployments run their flows in subprocesses that must open the same Qdrant directory, which only one
    process may hold; so then the stores are opened for each request and closed after it (a few seconds per
    query; a run in progress answers 503), and kept open only when a Qdrant server is configured.
    """
    per_request = provider is None and local_vector_store()
    router = APIRouter()
    lock = threading.Lock()  # one opening of the stores, however many first requests arrive together
    opened: dict[str, Readers] = {}

    def kept_open() -> Readers:
        with lock:
            if "readers" not in opened:
                opened["readers"] = Readers.of(provider()) if provider is not None else open_readers()
            return opened["readers"]

    @contextmanager
    def shared() -> Iterator[Readers]:
        yield kept_open()

    def readers() -> AbstractContextManager[Readers]:
        return readers_for_one_search() if per_request else shared()

    @router.get("/search", response_model=SearchResult)
    def search_endpoint(
        q: Annotated[str, Query(min_length=1, max_length=2000, description="The query.")],
        k: Annotated[int, Query(ge=1, le=50)] = 5,
        mode: Mode = "hybrid",
        route_threshold: Annotated[float | None, Query(ge=0)] = None,
        expand: bool = True,
        budget: Annotated[int, Query(ge=64, le=128_000)] = DEFAULT_BUDGET,
        graph: bool = True,
    ) -> SearchResult:
        if not q.strip():
            raise HTTPException(422, "q must not be blank")
        options = SearchOptions(
            mode=mode, route_threshold=route_threshold, expand=expand, budget=budget, graph=graph
        )
        try:
            with readers() as stores:
                return search(stores, q, k, options)
        except SinkError as exc:
            raise HTTPException(503, f"store unavailable: {exc}") from exc

    return router
