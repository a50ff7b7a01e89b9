"""Deployments: their definitions, prefect.yaml, and the issue's main test, end to end against a real
Prefect server: a signed webhook -> receiver -> Prefect event -> trigger -> served flow run -> stores."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import default_source_name
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.service.webhook_security import sign
from unichunk.deployments.serving.serve import CONCURRENCY, DEPLOYMENT_NAMES, TAGS, build_deployments
from unichunk.deployments.settings import SAMPLE_CORPUS, ServiceSettings
from unichunk.index.generations import live_status
from unichunk.sinks.config import SinkSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET = "e2e-secret"
RUN_TIMEOUT = 240.0  # first run loads MiniLM and spaCy on a shared 2-core machine


def test_deployments_carry_schedule_triggers_and_templated_parameters(tmp_path: Path) -> None:
    settings = ServiceSettings(reindex_cron="15 4 * * *", source_root=tmp_path)
    by_name = {d.name: d for d in build_deployments(settings)}
    assert set(by_name) == set(DEPLOYMENT_NAMES)
    assert {d.flow_name for d in by_name.values()} == set(DEPLOYMENT_NAMES)

    assert [s.schedule.cron for s in by_name["reindex"].schedules] == ["15 4 * * *"]
    assert by_name["ingest"].schedules in (None, [])
    assert by_name["rebuild"].schedules in (None, []) and not by_name["rebuild"].triggers  # deliberate only
    assert by_name["rebuild"].parameters["params"]["source"]["root"] == str(tmp_path.resolve())
    assert by_name["reindex"].parameters["params"]["source"] == {
        "kind": "directory",
        "root": str(tmp_path.resolve()),
        "source_system": default_source_name(tmp_path),  # webhook documents and scans get the same IDs
    }

    (updated,) = by_name["ingest-document"].triggers
    assert updated.expect == {"document.updated"}
    assert updated.match.root == {"prefect.resource.id": "unichunk.document.*"}
    assert updated.parameters["path"] == "{{ event.payload.path }}"
    assert updated.parameters["root"] == str(tmp_path.resolve())
    (deleted,) = by_name["delete-document"].triggers
    assert deleted.expect == {"document.deleted"}
    assert deleted.parameters == {"document_id": "{{ event.payload.document_id }}"}

    # Entrypoints are module paths that import to the very flow objects.
    for deployment in by_name.values():
        module, _, attr = deployment.entrypoint.rpartition(".")
        assert getattr(importlib.import_module(module), attr).name == deployment.flow_name

    # Tags to filter runs by; one long run at a time per deployment, none for the webhook flows.
    for name, deployment in by_name.items():
        assert deployment.tags == TAGS[name] and "unichunk" in deployment.tags
    assert {n for n, d in by_name.items() if "webhook" in d.tags} == {"ingest-document", "delete-document"}
    limits = {n: (d.concurrency_limit, d.concurrency_options) for n, d in by_name.items()}
    assert limits["reindex"][0] == 1 and limits["reindex"][1].collision_strategy.value == "CANCEL_NEW"
    assert limits["ingest"][0] == limits["rebuild"][0] == limits["switch-generation"][0] == 1
    assert limits["ingest-document"] == limits["delete-document"] == (None, None)


def test_without_a_source_root_the_served_runs_scan_only_sources_ingested_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`serve` with no UNICHUNK_SOURCE_ROOT must not scan some folder into the user's index (it once scanned
    the bundled sample corpus): `ingest` and `reindex` take no source, i.e. every recorded one."""
    monkeypatch.delenv("UNICHUNK_SOURCE_ROOT", raising=False)
    monkeypatch.delenv("UNICHUNK_REINDEX_CRON", raising=False)
    settings = ServiceSettings()
    assert settings.reindex_cron == "0 2 * * *" and settings.source() is None
    by_name = {d.name: d for d in build_deployments(settings)}
    for name in ("ingest", "reindex", "rebuild"):
        assert by_name[name].parameters == {"params": {}}, name
    assert "root" not in by_name["ingest-document"].triggers[0].parameters
    with pytest.raises(ValueError, match="unknown deployment"):
        build_deployments(settings, ["nope"])


def test_sample_corpus_is_ours_varied_and_sized() -> None:
    files = sorted(p for p in SAMPLE_CORPUS.iterdir() if p.is_file())
    assert 8 <= len(files) <= 12
    assert {p.suffix for p in files} >= {".md", ".html", ".txt", ".eml"}
    for path in files:
        words = len(path.read_text(encoding="utf-8").split())
        assert 300 <= words <= 1500, f"{path.name}: {words} words"
        assert "unichunk" in path.read_text(encoding="utf-8").lower(), path.name


def test_prefect_yaml_declares_the_same_deployments_for_a_process_pool() -> None:
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    deployments = {d["name"]: d for d in config["deployments"]}
    assert set(deployments) == set(DEPLOYMENT_NAMES)
    for name, deployment in deployments.items():
        assert deployment["work_pool"]["name"], name
        path, _, attr = deployment["entrypoint"].partition(":")
        assert (REPO_ROOT / path).is_file(), deployment["entrypoint"]
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert getattr(module, attr).name == name
    assert any(s.get("cron") for s in deployments["reindex"]["schedules"])
    for name, event in (("ingest-document", "document.updated"), ("delete-document", "document.deleted")):
        (trigger,) = deployments[name]["triggers"]
        assert trigger["expect"] == [event]
        assert trigger["match"] == {"prefect.resource.id": "unichunk.document.*"}
    assert deployments["ingest-document"]["triggers"][0]["parameters"]["path"] == "{{ event.payload.path }}"
    # The YAML triggers validate as Prefect deployment triggers.
    from prefect.events.schemas.deployment_triggers import DeploymentTriggerTypes
    from pydantic import TypeAdapter

    for name in ("ingest-document", "delete-document"):
        TypeAdapter(DeploymentTriggerTypes).validate_python(deployments[name]["triggers"][0])
    pools = {p["name"]: p for p in config.get("work_pools", [])} if config.get("work_pools") else {}
    pool_names = {d["work_pool"]["name"] for d in deployments.values()}
    assert len(pool_names) == 1 and (not pools or pools[next(iter(pool_names))]["type"] == "process")

    # The same tags and concurrency limits as the served deployments; run logs at INFO on the workers.
    for name, deployment in deployments.items():
        assert deployment["tags"] == TAGS[name], name
        limit = deployment.get("concurrency_limit")
        served = CONCURRENCY.get(name)
        assert (limit and (limit["limit"], limit["collision_strategy"])) == (
            served and (served.limit, served.collision_strategy.value)
        ), name
        env = deployment["work_pool"]["job_variables"]["env"]
        assert env["PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL"] == "INFO", name


@pytest.mark.parametrize("cron", [None, "15 4 * * 1"])
def test_prefect_yaml_reindex_cron_follows_UNICHUNK_REINDEX_CRON(monkeypatch, cron: str | None) -> None:
    """`prefect deploy` runs the reindex deployment's build step and templates its output into the cron:
    the variable when set, else ServiceSettings' default, as `unichunk serve` schedules it."""
    import asyncio

    from prefect.deployments.steps.utility import run_shell_script
    from prefect.utilities.templating import apply_values

    if cron is None:
        monkeypatch.delenv("UNICHUNK_REINDEX_CRON", raising=False)
    else:
        monkeypatch.setenv("UNICHUNK_REINDEX_CRON", cron)
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    reindex = next(d for d in config["deployments"] if d["name"] == "reindex")
    ((step_name, step),) = reindex["build"][0].items()
    assert step_name == "prefect.deployments.steps.run_shell_script"
    step = dict(step)
    step_id = step.pop("id")
    outputs = {step_id: asyncio.run(run_shell_script(**step))}
    (schedule,) = apply_values(reindex["schedules"], outputs)
    assert schedule["cron"] == ServiceSettings().reindex_cron == (cron or "0 2 * * *")


# --- end to end ------------------------------------------------------------------------------------


def _api(api_url: str, method: str, path: str, body: Any = None) -> Any:
    response = httpx.request(method, f"{api_url}{path}", json=body, timeout=15)
    response.raise_for_status()
    return response.json() if response.content else None


def _wait(what: str, probe: Any, timeout: float, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := probe():
            return result
        time.sleep(1)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n--- serve log ---\n{tail}")


@pytest.fixture()
def served(
    tmp_path: Path, prefect_api_url: str, falkordb_url: str
) -> Iterator[tuple[dict[str, str], Path, Path]]:
    """`python -m unichunk.deployments.serving.serve ingest-document delete-document` in a subprocess on the test server."""
    source_root = tmp_path / "source"
    source_root.mkdir()
    data_dir = tmp_path / "data"
    log = tmp_path / "serve.log"
    env = dict(os.environ)
    env.update(
        PREFECT_API_URL=prefect_api_url,
        UNICHUNK_DATA_DIR=str(data_dir),
        UNICHUNK_FALKORDB_URL=falkordb_url,
        UNICHUNK_SOURCE_ROOT=str(source_root),
        UNICHUNK_METRICS_PORT="0",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        PREFECT_LOGGING_LEVEL="WARNING",  # as `unichunk serve` has it: the run logs must still be at INFO
    )
    for name in (
        "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL",
        "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL",
    ):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "unichunk.deployments.serving.serve", "ingest-document", "delete-document"]
    with log.open("wb") as handle:
        process = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=handle, stderr=subprocess.STDOUT)
    ids: dict[str, str] = {}
    try:
        for name in ("ingest-document", "delete-document"):

            def deployment(name: str = name) -> str | None:
                if process.poll() is not None:
                    raise AssertionError(
                        f"serve exited with {process.returncode}:\n{log.read_text()[-3000:]}"
                    )
                response = httpx.get(f"{prefect_api_url}/deployments/name/{name}/{name}", timeout=10)
                return response.json()["id"] if response.status_code == 200 else None

            ids[name] = _wait(f"deployment {name} registered", deployment, 120, log)

        def automations() -> bool:
            found = _api(prefect_api_url, "POST", "/automations/filter", {})
            owned = {a["actions"][0].get("deployment_id") for a in found if a.get("actions")}
            return set(ids.values()) <= owned

        _wait("the deployments' trigger automations", automations, 60, log)
        time.sleep(2)  # let the runner start polling
        yield ids, source_root, data_dir
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        # Leave no trigger behind: later tests' events must not start runs nobody serves.
        for deployment_id in ids.values():
            httpx.delete(f"{prefect_api_url}/deployments/{deployment_id}", timeout=10)


def _send(client: TestClient, payload: dict[str, Any], delivery: str) -> dict[str, Any]:
    body = json.dumps(payload).encode()
    ts = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "X-Unichunk-Timestamp": str(ts),
        "X-Unichunk-Signature": sign(SECRET, ts, body),
        "X-Unichunk-Delivery": delivery,
    }
    response = client.post("/webhooks/documents", content=body, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


def _finished_run(api_url: str, deployment_id: str, log: Path, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The one run the last webhook started (runs in `seen` came before), once it has finished."""

    def probe() -> dict[str, Any] | None:
        runs = _api(api_url, "POST", "/flow_runs/filter", {"deployments": {"id": {"any_": [deployment_id]}}})
        runs = [run for run in runs if run["id"] not in seen]
        if len(runs) > 1:
            raise AssertionError(f"one webhook started {len(runs)} runs")
        if runs and runs[0]["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return runs[0]
        return None

    return _wait("the triggered flow run to finish", probe, RUN_TIMEOUT, log)


def _run_logs(api_url: str, run_id: str, expect: str) -> list[dict[str, Any]]:
    """A served run's log lines, once one contains `expect` (the run process sends them in batches)."""

    def probe() -> list[dict[str, Any]] | None:
        body = {"logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}
        logs = _api(api_url, "POST", "/logs/filter", body)
        return logs if any(expect in log["message"] for log in logs) else None

    return _wait(f"a log line with {expect!r}", probe, 30)


def test_signed_webhook_triggers_served_ingest_then_delete(
    served: tuple[dict[str, str], Path, Path], prefect_api_url: str, tmp_path: Path
) -> None:
    deployment_ids, source_root, data_dir = served
    source_id = f"notes/{uuid.uuid4().hex[:8]}.md"
    document = source_root / source_id
    document.parent.mkdir(parents=True)
    document.write_text(
        "# Webhook end to end\n\nThe receiver verified this change and Prefect ran ingest-document.\n\n"
        "## Second section\n\nQdrant, BM25 and the knowledge graph now hold the same chunk IDs.\n"
    )
    document_id = derive_document_id(source_system=default_source_name(source_root), source_id=source_id)
    settings = ServiceSettings(webhook_secret=SECRET, source_root=source_root)
    log = tmp_path / "serve.log"

    # The receiver shares the served flows' data dir, as in `unichunk serve`: a `deleted` event is checked
    # against the documents the live index holds.
    with TestClient(create_app(settings, PrefectEventSink(prefect_api_url), data_dir=data_dir)) as client:
        accepted = _send(
            client,
            {"event": "updated", "source_id": source_id, "path": source_id},
            "e2e-up",
        )
        assert accepted["document_id"] == document_id
        run = _finished_run(prefect_api_url, deployment_ids["ingest-document"], log)
        assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{log.read_text()[-3000:]}"
        assert run["parameters"]["path"] == str(document.resolve())
        assert run["parameters"]["source_id"] == source_id
        assert run["name"] == f"ingest-document · {source_id}"
        assert set(run["tags"]) >= {"unichunk", "webhook"}
        # INFO lines reach the UI although the serving process keeps Prefect's loggers at WARNING.
        logs = _run_logs(prefect_api_url, run["id"], "batch 1: 1 document: 1 written")
        assert any(line["level"] == 20 and "chunks written graph=" in line["message"] for line in logs)
        first_ingest = run["id"]

        status = live_status(SinkSettings(data_dir=data_dir)).get(document_id)
        assert status is not None and status.state == "processed", status
        assert status.chunk_count >= 1 and len(status.chunk_ids) == status.chunk_count

        _send(client, {"event": "deleted", "source_id": source_id}, "e2e-del")
        run = _finished_run(prefect_api_url, deployment_ids["delete-document"], log)
        assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{log.read_text()[-3000:]}"
        assert run["parameters"] == {"document_id": document_id}
        assert run["name"] == f"delete-document · {document_id}"
        assert live_status(SinkSettings(data_dir=data_dir)).get(document_id) is None

        # A file that cannot be read: the served run ends Failed, its message naming the file and why
        # (Prefect's engine resolves it into `RunFailed`, not a TypeError about the summary).
        (source_root / "bad.eml").write_bytes(b"\x00\x01\x02PNG\x00" * 40)
        _send(client, {"event": "updated", "source_id": "bad.eml", "path": "bad.eml"}, "e2e-bad")
        run = _finished_run(prefect_api_url, deployment_ids["ingest-document"], log, seen=(first_ingest,))
        assert run["state"]["type"] == "FAILED", f"{run['state']}\n{log.read_text()[-3000:]}"
        assert run["name"] == "ingest-document · bad.eml"
        assert run["state"]["message"] == (
            "1 document(s) failed (of 1 listed): bad.eml (binary content: NUL bytes in the first 8 KB)"
        )
        logs = _run_logs(prefect_api_url, run["id"], "RunFailed")
        assert not any("TypeError" in line["message"] for line in logs), [line["message"] for line in logs]
    assert "TypeError" not in log.read_text(errors="replace")
