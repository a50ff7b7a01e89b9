"""The Prefect server restarted during a *served* run (`python -m unichunk.deployments.serving.serve ingest`).

A flow run of the `ingest/ingest` deployment is started through the Prefect API, and while it is writing
documents its (private) Prefect server is stopped and started again on the same port and database. The
interrupted run may ride the outage out (the client retries) or end crashed/failed: both are allowed.
Then a second run of the deployment must complete, leave every document `processed`, every sink holding
exactly the status store's chunk IDs (nothing twice), and not redo what the first run had written.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import servers
from fault_checks import duplicates, make_corpus
from served import FINAL, serve_process
from served import run_state as _state
from served import start_run as _run
from served import stop_process as _stop
from served import tail as _tail
from served import wait as _wait

from unichunk.index.alignment import verify_alignment
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.factory import open_sinks
from unichunk.sinks.pool import close_all_sinks

DOCS = 36
BATCH = 4


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_prefect_server_restarted_during_a_served_run_then_the_next_run_finishes(
    tmp_path: Path, falkordb_url: str
) -> None:
    started = time.monotonic()
    workdir = tmp_path / "own-prefect"
    try:
        server = servers.start_prefect(workdir, reuse=False)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    api = server.url
    port = int(api.rsplit(":", 1)[1].split("/")[0])
    corpus, data_dir = tmp_path / "corpus", tmp_path / "data"
    make_corpus(corpus, DOCS)
    graph_name = f"served_{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if k != "PUSHGATEWAY_URL"}
    env.update(
        PREFECT_API_URL=api,
        UNICHUNK_DATA_DIR=str(data_dir),
        UNICHUNK_SOURCE_ROOT=str(corpus),
        UNICHUNK_FALKORDB_URL=falkordb_url,
        UNICHUNK_GRAPH_NAME=graph_name,
        UNICHUNK_METRICS_PORT="0",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
    )
    # Small batches so the run writes in many steps and is mid-flow when the server goes away.
    parameters = {"params": {"source": {"kind": "directory", "root": str(corpus)}, "batch_size": BATCH}}
    log = tmp_path / "serve.log"
    status = live_status(SinkSettings(data_dir=data_dir))
    serve = serve_process(
        [sys.executable, "-m", "unichunk.deployments.serving.serve", "ingest"], env, log, tmp_path
    )
    outcome: dict[str, Any] = {}
    try:

        def deployment() -> str | None:
            assert serve.poll() is None, f"serve exited with {serve.returncode}:\n{_tail(log)}"
            response = httpx.get(f"{api}/deployments/name/ingest/ingest", timeout=10)
            return response.json()["id"] if response.status_code == 200 else None

        deployment_id = _wait("deployment ingest/ingest registered", deployment, 120, log)
        first = _run(api, deployment_id, parameters)

        def mid_flow() -> bool:
            state = _state(api, first)
            assert state not in FINAL, f"first run ended ({state}) before the restart:\n{_tail(log)}"
            return state == "RUNNING" and status.counts()["processed"] >= BATCH

        _wait("the first run to be RUNNING with documents processed", mid_flow, 240, log)
        outcome["processed_at_stop"] = status.counts()["processed"]
        server.stop()
        server = servers.start_prefect(workdir, reuse=False, port=port)  # same PREFECT_HOME: same database
        outcome["first"] = _wait(
            "the interrupted run to reach a final state",
            lambda: (s := _state(api, first)) in FINAL and s,
            240,
            log,
        )
        outcome["processed_after_first"] = status.counts()["processed"]
        done = {r.document_id: r.last_success_at for r in status.rows(state="processed")}
        assert done, f"the first run wrote nothing:\n{_tail(log)}"

        if serve.poll() is not None:  # the serving process did not survive the outage: serve again
            outcome["serve_restarted"] = serve.returncode
            serve = serve_process(
                [sys.executable, "-m", "unichunk.deployments.serving.serve", "ingest"], env, log, tmp_path
            )
            _wait("deployment ingest/ingest re-registered", deployment, 120, log)
        second = _run(api, deployment_id, parameters)
        final = _wait("the second run to finish", lambda: (s := _state(api, second)) in FINAL and s, 240, log)
        assert final == "COMPLETED", f"second run {final}:\n{_tail(log)}"
    finally:
        _stop(serve)  # before opening the sinks: Qdrant local mode allows one process
        server.stop()

    rows = {r.document_id: r for r in status.rows()}
    assert len(rows) == DOCS and {r.state for r in rows.values()} == {"processed"}, status.counts()
    assert {d: rows[d].last_success_at for d in done} == done, "the second run re-processed documents"
    expected = status.expected_chunk_ids()
    assert len(expected) >= DOCS

    settings = SinkSettings(data_dir=data_dir, falkordb_url=falkordb_url, graph_name=graph_name)
    sinks = open_sinks(reading_settings(settings))  # the live generation, as every reader resolves it
    try:
        report = verify_alignment(sinks, expected)
        vector_points = sinks["vectors"].count()
    finally:
        for sink in sinks.values():
            sink.close()
    assert report.ok, report.as_dict()
    assert report.counts == dict.fromkeys(sinks, len(expected))
    assert vector_points == len(expected), "a chunk was stored twice in Qdrant"

    # Nothing stored twice anywhere (Qdrant points, BM25 entries, graph nodes), via the shared check.
    mp = pytest.MonkeyPatch()
    for key in ("UNICHUNK_DATA_DIR", "UNICHUNK_FALKORDB_URL", "UNICHUNK_GRAPH_NAME"):
        mp.setenv(key, env[key])
    try:
        assert duplicates() == {}
    finally:
        close_all_sinks()
        mp.undo()
    print(f"served restart: {outcome}, {len(done)} kept, {time.monotonic() - started:.0f} s")
