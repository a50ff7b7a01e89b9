"""Overlapping runs on the embedded defaults wait for each other instead of failing on the store's lock.

`unichunk serve` (every deployment plus the webhook receiver) runs against a private Prefect server, with
Qdrant in local mode (one process per directory). 10 signed `updated` webhooks for 10 files arrive within
2 s: each is accepted, each starts an `ingest-document` run, and every one of those runs completes (they
queue on the store's concurrency limit), so all 10 documents end `processed` and the stores agree. Then a
UI-style run of the `ingest` deployment is started while a `reindex` run is writing: both complete.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import servers
from fault_checks import make_corpus
from served import FINAL, run_state, serve_process, start_run, stop_process, wait

from unichunk.chunking.ids import derive_document_id, sha256_hex
from unichunk.chunking.sources import default_source_name
from unichunk.deployments.service.webhook_security import sign
from unichunk.index.alignment import verify_alignment
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.factory import open_sinks

SECRET = "burst-secret"
# Five times the runs serve starts at once (UNICHUNK_SERVE_RUN_LIMIT, 2), all sent within 2 s: every run
# but the first two waits, as in a larger burst; each run is a cold process start, what the test's time is.
BURST = 10


@dataclass
class Service:
    api: str
    receiver: str
    corpus: Path
    data_dir: Path
    log: Path
    env: dict[str, str]
    process: subprocess.Popen
    server: servers.Server

    def deployment_id(self, name: str) -> str | None:
        assert self.process.poll() is None, f"serve exited:\n{self.log.read_text(errors='replace')[-4000:]}"
        response = httpx.get(f"{self.api}/deployments/name/{name}/{name}", timeout=10)
        return response.json()["id"] if response.status_code == 200 else None

    def stop(self) -> None:
        """Stop serving (and its flow runs), so this process may open the local Qdrant directory."""
        stop_process(self.process)
        self.server.stop()


@pytest.fixture
def service(tmp_path: Path, falkordb_url: str) -> Iterator[Service]:
    """`unichunk serve` on a private Prefect server (its triggers must not outlive the test)."""
    try:
        server = servers.start_prefect(tmp_path / "own-prefect", reuse=False)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    corpus, data_dir, log = tmp_path / "corpus", tmp_path / "data", tmp_path / "serve.log"
    corpus.mkdir()
    port = servers.free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PUSHGATEWAY_URL", "UNICHUNK_QDRANT_URL")}
    env.update(
        PREFECT_API_URL=server.url,
        UNICHUNK_DATA_DIR=str(data_dir),
        UNICHUNK_SOURCE_ROOT=str(corpus),
        UNICHUNK_FALKORDB_URL=falkordb_url,
        UNICHUNK_GRAPH_NAME=f"burst_{uuid.uuid4().hex[:12]}",
        UNICHUNK_WEBHOOK_SECRET=SECRET,
        UNICHUNK_METRICS_PORT="0",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
    )
    unichunk = str(Path(sys.executable).parent / "unichunk")
    process = serve_process([unichunk, "serve", "--port", str(port)], env, log, tmp_path)
    svc = Service(server.url, f"http://127.0.0.1:{port}", corpus, data_dir, log, env, process, server)
    try:
        for name in ("ingest-document", "ingest", "reindex"):
            wait(f"deployment {name}", lambda n=name: svc.deployment_id(n), 180, log)
        wait("the webhook receiver", lambda: _answers(f"{svc.receiver}/health"), 60, log)
        wait("the ingest-document trigger", lambda: _trigger_ready(svc), 60, log)
        time.sleep(2)  # the runner's first poll
        yield svc
    finally:
        svc.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _trigger_ready(svc: Service) -> bool:
    target = svc.deployment_id("ingest-document")
    found = httpx.post(f"{svc.api}/automations/filter", json={}, timeout=10).json()
    return any(action.get("deployment_id") == target for a in found for action in a.get("actions", []))


def _signed_post(svc: Service, payload: dict[str, Any], delivery: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    ts = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "X-Unichunk-Timestamp": str(ts),
        "X-Unichunk-Signature": sign(SECRET, ts, body),
        "X-Unichunk-Delivery": delivery,
    }
    return httpx.post(f"{svc.receiver}/webhooks/documents", content=body, headers=headers, timeout=30)


def _runs(svc: Service, deployment: str) -> list[dict[str, Any]]:
    deployment_id = httpx.get(f"{svc.api}/deployments/name/{deployment}/{deployment}", timeout=10).json()[
        "id"
    ]
    body = {"deployments": {"id": {"any_": [deployment_id]}}, "limit": 200}
    return httpx.post(f"{svc.api}/flow_runs/filter", json=body, timeout=15).json()


def _assert_aligned(svc: Service) -> set[str]:
    expected = live_status(SinkSettings(data_dir=svc.data_dir)).expected_chunk_ids()
    settings = SinkSettings(
        data_dir=svc.data_dir,
        falkordb_url=svc.env["UNICHUNK_FALKORDB_URL"],
        graph_name=svc.env["UNICHUNK_GRAPH_NAME"],
    )
    sinks = open_sinks(reading_settings(settings))  # after serve stopped: local Qdrant allows one process
    try:
        report = verify_alignment(sinks, expected)
    finally:
        for sink in sinks.values():
            sink.close()
    assert report.ok, report.as_dict()
    return expected


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_burst_of_webhooks_queues_and_every_update_lands(service: Service) -> None:
    paths = make_corpus(service.corpus, BURST)
    sent: list[float] = []

    def send(n: int) -> httpx.Response:
        sent.append(time.monotonic())
        payload = {"event": "updated", "source_id": paths[n].name, "path": paths[n].name}
        return _signed_post(service, payload, f"burst-{n}-{uuid.uuid4().hex[:6]}")

    with ThreadPoolExecutor(max_workers=BURST) as pool:  # as a source system firing on a bulk edit
        responses = list(pool.map(send, range(BURST)))
    assert max(sent) - min(sent) < 2.0, "the burst was not sent within 2 s"
    assert [r.status_code for r in responses] == [202] * BURST, [
        r.text for r in responses if r.status_code != 202
    ]

    def all_final() -> list[dict[str, Any]] | None:
        try:
            runs = _runs(service, "ingest-document")
        except httpx.TimeoutException:  # the Prefect server stalled on a busy machine: not final yet
            return None
        return runs if len(runs) == BURST and all(r["state"]["type"] in FINAL for r in runs) else None

    runs = wait(f"{BURST} ingest-document runs to finish", all_final, 720, service.log)
    states = {r["name"]: (r["state"]["type"], r["state"].get("message")) for r in runs}
    assert {s for s, _ in states.values()} == {"COMPLETED"}, states
    rows = {r.source_id: r for r in live_status(SinkSettings(data_dir=service.data_dir)).rows()}
    assert set(rows) == {p.name for p in paths} and {r.state for r in rows.values()} == {"processed"}
    assert "already open in another process" not in service.log.read_text(errors="replace")
    for path in paths:
        expected = derive_document_id(source_system=default_source_name(service.corpus), source_id=path.name)
        assert rows[path.name].document_id == expected  # the configured source's ID, as a scan would give
    service.stop()
    assert len(_assert_aligned(service)) == BURST


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_ui_run_started_during_a_reindex_waits_and_both_complete(service: Service) -> None:
    make_corpus(service.corpus, 60)
    parameters = {"params": {"source": {"kind": "directory", "root": str(service.corpus)}, "batch_size": 4}}
    reindex_id, ingest_id = service.deployment_id("reindex"), service.deployment_id("ingest")
    assert reindex_id and ingest_id
    reindex = start_run(service.api, reindex_id, parameters)
    status = live_status(SinkSettings(data_dir=service.data_dir))
    wait(
        "the reindex to be writing",
        lambda: run_state(service.api, reindex) == "RUNNING" and status.counts()["processed"] >= 4,
        300,
        service.log,
    )
    rewritten = "Report 0 was rewritten while the reindex ran, in Lisbon.\n"
    (service.corpus / "doc_0000.txt").write_text(rewritten)
    ui_run = start_run(service.api, ingest_id, parameters)  # as the Prefect UI's "Run" button does
    finals = wait(
        "both runs to finish",
        lambda: (
            (a := run_state(service.api, reindex)) in FINAL
            and (b := run_state(service.api, ui_run)) in FINAL
            and (a, b)
        ),
        600,
        service.log,
    )
    assert finals == ("COMPLETED", "COMPLETED"), service.log.read_text(errors="replace")[-4000:]
    rows = {r.source_id: r for r in live_status(SinkSettings(data_dir=service.data_dir)).rows()}
    assert len(rows) == 60 and {r.state for r in rows.values()} == {"processed"}
    assert rows["doc_0000.txt"].content_hash == sha256_hex(rewritten)  # the later update is what is stored
    assert "already open in another process" not in service.log.read_text(errors="replace")
    service.stop()
    assert len(_assert_aligned(service)) == 60
