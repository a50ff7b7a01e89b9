"""A run split across workers: chunks/s of 1 worker against 3, and against a run on its own.

    python -m benchmarks.shard_speed [--docs 300] [--shards 3] [--sinks keywords,graph] [--quick]

Each configuration ingests the same corpus (the bundled sample corpus plus the shared evaluation corpora
cut into documents, as `benchmarks.pipeline_speed` builds it) into a fresh data dir and graph, cold:

1. `alone`: the `ingest` flow in this process, shards=1 (today's path: one process, pipelined batches);
2. `1 worker`: shards=N, one `unichunk worker --limit 1` running the N shard runs one after another;
3. `3 workers`: shards=N, three such workers on this machine running them side by side.

The shard deployment is registered on a work pool of the benchmark's own with `prefect deploy` from
prefect.yaml, as an operator does. The workers are started (and seen polling) before the clock starts;
each shard run's process start and model loading is inside the measured time, as it is in real use. The
time is the parent flow call's wall time; chunks/s is the chunks the run stored over it.

Sinks: the keyword index and the graph by default. The embedded vector store takes one run at a time
(its folder lock), so parallel shards need a Qdrant server (`UNICHUNK_QDRANT_URL`, which this machine
cannot run); `--sinks keywords,graph,vectors` with a Qdrant server measures the full pipeline.

Servers: PREFECT_API_URL and UNICHUNK_FALKORDB_URL when set, else the benchmark's own local Prefect server
and FalkorDB (`unichunk.local_stack`), stopped at the end. On a 2-core machine three workers share two cores
with the Prefect server and FalkorDB: read the 3-worker figure as what a 2-core box gains, not as a
per-worker rate (each worker on a machine of its own would get its own cores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.evaldata import corpora_or_sample
from benchmarks.pipeline_speed import build_corpus

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass
class Result:
    name: str
    workers: int
    shards: int
    documents: int
    chunks: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(what: str, probe, timeout: float = 180.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, OSError):
            if probe():
                return
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def _deploy(api: str, pool: str) -> None:
    httpx.post(f"{api}/work_pools/", json={"name": pool, "type": "process"}, timeout=30).raise_for_status()
    done = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "ingest-shard", "--pool", pool],
        cwd=REPO_ROOT,
        env={**os.environ, "PREFECT_API_URL": api},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"prefect deploy failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")


@contextlib.contextmanager
def _workers(count: int, pool: str, api: str, env: dict[str, str], logs: Path):  # type: ignore[no-untyped-def]
    names = [f"bench-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    processes = [
        subprocess.Popen(
            [
                str(BIN / "unichunk"),
                "worker",
                "--pool",
                pool,
                "--limit",
                "1",
                "--metrics-port",
                "0",
                "--name",
                name,
            ],
            env={**env, "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "INFO"},
            stdout=(logs / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name in names
    ]

    def online() -> bool:
        found = httpx.post(f"{api}/work_pools/{pool}/workers/filter", json={}, timeout=10).json()
        return set(names) <= {w["name"] for w in found if w["status"] == "ONLINE"}

    try:
        _wait(f"{count} worker(s) polling", online)
        yield
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _run_parent(
    corpus: Path, shards: int, sinks: list[str], env: dict[str, str], log: Path
) -> tuple[int, int, float]:
    """The `ingest` flow in a process of its own (a CLI-style parent): (documents, chunks, seconds)."""
    code = (
        "import json, time\n"
        "from unichunk.flows.ingest import ingest\nfrom unichunk.engine.params import IngestParams, SourceParams\n"
        f"params = IngestParams(source=SourceParams(kind='directory', root={str(corpus)!r}), "
        f"sinks={sinks!r}, shards={shards})\n"
        "start = time.perf_counter()\nsummary = ingest(params)\nseconds = time.perf_counter() - start\n"
        "print('RESULT', json.dumps([summary.processed, max(summary.chunks_written.values()), seconds]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False, cwd=REPO_ROOT
    )
    log.write_text(done.stdout + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the ingest run failed; see {log}")
    documents, chunks, seconds = json.loads(lines[-1].removeprefix("RESULT "))
    return documents, chunks, seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--sinks", default="keywords,graph")
    parser.add_argument("--quick", action="store_true", help="120 documents")
    parser.add_argument("--keep", type=Path, help="keep the work directory here")
    args = parser.parse_args()
    docs = 120 if args.quick else args.docs
    sinks = args.sinks.split(",")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

    work = args.keep or Path(tempfile.mkdtemp(prefix="unichunk-shard-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus"
    build_corpus(corpus, docs, corpora_or_sample("shard_speed"))

    from unichunk import local_stack as stack

    stack_data = work / "stack"
    api = os.environ.get("PREFECT_API_URL")
    falkordb = os.environ.get("UNICHUNK_FALKORDB_URL")
    started_stack = not (api and falkordb)
    if started_stack:
        urls = stack.up(stack_data, port=_free_port(), echo=False)
        api, falkordb = api or urls.prefect_api_url, falkordb or urls.falkordb_url
    pool = f"bench-shards-{uuid.uuid4().hex[:6]}"
    results: list[Result] = []
    try:
        _deploy(api, pool)
        for name, workers, shards in (
            ("alone", 0, 1),
            ("1 worker", 1, args.shards),
            ("3 workers", 3, args.shards),
        ):
            data_dir = work / f"data-{name.replace(' ', '-')}"
            env = {
                **os.environ,
                "PREFECT_API_URL": api,
                "UNICHUNK_FALKORDB_URL": falkordb,
                "UNICHUNK_DATA_DIR": str(data_dir),
                "UNICHUNK_GRAPH_NAME": f"bench_{uuid.uuid4().hex[:8]}",
            }
            env.pop("PUSHGATEWAY_URL", None)  # one-shot pushes would only add noise
            logs = work / "logs"
            logs.mkdir(exist_ok=True)
            parent_log = logs / f"parent-{name.replace(' ', '-')}.log"
            print(f"{name}: {docs} documents, shards={shards} ...", flush=True)
            with _workers(workers, pool, api, env, logs) if workers else contextlib.nullcontext():
                documents, chunks, seconds = _run_parent(corpus, shards, sinks, env, parent_log)
            results.append(Result(name, workers, shards, documents, chunks, seconds))
    finally:
        with contextlib.suppress(httpx.HTTPError):
            deployment = httpx.get(f"{api}/deployments/name/ingest-shard/ingest-shard", timeout=10).json()
            httpx.delete(f"{api}/deployments/{deployment['id']}", timeout=10)
            httpx.delete(f"{api}/work_pools/{pool}", timeout=10)
        if started_stack:
            stack.down(stack_data, echo=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    one = next(r for r in results if r.name == "1 worker")
    print(f"\n{platform.node()}: {os.cpu_count()} cores; sinks {', '.join(sinks)}; {docs} documents")
    print("| configuration | workers | shards | documents | chunks | seconds | chunks/s | x 1 worker |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.name} | {r.workers} | {r.shards} | {r.documents} | {r.chunks} | {r.seconds:.1f} | "
            f"{r.rate:.1f} | {r.rate / one.rate:.2f} |"
        )


if __name__ == "__main__":
    main()
