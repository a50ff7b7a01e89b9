"""Metrics exposure: the served process's /metrics page, and pushed flow metrics reaching a real
Prometheus through a real Pushgateway, queryable with the dashboard's own PromQL."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

import unichunk.index.metrics as pipeline_metrics
from unichunk.deployments.serving.serve import start_metrics_server
from unichunk.index.metrics import MetricsSettings

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


def test_pushed_flow_metrics_reach_prometheus_grouped_by_instance_and_flow(
    pushgateway_url: str, prometheus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = f"metrics-test-{uuid.uuid4().hex[:8]}"
    instance = f"host-{uuid.uuid4().hex[:8]}"
    pipeline_metrics.DOCUMENTS.labels(outcome="processed").inc(3)
    pipeline_metrics.CHUNKS_WRITTEN.labels(sink="keywords").inc(7)
    pipeline_metrics.TASK_SECONDS.labels(task=flow, sink="").observe(31.0)  # a slow step
    pipeline_metrics.record_success(flow)
    pipeline_metrics.record_success(f"{flow}-other")  # a process that ran two flows still pushes (no 400)
    pushed_to = {"PUSHGATEWAY_URL": pushgateway_url}
    assert pipeline_metrics.push_metrics(
        flow, MetricsSettings(**pushed_to, UNICHUNK_METRICS_INSTANCE=instance)
    )

    expr = f'unichunk_documents_total{{job="unichunk", instance="{instance}", flow="{flow}", outcome="processed"}}'
    deadline = time.monotonic() + 90
    result: list[dict] = []
    while time.monotonic() < deadline and not result:
        result = _query(prometheus_url, expr)
        if not result:
            time.sleep(1)
    assert result, f"{expr} not visible in Prometheus after 90 s"
    # honor_labels: the pushed job/instance/flow labels survive the scrape of the gateway.
    labels = result[0]["metric"]
    assert (labels["job"], labels["instance"], labels["flow"]) == ("unichunk", instance, flow)
    assert float(result[0]["value"][1]) >= 3
    pushed = f'job="unichunk", instance="{instance}", flow="{flow}"'
    assert _query(prometheus_url, f"unichunk_last_success_timestamp_seconds{{{pushed}}}")

    # A 31 s observation lands in the finite 60 s bucket (the buckets used to stop at 10 s).
    def bucket(le: str) -> float:
        (sample,) = _query(
            prometheus_url, f'unichunk_task_duration_seconds_bucket{{{pushed}, task="{flow}", le=~`{le}`}}'
        )
        return float(sample["value"][1])

    # (the Pushgateway re-renders `le="30.0"` as `le="30"`; a direct scrape keeps "30.0")
    assert (bucket(r"30(\.0)?"), bucket(r"60(\.0)?"), bucket(r"\+Inf")) == (0.0, 1.0, 1.0)
    # No `_created` series is pushed (prometheus_client would add one per counter and histogram).
    assert _query(prometheus_url, f'{{__name__=~".+_created", {pushed}}}') == []

    # Another instance's push of the same flow is its own group: neither overwrites the other.
    assert pipeline_metrics.push_metrics(
        flow, MetricsSettings(**pushed_to, UNICHUNK_METRICS_INSTANCE=f"{instance}-b")
    )
    groups = httpx.get(f"{pushgateway_url}/api/v1/metrics", timeout=10).json()["data"]
    ours = {g["labels"]["instance"] for g in groups if g["labels"].get("flow") == flow}
    assert ours == {instance, f"{instance}-b"}

    # Every query of the Grafana dashboard is valid PromQL on the real server.
    dashboard = json.loads((REPO_ROOT / "deployments/grafana/dashboards/unichunk.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            promql = target["expr"].replace("$__rate_interval", "1m").replace("$__range", "1h")
            _query(prometheus_url, promql)


def test_every_duration_histogram_reaches_300_seconds() -> None:
    from prometheus_client import REGISTRY

    import unichunk.chunking.metrics
    import unichunk.deployments.service.http_metrics
    import unichunk.sinks.metrics  # noqa: F401

    histograms = [m for m in REGISTRY.collect() if m.type == "histogram" and m.name.endswith("_seconds")]
    assert len(histograms) >= 5, [m.name for m in histograms]
    for metric in histograms:
        collector = REGISTRY._names_to_collectors[metric.name + "_sum"]
        assert max(b for b in collector._upper_bounds if b != float("inf")) >= 300, metric.name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_alert_rules_pass_promtool_and_name_the_five_alerts() -> None:
    rules = REPO_ROOT / "deployments" / "alerts.yml"
    result = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    names = {r["alert"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    assert names == {
        "UnichunkNoSuccessfulReindex",
        "UnichunkDocumentsFailed",
        "UnichunkAlignmentMismatch",
        "UnichunkWebhookRejectionsSpike",
        "UnichunkAccessDeniedSpike",
    }
    config = yaml.safe_load((REPO_ROOT / "deployments" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]


def test_http_metrics_count_route_templates_methods_and_statuses() -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from unichunk.deployments.service.http_metrics import HTTP_REQUESTS, HTTP_SECONDS, HttpMetrics

    app = FastAPI()
    app.add_middleware(HttpMetrics)
    route = f"/items-{uuid.uuid4().hex[:8]}/{{item_id}}"

    @app.get(route)
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    def count(method: str, status: str, template: str = route) -> float:
        return HTTP_REQUESTS.labels(route=template, method=method, status=status)._value.get()

    unmatched_before = count("GET", "404", "<unmatched>")
    other_before = count("OTHER", "404", "<unmatched>")
    client = TestClient(app)
    for n in (1, 2, 3):
        assert client.get(route.replace("{item_id}", str(n))).status_code == 200
    assert client.get(route.replace("{item_id}", "not-a-number")).status_code == 422
    assert client.get("/scanner/probe/123").status_code == 404
    assert client.request("BREW", "/coffee").status_code == 404
    assert (count("GET", "200"), count("GET", "422")) == (3.0, 1.0)
    assert count("GET", "404", "<unmatched>") == unmatched_before + 1
    assert count("OTHER", "404", "<unmatched>") == other_before + 1
    assert HTTP_SECONDS.labels(route=route, method="GET")._sum.get() > 0
