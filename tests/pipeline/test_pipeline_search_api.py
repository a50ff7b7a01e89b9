"""`GET /search` on the webhook receiver's app, over real stores: BM25 on disk, in-memory Qdrant with
MiniLM, the knowledge graph on the session's FalkorDB with spaCy."""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from qdrant_client import QdrantClient

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.engine.store_access import HANDOVER_PREFIX, store_lock_path
from unichunk.index.generations import reading_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.backends import FalkorDBBackend
from unichunk.sinks.graph.extraction import SpacyExtractor
from unichunk.sinks.graph.sink import KnowledgeGraphSink
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink

TEXT = (
    "Ada Lovelace wrote the first published program for the Analytical Engine. "
    "Charles Babbage designed the Analytical Engine in London. "
    "Ada Lovelace and Charles Babbage exchanged letters about Bernoulli numbers. "
) * 6 + (
    "The harbour crane lifts containers from the cargo ship onto waiting trucks. "
    "Customs officers inspect the manifests of ships arriving from abroad. "
) * 8


@pytest.fixture
def document() -> Document:
    return Document(text=TEXT, source_system="t", source_id="history.txt", title="Computing history")


@pytest.fixture
def stores(tmp_path: Path, falkordb_url: str, document: Document) -> Iterator[dict]:
    settings = SinkSettings(data_dir=tmp_path, qdrant_collection="search_api")
    sinks = {
        "keywords": BM25Sink(settings, path=tmp_path / "bm25.sqlite"),
        "vectors": QdrantSink(settings, embedder=MiniLMEmbedder(), client=QdrantClient(":memory:")),
        "graph": KnowledgeGraphSink(
            FalkorDBBackend(falkordb_url, f"test_{uuid.uuid4().hex[:12]}"), SpacyExtractor()
        ),
    }
    strategy = ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=32)
    chunks = ChunkingService().chunk(document, strategy)
    assert len(chunks) >= 4
    for sink in sinks.values():
        sink.upsert(document, chunks)
    yield sinks
    sinks["graph"].backend.clear()
    for sink in sinks.values():
        sink.close()


@pytest.fixture
def client(tmp_path: Path, stores: dict) -> Iterator[tuple[TestClient, list[int]]]:
    opened: list[int] = []

    def provider() -> dict:
        opened.append(1)
        return stores

    settings = ServiceSettings(webhook_secret="s", source_root=tmp_path)
    app = create_app(
        settings,
        PrefectEventSink("http://127.0.0.1:9/api", timeout=2),
        search_sinks=provider,
        data_dir=tmp_path / "data",
    )
    with TestClient(app) as test_client:
        yield test_client, opened


def test_search_returns_chunks_offsets_route_context_and_graph(client, document):
    test_client, opened = client
    assert opened == []  # stores are opened on the first search, not when the receiver starts
    response = test_client.get("/search", params={"q": "who designed the Analytical Engine", "k": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["route"] == "hybrid" and len(body["hits"]) == 3
    for hit in body["hits"]:
        assert document.text[hit["start_char"] : hit["end_char"]] == hit["content"]
        assert hit["title"] == "Computing history" and set(hit["ranks"]) <= {"keywords", "vectors"}
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert "Analytical Engine" in body["hits"][0]["content"]
    context = body["context"]
    assert context["text"].startswith('[Source: "Computing history", Section: "-"]')
    assert 0 < context["tokens"] <= context["budget"] == 8000
    hit_ids = {h["chunk_id"] for h in body["hits"]}
    assert hit_ids == {c for s in context["spans"] for c in s["hit_chunk_ids"]}
    names = {e["key"] for e in body["graph"]["entities"]}
    assert {"ada lovelace", "charles babbage"} <= names
    assert body["graph"]["relations"], body["graph"]
    test_client.get("/search", params={"q": "cargo ship", "k": 1})
    assert opened == [1]  # opened once, then reused


def test_search_modes_budget_and_validation(client):
    test_client, _ = client
    keywords = test_client.get("/search", params={"q": "customs manifests", "k": 2, "mode": "keywords"})
    assert keywords.status_code == 200 and keywords.json()["route"] == "keywords"
    assert "Customs officers" in keywords.json()["hits"][0]["content"]
    graph = test_client.get("/search", params={"q": "what did Ada Lovelace write", "k": 3, "mode": "graph"})
    assert graph.status_code == 200 and graph.json()["route"] == "graph", graph.text
    assert graph.json()["hits"] and all(h["ranks"] == {"graph": h["rank"]} for h in graph.json()["hits"])
    assert all("Ada Lovelace" in h["content"] for h in graph.json()["hits"])
    routed = test_client.get("/search", params={"q": "customs manifests", "route_threshold": 0.01})
    assert routed.json()["route"] == "keywords-routed"
    small = test_client.get(
        "/search", params={"q": "Bernoulli numbers letters", "budget": 64, "graph": "false"}
    )
    assert small.status_code == 200 and small.json()["graph"] is None
    assert small.json()["context"]["tokens"] <= 64
    assert test_client.get("/search").status_code == 422
    assert test_client.get("/search", params={"q": "x", "k": 0}).status_code == 422
    assert test_client.get("/search", params={"q": "   "}).status_code == 422
    assert test_client.get("/search", params={"q": "x", "mode": "magic"}).status_code == 422


def test_local_mode_keeps_the_store_warm_and_hands_it_over_to_a_waiting_run(
    tmp_path: Path, falkordb_url: str, document: Document, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Qdrant local mode the service keeps the store open between searches, and releases it to a run
    that waits for the store lock (`unichunk.engine.store_access`'s protocol, played here by hand: a marker, then the
    exclusive flock); a search meanwhile waits its bounded time, then answers 503 with Retry-After."""
    data_dir = tmp_path / "data"
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(data_dir))
    monkeypatch.setenv("UNICHUNK_FALKORDB_URL", falkordb_url)
    monkeypatch.setenv("UNICHUNK_GRAPH_NAME", f"test_{uuid.uuid4().hex[:12]}")
    monkeypatch.delenv("UNICHUNK_QDRANT_URL", raising=False)
    monkeypatch.setenv("UNICHUNK_VECTOR_ENGINE", "local")  # the lock held below is local mode's
    settings = SinkSettings()
    chunks = ChunkingService().chunk(
        document, ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=32)
    )
    writer = QdrantSink(settings, embedder=MiniLMEmbedder())
    writer.upsert(document, chunks)
    writer.close()
    for sink in (BM25Sink(settings), KnowledgeGraphSink.from_settings(settings)):
        sink.upsert(document, chunks)
        sink.close()

    hook = ServiceSettings(webhook_secret="s", source_root=tmp_path, service_busy_wait=1)
    app = create_app(hook, PrefectEventSink("http://127.0.0.1:9/api", timeout=2), data_dir=data_dir)
    lock = store_lock_path(reading_settings(settings), ("vectors",))
    assert lock is not None
    with TestClient(app) as test_client:
        stores = app.state.stores
        for _ in range(2):
            response = test_client.get("/search", params={"q": "who designed the Analytical Engine", "k": 2})
            assert response.status_code == 200, response.text
            assert response.json()["hits"][0]["document_id"] == document.document_id
        assert stores.is_open() and stores.handovers == 0  # warm between searches
        with lock.open("a+") as run:  # a run: it cannot take the lock while the service reads
            with pytest.raises(BlockingIOError):
                fcntl.flock(run, fcntl.LOCK_EX | fcntl.LOCK_NB)
            marker = lock.with_name(f"{HANDOVER_PREFIX}{os.getpid()}")
            marker.touch()
            fcntl.flock(run, fcntl.LOCK_EX)  # granted once the service let go
            marker.unlink()
            assert stores.handovers == 1 and not stores.is_open()
            other = QdrantClient(path=str(reading_settings(settings).qdrant_path))  # the directory is free
            other.close()
            busy = test_client.get("/search", params={"q": "Analytical Engine"})
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
            assert "flow run" in busy.json()["detail"]
            # the web UI says so on its page (with its navigation), not with the API's JSON
            page = test_client.get("/ui", params={"q": "Analytical Engine"})
            assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
            assert "flow run is writing" in page.text and "<nav>" in page.text, page.text
            fcntl.flock(run, fcntl.LOCK_UN)
        again = test_client.get("/search", params={"q": "Analytical Engine", "k": 1})
        assert again.status_code == 200 and stores.is_open()
    graph = KnowledgeGraphSink.from_settings(settings)
    graph.backend.clear()
    graph.close()
