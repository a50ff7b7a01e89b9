"""Metrics that add up (issue 16): `unichunk serve` runs the `ingest` deployment on the sample corpus twice,
a real Prometheus scrapes the serving process's /metrics (the metrics port and the receiver's route), and
its HTTP API must show the processed counter rising by exactly the documents each run processed, while
the run processes are separate subprocesses that push nothing. Then every dashboard panel must return
data, and the alert rules load and evaluate.

The same served runs are the issue's screenshot-free check of what Prefect shows: read from Prefect's API,
each run has its templated name (`ingest · <source>`), INFO lines per batch, and both artifacts (the
markdown summary with the run's counts, the failures table, empty after a clean run)."""

from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import servers
from faults.served import FINAL, run_state, serve_process, start_run, stop_process, wait

from unichunk.chunking.ids import default_source_name
from unichunk.deployments.serving.serve import DEPLOYMENT_NAMES

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CORPUS = REPO_ROOT / "deployments" / "sample_corpus"
UNICHUNK = str(Path(sys.executable).parent / "unichunk")
SERVE_JOB, RECEIVER_JOB = "unichunk-serve", "unichunk-webhook"
PROCESSED = f'unichunk_documents_total{{job="{SERVE_JOB}", outcome="processed"}}'
SKIPPED = f'unichunk_documents_total{{job="{SERVE_JOB}", outcome="skipped"}}'
# Panels whose healthy value is 0 after a clean run: they must return data, not a non-zero value.
ZERO_IS_RIGHT = ("Alignment mismatches (last check)", "Embedder truncations (time range)")


@dataclass
class Service:
    api: str
    receiver: str
    metrics: str
    prometheus: str
    pushgateway: str
    instance: str
    log: Path


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=15).json()
    assert body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def _value(prometheus: str, expr: str) -> float | None:
    result = _query(prometheus, expr)
    assert len(result) <= 1, f"{expr}: more than one series {result}"
    return float(result[0]["value"][1]) if result else None


def _settles_at(svc: Service, expr: str, expected: float, timeout: float = 60) -> None:
    """Wait until Prometheus's latest sample of `expr` is `expected` (a scrape or two after the change)."""
    wait(f"{expr} == {expected}", lambda: _value(svc.prometheus, expr) == expected, timeout, svc.log)


@pytest.fixture
def service(
    tmp_path: Path, prefect_api_url: str, falkordb_url: str, pushgateway_url: str
) -> Iterator[Service]:
    """`unichunk serve` (deployments + receiver + metrics port) and a Prometheus scraping both pages."""
    metrics_port, receiver_port = servers.free_port(), servers.free_port()
    instance = f"served-test-{uuid.uuid4().hex[:8]}"
    prometheus = servers.start_prometheus(
        tmp_path,
        pushgateway_url,
        scrape={SERVE_JOB: f"127.0.0.1:{metrics_port}", RECEIVER_JOB: f"127.0.0.1:{receiver_port}"},
        rule_files=[REPO_ROOT / "deployments" / "alerts.yml"],
    )
    env = servers.environment_with(
        PREFECT_API_URL=prefect_api_url,
        UNICHUNK_DATA_DIR=str(tmp_path / "data"),
        UNICHUNK_FALKORDB_URL=falkordb_url,
        UNICHUNK_GRAPH_NAME=f"metrics_{uuid.uuid4().hex[:12]}",
        UNICHUNK_METRICS_PORT=str(metrics_port),
        UNICHUNK_WEBHOOK_SECRET="metrics-test-secret",
        UNICHUNK_METRICS_INSTANCE=instance,
        PUSHGATEWAY_URL=pushgateway_url,  # set, as compose sets it: served runs must still not push
        PROMETHEUS_MULTIPROC_DIR=None,  # `serve` chooses it under the data dir
        UNICHUNK_SOURCE_ROOT=None,
        UNICHUNK_QDRANT_URL=None,
        PREFECT_RUNNER_POLL_FREQUENCY="1",
    )
    log = tmp_path / "serve.log"
    process = serve_process([UNICHUNK, "serve", "--port", str(receiver_port)], env, log, tmp_path)
    svc = Service(
        prefect_api_url,
        f"http://127.0.0.1:{receiver_port}",
        f"http://127.0.0.1:{metrics_port}/metrics",
        prometheus.url,
        pushgateway_url,
        instance,
        log,
    )
    try:

        def registered() -> str | None:
            assert process.poll() is None, (
                f"serve exited with {process.returncode}:\n{log.read_text()[-3000:]}"
            )
            return _deployment_id(prefect_api_url, "ingest")

        wait("the ingest deployment", registered, 180, log)
        time.sleep(2)  # the runner's first poll
        yield svc
    finally:
        stop_process(process)
        prometheus.stop()
        for name in DEPLOYMENT_NAMES:
            if deployment_id := _deployment_id(prefect_api_url, name):
                httpx.delete(f"{prefect_api_url}/deployments/{deployment_id}", timeout=10)


def _deployment_id(api: str, name: str) -> str | None:
    response = httpx.get(f"{api}/deployments/name/{name}/{name}", timeout=10)
    return response.json()["id"] if response.status_code == 200 else None


def _ingest(svc: Service, source: Path) -> str:
    """One run of the served `ingest` deployment; it must complete. Its flow run ID."""
    deployment_id = _deployment_id(svc.api, "ingest")
    assert deployment_id
    run_id = start_run(svc.api, deployment_id, {"params": {"source": {"root": str(source)}}})
    state = wait("the ingest run to finish", lambda: run_state(svc.api, run_id) in FINAL, 600, svc.log)
    assert state and run_state(svc.api, run_id) == "COMPLETED", svc.log.read_text()[-3000:]
    return run_id


def _shown_in_prefect(svc: Service, run_id: str, source: Path, processed: int) -> None:
    """What the Prefect UI shows of a served ingest run, read from Prefect's API: its name, its INFO batch
    lines, its summary artifact (with the run's processed count) and its failures table (empty)."""
    assert httpx.get(f"{svc.api}/flow_runs/{run_id}", timeout=10).json()["name"] == (
        f"ingest · {default_source_name(source)}"
    )
    found = httpx.post(
        f"{svc.api}/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run_id]}}}, timeout=15
    ).json()
    artifacts = {a["key"]: a for a in found}
    assert set(artifacts) == {"ingest-summary", "ingest-failures"}, found
    summary = artifacts["ingest-summary"]
    assert summary["type"] == "markdown" and "### ingest: Completed" in summary["data"], summary
    assert f"| processed | {processed} ({processed} chunked) |" in summary["data"], summary["data"]
    assert artifacts["ingest-failures"]["type"] == "table"
    assert json.loads(artifacts["ingest-failures"]["data"])["document"] == []

    def batch_lines() -> list[str]:  # the run process sends its logs in batches
        body = {"logs": {"flow_run_id": {"any_": [run_id]}, "level": {"ge_": 20}}, "limit": 200}
        logs = httpx.post(f"{svc.api}/logs/filter", json=body, timeout=15).json()
        return [log["message"] for log in logs if "chunks written graph=" in log["message"]]

    assert wait("the run's INFO batch lines", batch_lines, 60, svc.log)


def test_served_runs_add_up_in_prometheus_and_feed_every_dashboard_panel(service: Service, tmp_path: Path):
    svc = service
    source = tmp_path / "source"
    shutil.copytree(SAMPLE_CORPUS, source)
    documents = len([p for p in source.rglob("*") if p.is_file()])
    assert documents >= 5

    # The serving process shows every counter series at 0 before any run: the first run's increase counts.
    _settles_at(svc, PROCESSED, 0)
    page = httpx.get(svc.metrics, timeout=10).text
    assert "_created" not in page

    first = _ingest(svc, source)  # every document is new
    _settles_at(svc, PROCESSED, documents)
    _shown_in_prefect(svc, first, source, documents)

    # HTTP metrics on the API: a rejected (unsigned) webhook and a /health, by route template and status.
    httpx.get(f"{svc.receiver}/health", timeout=10)
    assert httpx.get(f"{svc.receiver}/no/such/path", timeout=10).status_code == 404
    # last: once Prometheus has it, it has the others (one scrape reads one whole page)
    assert httpx.post(f"{svc.receiver}/webhooks/documents", json={}, timeout=10).status_code == 401
    wait(
        "the HTTP metrics in Prometheus",
        lambda: (
            _value(
                svc.prometheus,
                f'sum(unichunk_http_requests_total{{job="{SERVE_JOB}", route="/webhooks/documents", status="401"}})',
            )
            == 1
        ),
        60,
        svc.log,
    )
    assert _query(svc.prometheus, 'unichunk_http_requests_total{route="<unmatched>", status="404"}')

    # After this one run, every dashboard panel returns data, and a non-zero value where 0 is not right.
    dashboard = json.loads((REPO_ROOT / "deployments/grafana/dashboards/unichunk.json").read_text())
    empty = []
    for panel in dashboard["panels"]:
        values = []
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "10m").replace("$__range", "30m")
            values += [float(r["value"][1]) for r in _query(svc.prometheus, expr)]
        if not values or (panel["title"] not in ZERO_IS_RIGHT and not any(v > 0 for v in values)):
            empty.append((panel["title"], values))
    assert empty == [], empty

    changed = sorted(p for p in source.rglob("*.md"))[0]
    changed.write_text(changed.read_text() + "\n\nOne more paragraph, so this document changed.\n")
    second = _ingest(svc, source)  # a new run process: only the changed document is processed again
    _settles_at(svc, PROCESSED, documents + 1)
    _shown_in_prefect(svc, second, source, 1)
    _settles_at(svc, SKIPPED, documents - 1)

    # The query: it stayed 0 while runs pushed counters that each started from zero.
    increase = _value(svc.prometheus, f"increase({PROCESSED}[10m])")
    assert increase is not None and documents + 1 <= increase < documents + 1.5, increase
    chunks = _query(svc.prometheus, f'sum by (sink) (unichunk_chunks_written_total{{job="{SERVE_JOB}"}})')
    assert {r["metric"]["sink"] for r in chunks} == {"vectors", "keywords", "graph"}, chunks
    assert all(float(r["value"][1]) > 0 for r in chunks), chunks
    # The receiver's /metrics route renders the same sums as the metrics port (one service, one page);
    # Prometheus scrapes it on its own schedule, so its latest sample may be a scrape behind: wait for it.
    _settles_at(svc, f'unichunk_documents_total{{job="{RECEIVER_JOB}", outcome="processed"}}', documents + 1)

    # Served runs push nothing (their samples are on the page above); no `_created` series anywhere.
    groups = httpx.get(f"{svc.pushgateway}/api/v1/metrics", timeout=10).json()["data"]
    assert not [g for g in groups if g["labels"].get("instance") == svc.instance], groups
    # (this service's pages; what other processes push to a shared gateway is not this test's to judge)
    created = _query(
        svc.prometheus,
        f'count by (__name__, job) ({{__name__=~".+_created", job=~"{SERVE_JOB}|{RECEIVER_JOB}"}})',
    )
    assert created == [], created
    # Duration buckets reach 600 s on the served histograms (a 22 s prepare[vectors] has a finite bucket).
    assert _query(
        svc.prometheus,
        f'unichunk_sink_operation_duration_seconds_bucket{{job="{SERVE_JOB}", le=~`300(\\.0)?`}}',
    )
    # The run recorded its success, for the "no successful reindex" alert's kind of query.
    last = _value(
        svc.prometheus, f'unichunk_last_success_timestamp_seconds{{job="{SERVE_JOB}", flow="ingest"}}'
    )
    assert last is not None and time.time() - 900 < last <= time.time() + 5

    # The alert rules load and evaluate without error; no reindex ran, so that alert is on its way.
    rules = httpx.get(f"{svc.prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
    loaded = {r["name"]: r for g in rules for r in g["rules"]}
    assert set(loaded) == {
        "UnichunkNoSuccessfulReindex",
        "UnichunkDocumentsFailed",
        "UnichunkAlignmentMismatch",
        "UnichunkWebhookRejectionsSpike",
        "UnichunkAccessDeniedSpike",
    }
    wait(
        "the rules evaluated",
        lambda: all(
            r["health"] == "ok"
            for g in httpx.get(f"{svc.prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
            for r in g["rules"]
        ),
        30,
        svc.log,
    )
    rules = httpx.get(f"{svc.prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
    states = {r["name"]: r["state"] for g in rules for r in g["rules"]}
    assert states["UnichunkNoSuccessfulReindex"] in ("pending", "firing"), states
    # The other rules' served branches read 0 here (the rule states themselves also see whatever other
    # processes pushed to the gateway, which is not this test's to judge).
    assert (
        _value(
            svc.prometheus,
            f'sum(increase(unichunk_documents_total{{job="{SERVE_JOB}", outcome="failed"}}[1h]))',
        )
        == 0
    )
