"""docker-compose.yml, the Dockerfile, prometheus.yml and the Grafana files, checked without Docker: the
compose essentials, that every setting we pass is one our code (or Prefect) reads, that every mounted
file exists, and that every metric a dashboard panel queries is one our code registers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES: dict = COMPOSE["services"]
_INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::?[-?][^}]*)?\}")


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: str(value) for key, value in env.items() if key != "<<"}


def _known_unichunk_variables() -> set[str]:
    from deployments.configuration import variables

    return set(variables())


def _prefect_variables() -> set[str]:
    """Every PREFECT_* name Prefect's settings accept (aliases such as PREFECT_UI_API_URL included)."""
    from prefect.settings import Settings
    from prefect.settings.legacy import _get_valid_setting_names

    return set(_get_valid_setting_names(Settings))


def test_services_are_all_there_with_image_or_build() -> None:
    expected = {
        "qdrant",
        "neo4j",
        "prefect-server",
        "worker",
        "webhook",
        "prometheus",
        "pushgateway",
        "grafana",
    }
    assert expected <= set(SERVICES)
    for name, service in SERVICES.items():
        assert ("image" in service) != ("build" in service), f"{name}: exactly one of image/build"
        if "build" in service:
            assert (REPO_ROOT / service["build"] / "Dockerfile").is_file(), name


def test_ports_are_strings_and_unique() -> None:
    published: list[str] = []
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert isinstance(port, str), (
                f"{name}: port {port!r} must be a string (YAML reads 60:60 as base 60)"
            )
            assert re.fullmatch(r"\d+:\d+", port), f"{name}: {port}"
            published.append(port.split(":")[0])
    assert len(published) == len(set(published)), "two services publish the same host port"


def test_depends_on_targets_exist_and_health_conditions_have_healthchecks() -> None:
    for name, service in SERVICES.items():
        depends = service.get("depends_on", {})
        items = depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends)
        for target, spec in items:
            assert target in SERVICES, f"{name} depends on unknown service {target}"
            condition = spec.get("condition", "service_started")
            assert condition in ("service_started", "service_healthy", "service_completed_successfully")
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[target], f"{name} waits for {target} health it never reports"


def test_healthcheck_shapes() -> None:
    checks = {name: s["healthcheck"] for name, s in SERVICES.items() if "healthcheck" in s}
    assert {"neo4j", "prefect-server"} <= set(checks)
    for name, check in checks.items():
        test = check["test"]
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) >= 2, name
        for key in ("interval", "timeout", "start_period"):
            if key in check:
                assert re.fullmatch(r"\d+(ms|s|m|h)", check[key]), f"{name}.{key}={check[key]}"
        assert isinstance(check.get("retries", 1), int), name


def test_named_volumes_are_declared_and_bind_mounts_exist() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            if volume.startswith("${"):  # ${UNICHUNK_SOURCES:-default}:/target: check the default
                match = re.match(r"^\$\{[A-Z_]+:-([^}]*)\}:", volume)
                assert match, f"{name}: interpolated mount {volume} needs a default"
                source = match[1]
            else:
                source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (REPO_ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_every_variable_our_services_get_is_one_something_reads() -> None:
    unichunk = _known_unichunk_variables()
    prefect = _prefect_variables()
    others = {"PUSHGATEWAY_URL", "HF_HUB_OFFLINE", "DO_NOT_TRACK"}
    ours = [name for name, s in SERVICES.items() if "build" in s] + ["prefect-server"]
    for name in ours:
        for key in _environment(SERVICES[name]) | _environment(COMPOSE["x-unichunk-env"]):
            if key.startswith("UNICHUNK_"):
                assert key in unichunk, f"{name}: {key} is not a setting our code reads"
            elif key.startswith("PREFECT_"):
                assert key in prefect, f"{name}: {key} is not a Prefect setting"
            else:
                assert key in others, f"{name}: unexpected variable {key}"


def test_wiring_points_services_at_each_other() -> None:
    worker = _environment(SERVICES["worker"]) | _environment(COMPOSE["x-unichunk-env"])
    assert worker["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert worker["UNICHUNK_QDRANT_URL"].startswith("http://qdrant:")
    assert worker["UNICHUNK_NEO4J_URI"].startswith("bolt://neo4j:")
    assert worker["PUSHGATEWAY_URL"] == "http://pushgateway:9091"
    webhook = _environment(SERVICES["webhook"])
    assert "UNICHUNK_WEBHOOK_SECRET" in webhook
    # The receiver resolves paths under the same mount point the worker reads them from.
    mount = [v for v in SERVICES["worker"]["volumes"] if v.endswith(":/sources:ro")]
    assert mount and mount == [v for v in SERVICES["webhook"]["volumes"] if v.endswith(":/sources:ro")]
    # Neo4j's password and the worker's are the same interpolation.
    assert _INTERPOLATION.findall(_environment(SERVICES["neo4j"])["NEO4J_AUTH"]) == _INTERPOLATION.findall(
        worker["UNICHUNK_NEO4J_PASSWORD"]
    )


def test_service_commands_exist() -> None:
    from typer.main import get_command

    from deployments.cli import app

    cli = get_command(app)
    worker = SERVICES["worker"]["command"]
    assert worker[0] == "unichunk" and worker[1] in cli.commands
    serve_options = {opt for p in cli.commands[worker[1]].params for opt in (*p.opts, *p.secondary_opts)}
    assert set(worker[2:]) <= serve_options
    webhook = SERVICES["webhook"]["command"]
    factory = webhook[webhook.index("--factory") + 1]
    module, _, attr = factory.partition(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), attr))


def test_prometheus_config_scrapes_pushgateway_receiver_and_serve() -> None:
    config = yaml.safe_load((REPO_ROOT / "deployments" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {job: [t for sc in j["static_configs"] for t in sc["targets"]] for job, j in jobs.items()}
    assert jobs["pushgateway"]["honor_labels"] is True
    assert targets["pushgateway"] == ["pushgateway:9091"]
    assert targets["unichunk-webhook"] == ["webhook:8787"]
    assert targets["unichunk-serve"] == ["worker:9464"]
    assert _environment(SERVICES["worker"])["UNICHUNK_METRICS_PORT"] == "9464"
    for target in (t for ts in targets.values() for t in ts):
        assert target.split(":")[0] in SERVICES


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_prometheus_config_passes_promtool() -> None:
    result = subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(REPO_ROOT / "deployments" / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_provisioning_and_dashboard_metrics_exist() -> None:
    grafana = REPO_ROOT / "deployments" / "grafana"
    datasources = yaml.safe_load((grafana / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    providers = yaml.safe_load((grafana / "provisioning" / "dashboards" / "unichunk.yml").read_text())
    mounted = {v.split(":")[1] for v in SERVICES["grafana"]["volumes"] if v.startswith("./")}
    assert providers["providers"][0]["options"]["path"] in mounted

    dashboard = json.loads((grafana / "dashboards" / "unichunk.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert all(t["datasource"]["uid"] == source["uid"] for p in dashboard["panels"] for t in p["targets"])
    referenced = {m for e in exprs for m in re.findall(r"\bunichunk_[a-z_]+", e)}

    # Every series a panel queries must be one our code exports.
    from prometheus_client import REGISTRY

    import chunking.metrics  # noqa: F401
    import deployments.webhook  # noqa: F401
    import index.metrics  # noqa: F401
    import sinks.metrics  # noqa: F401

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    exported = {m.name + sfx for m in REGISTRY.collect() for sfx in suffixes.get(m.type, ("",))}
    assert referenced and referenced <= exported, f"not exported: {sorted(referenced - exported)}"
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("documents", "chunks written", "p95", "truncation", "alignment", "webhook"):
        assert topic in titles, topic
