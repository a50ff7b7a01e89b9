"""A burst of webhook updates during a re-index: how long until every update is visible, one run per
update applying its own (`UNICHUNK_WEBHOOK_BATCHING=false`, how updates were applied before) against the
queued updates applied together by the run that takes the store lock (the default), in the same run.

    python -m benchmarks.webhook_burst [--burst 20] [--reindex-docs 40] [--quick]

For each mode, from scratch: a corpus of `--burst` + `--reindex-docs` one-paragraph documents; `unichunk
serve` (every deployment and the webhook receiver, embedded stores, the default run limit and poll) on a
fresh data dir; a first `ingest` run of the corpus. Then the `--reindex-docs` documents are rewritten and
a `reindex` run started; once it holds the embedded store lock, the clock starts, the `--burst` other
documents are rewritten and their signed `updated` webhooks sent at once. Measured: the seconds until
every burst document's status row holds its new content (written to every store: visible to searches),
how many of them the re-index was still running (it lets the lock go between its scan and its alignment
check, so a waiting run may go first), until every `ingest-document` run ended, and how
many runs applied the updates (the distinct runs named by the update queue; one per update without it).

Servers: the benchmark's own local Prefect server and FalkorDB (`unichunk.local_stack`), stopped at the
end. On a shared machine compare the two modes within one run, not across runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from unichunk.chunking.ids import sha256_hex
from unichunk.deployments.service.webhook_security import sign
from unichunk.engine.store_access import store_lock_path
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.update_queue import UpdateQueue
from unichunk.sinks.config import SinkSettings

BIN = Path(sys.executable).parent
SECRET = "webhook-burst-benchmark"
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
PEOPLE = ["Alice Martin", "Bruno Costa", "Chen Wei", "Dara Okafor", "Emil Novak"]
CITIES = ["Berlin", "Lisbon", "Nairobi", "Osaka", "Toronto"]


@dataclass
class Result:
    mode: str
    visible: float  # seconds from the first webhook until every update is stored
    locked: float  # of which the re-index was still running (it lets the lock go between scan and check)
    all_final: float  # until every ingest-document run ended
    runs: int  # ingest-document runs started
    applying: int  # runs that applied updates
    states: dict[str, int]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(what: str, probe, timeout: float, log: Path | None = None) -> Any:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, OSError, KeyError, ValueError):
            if result := probe():
                return result
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{tail}")


def _text(n: int, version: int) -> str:
    return (
        f"Report {n}, version {version}: {PEOPLE[n % 5]} met {PEOPLE[(n + 2) % 5]} in {CITIES[n % 5]} "
        f"to review index shard {n} of the Qdrant cluster, and wrote up revision {version}.\n"
    )


def _deployment(api: str, name: str) -> str:
    return httpx.get(f"{api}/deployments/name/{name}/{name}", timeout=10).json()["id"]


def _start_run(api: str, name: str, parameters: dict[str, Any]) -> str:
    response = httpx.post(
        f"{api}/deployments/{_deployment(api, name)}/create_flow_run",
        json={"parameters": parameters},
        timeout=30,
    )
    response.raise_for_status()
    return response.json()["id"]


def _run(api: str, run_id: str) -> dict[str, Any]:
    return httpx.get(f"{api}/flow_runs/{run_id}", timeout=15).json()


def _document_runs(api: str) -> list[dict[str, Any]]:
    body = {"deployments": {"id": {"any_": [_deployment(api, "ingest-document")]}}, "limit": 200}
    return httpx.post(f"{api}/flow_runs/filter", json=body, timeout=15).json()


def _post(receiver: str, name: str) -> int:
    body = json.dumps({"event": "updated", "source_id": name, "path": name}).encode()
    ts = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "X-Unichunk-Timestamp": str(ts),
        "X-Unichunk-Signature": sign(SECRET, ts, body),
        "X-Unichunk-Delivery": f"bench-{uuid.uuid4().hex}",
    }
    return httpx.post(f"{receiver}/webhooks/documents", content=body, headers=headers, timeout=60).status_code


def measure(mode: str, batching: bool, burst: int, reindex_docs: int, work: Path, stack: Any) -> Result:
    corpus, data_dir, log = work / f"corpus-{mode}", work / f"data-{mode}", work / f"serve-{mode}.log"
    corpus.mkdir(parents=True)
    total = burst + reindex_docs
    names = [f"doc_{n:04d}.txt" for n in range(total)]
    for n, name in enumerate(names):
        (corpus / name).write_text(_text(n, 1))
    port = _free_port()
    receiver = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("PUSHGATEWAY_URL", "UNICHUNK_QDRANT_URL")}
    env.update(
        PREFECT_API_URL=stack.prefect_api_url,
        UNICHUNK_FALKORDB_URL=stack.falkordb_url,
        UNICHUNK_GRAPH_NAME=f"burst_{uuid.uuid4().hex[:8]}",
        UNICHUNK_DATA_DIR=str(data_dir),
        UNICHUNK_SOURCE_ROOT=str(corpus),
        UNICHUNK_WEBHOOK_SECRET=SECRET,
        UNICHUNK_METRICS_PORT="0",
        UNICHUNK_WEBHOOK_BATCHING=str(batching).lower(),
    )
    api = stack.prefect_api_url
    serve = subprocess.Popen(
        [str(BIN / "unichunk"), "serve", "--port", str(port)],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait("the deployments", lambda: _deployment(api, "ingest-document"), 300, log)
        _wait("the receiver", lambda: httpx.get(f"{receiver}/health", timeout=5).status_code == 200, 120, log)
        target = _deployment(api, "ingest-document")
        _wait(
            "the trigger",
            lambda: any(
                action.get("deployment_id") == target
                for a in httpx.post(f"{api}/automations/filter", json={}, timeout=10).json()
                for action in a.get("actions", [])
            ),
            120,
            log,
        )
        source = {"params": {"source": {"kind": "directory", "root": str(corpus)}}}
        first = _start_run(api, "ingest", source)
        print(f"{mode}: first ingest of {total} documents ...", file=sys.stderr, flush=True)
        state = _wait(
            "the first ingest", lambda: (s := _run(api, first)["state"]["type"]) in FINAL and s, 900, log
        )
        if state != "COMPLETED":
            raise RuntimeError(f"the first ingest ended {state}; see {log}")
        settings = SinkSettings(data_dir=data_dir)
        lock = store_lock_path(reading_settings(settings))  # the live generation's
        assert lock is not None
        for n in range(burst, total):
            (corpus / names[n]).write_text(_text(n, 2))
        reindex = _start_run(api, "reindex", source)
        _wait("the re-index to hold the store lock", lambda: "flow run" in lock.read_text(), 600, log)
        print(f"{mode}: re-index writing; sending {burst} webhooks", file=sys.stderr, flush=True)

        earlier = {r["id"] for r in _document_runs(api)}  # the other mode's, on the same Prefect server
        started = time.monotonic()
        expected = {}
        for n in range(burst):
            (corpus / names[n]).write_text(text := _text(n, 3))
            expected[names[n]] = sha256_hex(text)
        with ThreadPoolExecutor(max_workers=burst) as pool:
            codes = list(pool.map(lambda name: _post(receiver, name), names[:burst]))
        if codes != [202] * burst:
            raise RuntimeError(f"webhooks refused: {codes}")
        status = live_status(settings)
        locked_until: float | None = None

        def visible() -> bool:
            nonlocal locked_until
            if locked_until is None and _run(api, reindex)["state"]["type"] in FINAL:
                locked_until = time.monotonic()
            rows = {r.source_id: r.content_hash for r in status.rows()}
            return all(rows.get(name) == digest for name, digest in expected.items())

        _wait("every update to be visible", visible, 3600, log)
        seen = time.monotonic()
        if locked_until is None:
            _wait("the re-index to end", lambda: _run(api, reindex)["state"]["type"] in FINAL, 600, log)
            locked_until = time.monotonic()

        def ended_runs() -> list[dict[str, Any]] | None:
            runs = [r for r in _document_runs(api) if r["id"] not in earlier]
            return runs if len(runs) >= burst and all(r["state"]["type"] in FINAL for r in runs) else None

        runs = _wait("every ingest-document run to end", ended_runs, 3600, log)
        ended = time.monotonic()
        states: dict[str, int] = {}
        for run in runs:
            states[run["state"]["type"]] = states.get(run["state"]["type"], 0) + 1
        applying = len({u.holder for u in UpdateQueue.of(settings).entries()}) if batching else len(runs)
        return Result(
            mode,
            visible=seen - started,
            locked=min(locked_until, seen) - started,
            all_final=ended - started,
            runs=len(runs),
            applying=applying,
            states=states,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst", type=int, default=20, help="Documents updated by webhooks at once.")
    parser.add_argument("--reindex-docs", type=int, default=40, help="Documents the re-index rewrites.")
    parser.add_argument("--quick", action="store_true", help="5 webhooks during a re-index of 10.")
    parser.add_argument("--only", choices=["per-document", "batched"], help="Measure one mode only.")
    parser.add_argument("--keep", type=Path, help="Keep the work directory (logs, data) here.")
    args = parser.parse_args(argv)
    burst, reindex_docs = (5, 10) if args.quick else (args.burst, args.reindex_docs)
    for name, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("DO_NOT_TRACK", "1"),
        ("PREFECT_SERVER_ANALYTICS_ENABLED", "false"),
    ):
        os.environ.setdefault(name, value)
    work = args.keep or Path(tempfile.mkdtemp(prefix="unichunk-webhook-burst-"))
    work.mkdir(parents=True, exist_ok=True)

    from unichunk import local_stack

    stack_dir = work / "stack"
    stack = local_stack.up(stack_dir, port=_free_port(), echo=False)
    results: list[Result] = []
    try:
        for mode, batching in (("batched", True), ("per-document", False)):  # the quick one first
            if args.only in (None, mode):
                results.append(measure(mode, batching, burst, reindex_docs, work, stack))
                print(f"{mode}: {results[-1]}", file=sys.stderr, flush=True)
    finally:
        local_stack.down(stack_dir, echo=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    load = os.getloadavg()
    print(
        f"\n{platform.node()}: {os.cpu_count()} cores, load average {load[0]:.1f} at the end; "
        f"{burst} webhooks during a re-index of {reindex_docs} changed documents"
    )
    print(
        "\n| mode | visible after (s) | of which the re-index ran (s) | after the re-index (s) "
        "| all runs ended (s) | runs | runs that applied updates | run states |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r.mode} | {r.visible:.1f} | {r.locked:.1f} | {r.visible - r.locked:.1f} | {r.all_final:.1f} "
            f"| {r.runs} | {r.applying} | {', '.join(f'{k} {v}' for k, v in sorted(r.states.items()))} |"
        )
    by_mode = {r.mode: r for r in results}
    if len(by_mode) == 2:
        batched, single = by_mode["batched"], by_mode["per-document"]
        print(
            f"\nbatched / per-document: visible after {batched.visible / single.visible:.2f}, "
            f"all runs ended {batched.all_final / single.all_final:.2f}"
        )


if __name__ == "__main__":
    main()
