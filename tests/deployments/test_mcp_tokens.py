"""The MCP server's tools run as a principal: over streamable HTTP (a real uvicorn listener, the SDK's own
client) each request's bearer token is looked up per call, so a token revoked while the server runs is
refused by the next call; once tokens exist a request without one is refused; a server started with a
token that names nobody does not start. Over a real BM25 store (no models: this is about the door)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.deployments.mcp.server import create_server
from unichunk.errors import UsageError
from unichunk.pipeline import Pipeline, Readers
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.tokens import Tokens


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Tokens]]:
    for name in ("UNICHUNK_TOKEN", "UNICHUNK_API_TOKEN", "UNICHUNK_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = SinkSettings(data_dir=tmp_path / "data")
    store = BM25Sink(settings, path=tmp_path / "bm25.sqlite")
    document = Document(
        text="The harbour crane lifts containers. " * 40, source_system="t", source_id="a.txt"
    )
    store.upsert(document, ChunkingService().chunk(document, ChunkStrategy(name="sentence", chunk_size=128)))
    readers = Readers.of({"keywords": store})

    @contextmanager
    def provided() -> Iterator[Readers]:
        yield readers

    pipeline = Pipeline(settings, readers=provided)
    server = create_server(pipeline, roots=[], http=True)
    port = _free_port()
    listener = uvicorn.Server(
        uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    while not listener.started:
        assert thread.is_alive(), "the MCP server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp", Tokens(settings)
    listener.should_exit = True
    thread.join(30)
    store.close()


def _search(url: str, token: str | None) -> Any:
    """One `search` call in a fresh session, sending `token` as the bearer token (None: no header)."""

    async def call() -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(url, http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool("search", {"query": "crane", "mode": "keywords", "k": 2})

    return anyio.run(call)


def test_each_call_runs_as_its_bearer_token_and_a_revoked_one_is_refused_at_once(
    served: tuple[str, Tokens],
) -> None:
    url, tokens = served
    assert not _search(url, None).is_error  # no token exists yet: the open, loopback-only server's owner
    token, record = tokens.create(["eng"], name="agent")
    allowed = _search(url, token)
    assert not allowed.is_error, allowed.content
    missing = _search(url, None)
    assert missing.is_error and "bearer token is required" in missing.content[0].text  # type: ignore[union-attr]
    assert _search(url, "uck_" + "0" * 16 + "_" + "A" * 43).is_error
    tokens.revoke(record.id)
    refused = _search(url, token)
    assert refused.is_error and "revoked" in refused.content[0].text  # type: ignore[union-attr]


def test_a_server_whose_own_token_names_nobody_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("UNICHUNK_DATABASE_URL", raising=False)
    settings = SinkSettings(data_dir=tmp_path / "data")
    with pytest.raises(UsageError, match="unknown or revoked"):
        create_server(Pipeline(settings), roots=[], token="uck_0000000000000000_" + "A" * 43)
