"""`unichunk serve` while its Prefect server is down: one line when it goes, one when it is back.

The real console command serves the deployments and the webhook receiver against a private Prefect server,
which is stopped once the runner polls it, and started again on the same port and database after a
signed webhook was answered 503 `prefect_unavailable` and the outage was reported. Proves: stderr holds
no traceback, exactly one "unreachable" line and one "reachable again" line; the same delivery is then
accepted (202), so the outage cost the sender one retry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import servers
from served import stop_process, wait

from unichunk.deployments.service.webhook_security import sign

SECRET = "outage-secret"
UNREACHABLE = "the Prefect API at "
BACK = "the Prefect API is reachable again"


def _webhook(receiver: str, source_id: str, delivery: str) -> httpx.Response:
    body = json.dumps({"event": "updated", "source_id": source_id}).encode()
    ts = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "X-Unichunk-Timestamp": str(ts),
        "X-Unichunk-Signature": sign(SECRET, ts, body),
        "X-Unichunk-Delivery": delivery,
    }
    return httpx.post(f"{receiver}/webhooks/documents", content=body, headers=headers, timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_prefect_outage_is_two_lines_on_stderr_not_tracebacks(tmp_path: Path, falkordb_url: str) -> None:
    workdir = tmp_path / "own-prefect"
    try:
        server = servers.start_prefect(workdir, reuse=False)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    api = server.url
    port = int(api.rsplit(":", 1)[1].split("/")[0])
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nThe otters sleep by the river.\n")
    receiver_port = servers.free_port()
    receiver = f"http://127.0.0.1:{receiver_port}"
    env = {k: v for k, v in os.environ.items() if k not in ("PUSHGATEWAY_URL", "UNICHUNK_DEBUG")}
    env.update(
        PREFECT_API_URL=api,
        UNICHUNK_DATA_DIR=str(tmp_path / "data"),
        UNICHUNK_SOURCE_ROOT=str(corpus),
        UNICHUNK_WEBHOOK_SECRET=SECRET,
        UNICHUNK_FALKORDB_URL=falkordb_url,
        UNICHUNK_GRAPH_NAME=f"outage_{uuid.uuid4().hex[:12]}",
        UNICHUNK_METRICS_PORT="0",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
    )
    log = tmp_path / "serve.err"  # stderr, what the test is about; stdout (uvicorn's access log) apart
    serve = subprocess.Popen(
        [sys.executable, "-m", "unichunk.deployments.cli.main", "serve", "--port", str(receiver_port)],
        cwd=tmp_path,
        env=env,
        stdout=(tmp_path / "serve.out").open("wb"),
        stderr=log.open("wb"),
        start_new_session=True,  # its flow-run subprocesses share the group: stop_process stops all
    )
    try:

        def polled() -> bool:  # the runner polls its deployments: it is up, past its start-up calls
            assert serve.poll() is None, f"serve exited with {serve.returncode}"
            response = httpx.get(f"{api}/deployments/name/ingest-document/ingest-document", timeout=10)
            return response.status_code == 200 and response.json().get("status") == "READY"

        wait("the runner to poll its deployments", polled, 180, log)
        wait("the receiver", lambda: httpx.get(f"{receiver}/health", timeout=5).status_code == 200, 60, log)
        server.stop()
        delivery = f"dlv-{uuid.uuid4().hex}"
        refused = _webhook(receiver, "a.md", delivery)
        assert refused.status_code == 503 and refused.json()["error"] == "prefect_unavailable", refused.text
        wait("the outage line", lambda: UNREACHABLE in log.read_text(errors="replace"), 60, log)
        # Let Prefect's client meet the outage a few more times (its websocket, its polling) before the
        # server comes back: each attempt used to print a traceback.
        wait("the runner's own errors", lambda: serve.poll() is None and _noise_seen(log), 90, log)
        server = servers.start_prefect(workdir, reuse=False, port=port)  # same PREFECT_HOME: same database
        wait("the reachable-again line", lambda: BACK in log.read_text(errors="replace"), 60, log)
        accepted = _webhook(receiver, "a.md", delivery)  # the sender's retry of the refused delivery
        assert accepted.status_code == 202, accepted.text
    finally:
        stop_process(serve)
        server.stop()

    text = log.read_text(errors="replace")
    lines = text.splitlines()
    assert "Traceback" not in text, text[-6000:]
    assert len([line for line in lines if UNREACHABLE in line and "unreachable" in line]) == 1, text[-6000:]
    assert len([line for line in lines if BACK in line]) == 1, text[-6000:]


def _noise_seen(log: Path) -> bool:
    """Prefect's cancellation observer gave up on its websocket and its polling (one line left of it)."""
    return "Cancellation polling task failed" in log.read_text(errors="replace")
