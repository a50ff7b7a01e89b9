"""Metrics exposure: the served process's /metrics page, and pushed flow metrics reaching a real
Prometheus through a real Pushgateway, queryable with the dashboard's own PromQL."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx

import index.metrics as pipeline_metrics
from deployments.serve import start_metrics_server

REPO_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_served_process_exposes_the_pipeline_metrics() -> None:
    assert start_metrics_server(0) is None  # 0 disables it
    port = start_metrics_server(_free_port(), addr="127.0.0.1")
    pipeline_metrics.DOCUMENTS.labels(outcome="skipped").inc()
    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'unichunk_documents_total{outcome="skipped"}' in page
    assert "# TYPE unichunk_task_duration_seconds histogram" in page


def _query(prometheus_url: str, expr: str) -> list[dict]:
    response = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def test_pushed_flow_metrics_reach_prometheus_and_the_dashboard_queries_run(
    pushgateway_url: str, prometheus_url: str
) -> None:
    flow = f"metrics-test-{uuid.uuid4().hex[:8]}"
    pipeline_metrics.DOCUMENTS.labels(outcome="processed").inc(3)
    pipeline_metrics.CHUNKS_WRITTEN.labels(sink="keywords").inc(7)
    with pipeline_metrics.timed("chunk"):
        pass
    assert pipeline_metrics.push_metrics(flow, pushgateway_url)

    expr = f'unichunk_documents_total{{job="unichunk", flow="{flow}", outcome="processed"}}'
    deadline = time.monotonic() + 90
    result: list[dict] = []
    while time.monotonic() < deadline and not result:
        result = _query(prometheus_url, expr)
        if not result:
            time.sleep(1)
    assert result, f"{expr} not visible in Prometheus after 90 s"
    # honor_labels: the pushed job/flow labels survive the scrape of the gateway.
    assert result[0]["metric"]["flow"] == flow and result[0]["metric"]["job"] == "unichunk"
    assert float(result[0]["value"][1]) >= 3

    # Every query of the Grafana dashboard is valid PromQL on the real server, and the pushed
    # pipeline series feed the panels that read them.
    dashboard = json.loads((REPO_ROOT / "deployments/grafana/dashboards/unichunk.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            promql = target["expr"].replace("$__rate_interval", "1m")
            _query(prometheus_url, promql)
    chunks = _query(prometheus_url, 'sum by (sink) (unichunk_chunks_written_total{sink="keywords"})')
    assert chunks and float(chunks[0]["value"][1]) >= 7
