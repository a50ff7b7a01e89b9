"""The warm service against served flow runs, for real: a Prefect server, FalkorDB, the served
`ingest-document`/`delete-document` deployments in their own process (`served`), the embedded vector store
in its single-writer mode, and the service in this process over a real uvicorn listener.

Proves: a served ingest run proceeds while the service holds warm readers (they are handed over and
reopened), searches before and after answer; /documents, /status and the source filter read what the runs
wrote; the CLI's search/status/delete talk to the running service (found through its `service.json`) and
load nothing themselves (no model, no store client, not Prefect: their processes' modules are checked);
a stale service file is ignored.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from prefect.deployments import run_deployment

from tests.deployments.test_cli_imports import run_recording_cli
from tests.pipeline.test_pipeline_deployments import RUN_TIMEOUT, served  # noqa: F401  (the fixture)
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import default_source_name
from unichunk.deployments.service.discovery import announce, service_file
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.pipeline import Pipeline
from unichunk.warm_stores import WarmStores

TOKEN = "handover-token"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ingest(path: Path) -> None:
    """A served `ingest-document` run of one file of the source root (its ID as a scan of the root gives)."""
    parameters = {"path": path.name, "root": str(path.parent)}
    run = run_deployment("ingest-document/ingest-document", parameters=parameters, timeout=RUN_TIMEOUT)
    assert run.state is not None and run.state.is_completed(), run.state


@pytest.fixture
def service(served, prefect_api_url: str, falkordb_url: str, monkeypatch: pytest.MonkeyPatch):  # noqa: F811
    """The service in this process on a real port, reading the served deployments' data dir."""
    _ids, source_root, data_dir = served
    for name, value in {
        "UNICHUNK_DATA_DIR": str(data_dir),
        "UNICHUNK_FALKORDB_URL": falkordb_url,
        "UNICHUNK_SOURCE_ROOT": str(source_root),
        "UNICHUNK_API_TOKEN": TOKEN,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("UNICHUNK_SERVICE_URL", raising=False)
    monkeypatch.delenv("UNICHUNK_QDRANT_URL", raising=False)
    (source_root / "ada.md").write_text(
        "# Ada\n\nAda Lovelace wrote the first program for the Analytical Engine.\n"
    )
    _ingest(source_root / "ada.md")  # before the service: a live generation to read

    app = create_app(ServiceSettings(), PrefectEventSink(prefect_api_url), data_dir=data_dir)
    seen: list[str] = []

    @app.middleware("http")
    async def record(request, call_next):  # which requests reached the service (the CLI's among them)
        seen.append(f"{request.method} {request.url.path}")
        return await call_next(request)

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the service did not start"
        time.sleep(0.1)
    announce("127.0.0.1", port, data_dir)
    client = httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
    )
    try:
        yield client, app.state.stores, source_root, data_dir, seen
    finally:
        client.close()
        server.should_exit = True
        thread.join(30)
        service_file(data_dir).unlink(missing_ok=True)


def _cli(data_dir: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`unichunk *args` for this data dir: its result and the heavy libraries its process loaded."""
    env = dict(os.environ) | {
        "UNICHUNK_DATA_DIR": str(data_dir),
        "UNICHUNK_API_TOKEN": TOKEN,
        # the in-process path would refuse to start with this embedder and no key or URL: an answer proves
        # the CLI asked the service and loaded no model
        "UNICHUNK_EMBEDDER": "openai",
    }
    env.pop("UNICHUNK_EMBEDDING_API_KEY", None)
    env.pop("UNICHUNK_EMBEDDING_BASE_URL", None)
    with tempfile.TemporaryDirectory() as scratch:
        return run_recording_cli(Path(scratch) / "modules.json", *args, env=env)


def _ids(result: dict) -> set[str]:
    return {hit["document_id"] for hit in result["hits"]}


def test_served_runs_take_the_store_from_the_warm_service_and_the_cli_asks_it(service) -> None:
    client, stores, source_root, data_dir, seen = service
    assert isinstance(stores, WarmStores)
    source = default_source_name(source_root)
    ada = derive_document_id(source_system=source, source_id="ada.md")
    babbage = derive_document_id(source_system=source, source_id="babbage.md")

    before = client.get("/search", params={"q": "Analytical Engine program", "k": 3})
    assert before.status_code == 200, before.text
    assert ada in _ids(before.json())
    assert stores.is_open() and stores.handovers == 0  # warm: the service holds the store now

    (source_root / "babbage.md").write_text("# Babbage\n\nCharles Babbage designed the Difference Engine.\n")
    _ingest(source_root / "babbage.md")  # a served run: it must get the store from the service
    assert stores.handovers >= 1

    after = client.get("/search", params={"q": "Difference Engine designed", "k": 3})
    assert after.status_code == 200, after.text
    assert babbage in _ids(after.json()) and stores.is_open()

    document = client.get(f"/documents/{babbage}")
    assert document.status_code == 200, document.text
    body = document.json()
    assert body["document"]["source_id"] == "babbage.md" and body["document"]["state"] == "processed"
    assert [c["chunk_index"] for c in body["chunks"]] == list(range(body["document"]["chunk_count"]))
    assert "Difference Engine" in "".join(c["content"] for c in body["chunks"])
    assert client.get("/documents/no-such-document").status_code == 404
    assert client.get("/status").json()["counts"]["processed"] == 2
    in_source = client.get("/search", params={"q": "Engine", "k": 5, "source": source}).json()
    assert _ids(in_source) == {ada, babbage}
    assert client.get("/search", params={"q": "Engine", "source": "elsewhere"}).json()["hits"] == []

    # The CLI finds the service through service.json and asks it; same output as in-process; the command
    # loads no model, store client or Prefect (`test_cli_imports.HEAVY_LIBRARIES`).
    seen.clear()
    found, heavy = _cli(data_dir, "search", "Difference Engine designed", "--json")
    assert found.returncode == 0, found.stderr
    assert babbage in _ids(json.loads(found.stdout)) and "GET /search" in seen and heavy == set()
    human, heavy = _cli(data_dir, "search", "Difference Engine designed")
    assert human.returncode == 0 and "babbage.md" in human.stdout and heavy == set()
    status, heavy = _cli(data_dir, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == Pipeline().status().model_dump(mode="json") and "GET /status" in seen
    assert heavy == set()
    listed, heavy = _cli(data_dir, "documents", "--json")
    assert listed.returncode == 0, listed.stderr
    in_process = [d.model_dump(mode="json") for d in Pipeline().documents().values()]
    assert json.loads(listed.stdout) == in_process and len(in_process) == 2 and heavy == set()
    assert "GET /documents" in seen, seen
    unknown, heavy = _cli(data_dir, "delete", "no-such-document")
    assert unknown.returncode == 1 and "no such document" in unknown.stderr and heavy == set()
    # the served delete-document run deletes it, under the store lock
    deleted, heavy = _cli(data_dir, "delete", babbage)
    assert deleted.returncode == 0, deleted.stderr
    assert f"deleted {babbage}" in deleted.stdout and f"DELETE /documents/{babbage}" in seen
    assert heavy == set()
    assert client.get(f"/documents/{babbage}").status_code == 404
    assert babbage not in _ids(client.get("/search", params={"q": "Difference Engine", "k": 3}).json())

    # A service file whose process is gone is ignored: the CLI works in-process.
    service_file(data_dir).write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": 2**22 + 17}))
    seen.clear()
    alone, _ = _cli(data_dir, "status", "--json")
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["counts"]["processed"] == 1 and seen == []
