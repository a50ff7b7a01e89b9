"""Warm service against the cold CLI: `/search` latency of a running `unichunk serve`, and the CLI's
`search`, `status` and `delete <unknown>` wall time with the service running (they ask it) and without
(each loads what it needs itself), measured in the same run, each beside its floor:

- `/search` beside the embedder alone: one query's `embed_query` in this process, with the same embedder
  the service uses, timed between the requests (so both see the same load). It is the part of a search no
  code of ours can cut; the ratio p50/floor is what to compare across machines and loads.
- the CLI commands beside a Python process that imports only the CLI's libraries (typer, rich, httpx,
  pydantic-settings) and exits: what any Python CLI asking a service over HTTP pays.

Steps: a temporary data dir; `unichunk ingest` of the bundled sample corpus into it, then again (a run
with nothing to do: it loads no model; target under 5 s); the CLI commands cold (no service); `unichunk serve` on a free loopback port, waited for until its stores are warm; ~50
`GET /search` over the sample questions (default options: hybrid, context, graph), each followed by the same
query with `mode=graph` (the graph retriever alone: NER on the query, entity look-up, chunk records); the same
CLI commands again, `--repeat` times each (medians); stop the service, `unichunk down`. `--graph-weight W`
serves hybrid with the graph list fused in at weight W (`unichunk.retrieval.ranking.GRAPH_WEIGHT`, set in
the serving process), so the default `/search` runs all three retrievers. The data dir's own local Prefect server and FalkorDB are used
(PREFECT_API_URL and UNICHUNK_FALKORDB_URL are cleared), so nothing outside the temporary dir is touched.

    .venv/bin/python -m benchmarks.service_latency [--queries 50] [--repeat 5] [--quick] [--graph-weight 1]
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from unichunk.deployments.service.discovery import SERVICE_FILE
from unichunk.deployments.settings import SAMPLE_CORPUS
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.embedders import make_embedder

QUERIES = [
    "how are chunk IDs derived",
    "what does the webhook signature cover",
    "replayed webhooks incident",
    "which chunking strategies exist",
    "token window overlap",
    "what changed in the release",
    "how do I delete a document",
    "BM25 keyword index",
    "knowledge graph extraction",
    "Qdrant local mode lock",
    "what does FalkorDB store",
    "Prefect deployments and Qdrant",
]
# `unichunk serve` with hybrid weighing the graph list by argv[1] (the shipped default is a constant).
SERVE_WITH_GRAPH_WEIGHT = (
    "import sys; import unichunk.retrieval.ranking as ranking; ranking.GRAPH_WEIGHT = float(sys.argv[1]); "
    "from unichunk.deployments.cli.main import app; sys.argv = ['unichunk', *sys.argv[2:]]; app()"
)


# What any Python CLI that asks a service over HTTP pays before its own code runs: the CLI's libraries.
CLI_FLOOR = "import typer, rich.console, rich.progress, rich.table, httpx, pydantic_settings"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cli(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    return _timed([sys.executable, "-m", "unichunk.deployments.cli.main", *args], env)


def _floor(env: dict[str, str]) -> float:
    return _timed([sys.executable, "-c", CLI_FLOOR], env)[0]


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - start, done


def _wait_warm(url: str, data_dir: Path, service: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise SystemExit(f"`unichunk serve` exited with {service.returncode}")
        if (data_dir / SERVICE_FILE).exists():
            try:
                if httpx.get(f"{url}/search", params={"q": "warm", "k": 1}, timeout=120).status_code == 200:
                    return
            except httpx.TransportError:
                pass
        time.sleep(0.5)
    raise SystemExit("the service did not answer in time")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=50, help="Warm /search requests measured.")
    parser.add_argument("--quick", action="store_true", help="10 queries, 2 repetitions.")
    parser.add_argument(
        "--repeat", type=int, default=5, help="Timings of each CLI command with the service (median)."
    )
    parser.add_argument(
        "--graph-weight",
        type=float,
        default=None,
        help="Serve hybrid with the graph list at this weight (default: the shipped GRAPH_WEIGHT).",
    )
    args = parser.parse_args(argv)
    count = 10 if args.quick else args.queries
    repeat = 2 if args.quick else args.repeat
    data_dir = Path(tempfile.mkdtemp(prefix="unichunk-service-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "UNICHUNK_FALKORDB_URL")}
    env |= {"UNICHUNK_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}
    env.pop("UNICHUNK_SERVICE_URL", None)
    env.pop("UNICHUNK_API_TOKEN", None)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    commands = {
        "search": ("search", "webhook signature"),
        "status": ("status",),
        "delete <unknown>": ("delete", "no-such-document"),
    }
    atexit.register(_cli, env, "down")  # the servers the commands start, however the run ends
    print(f"data dir {data_dir}; ingesting the sample corpus ...", file=sys.stderr)
    seconds, done = _cli(env, "ingest", str(SAMPLE_CORPUS))
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    print(f"ingest {seconds:.1f} s", file=sys.stderr)
    idle: list[float] = []
    idle_floor: list[float] = []
    for _ in range(max(1, repeat // 2)):  # nothing changed: no model, only the bookkeeping
        idle_floor.append(_floor(env))
        seconds, done = _cli(env, "ingest", str(SAMPLE_CORPUS))
        if done.returncode != 0 or "0 processed" not in done.stdout:
            raise SystemExit(f"the no-change ingest did something ({done.returncode}): {done.stdout[-2000:]}")
        idle.append(seconds)
    cold = {name: _cli(env, *cmd)[0] for name, cmd in commands.items()}

    serve = ["serve", "--port", str(port)]
    weighted = args.graph_weight is not None
    launcher = (
        ["-c", SERVE_WITH_GRAPH_WEIGHT, str(args.graph_weight)]
        if weighted
        else ["-m", "unichunk.deployments.cli.main"]
    )
    service = subprocess.Popen(
        [sys.executable, *launcher, *serve],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_warm(url, data_dir, service)
        embedder = make_embedder(SinkSettings())  # the service's embedder, in this process: the floor
        embedder.embed_query("warm up")
        latencies, floor, graph_latencies, graph_found = [], [], [], 0
        with httpx.Client(base_url=url, timeout=60) as client:
            client.get("/search", params={"q": "warm", "k": 1, "mode": "graph"}).raise_for_status()
            for i in range(count):
                query = QUERIES[i % len(QUERIES)]
                start = time.perf_counter()
                response = client.get("/search", params={"q": query, "k": 5})
                latencies.append((time.perf_counter() - start) * 1000)
                response.raise_for_status()
                start = time.perf_counter()
                response = client.get("/search", params={"q": query, "k": 5, "mode": "graph"})
                graph_latencies.append((time.perf_counter() - start) * 1000)
                response.raise_for_status()
                graph_found += bool(response.json()["hits"])
                start = time.perf_counter()
                embedder.embed_query(query)
                floor.append((time.perf_counter() - start) * 1000)
        embedder.close()
        warm: dict[str, list[float]] = {name: [] for name in commands}
        cli_floor: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeat):  # each command right after a floor sample: both see the same load
            for name, cmd in commands.items():
                cli_floor[name].append(_floor(env))
                warm[name].append(_cli(env, *cmd)[0])
    finally:
        os.killpg(service.pid, signal.SIGTERM)
        service.wait(timeout=60)
        _cli(env, "down")

    p50, embed_p50 = statistics.median(latencies), statistics.median(floor)
    fused = f"hybrid with the graph at weight {args.graph_weight:g}" if weighted else "hybrid as shipped"
    print(
        f"\nwarm GET /search ({fused}) over {count} queries: p50 {p50:.0f} ms, p95 {_p95(latencies):.0f} ms; "
        f"floor (one query's embedding alone, same run): p50 {embed_p50:.1f} ms; "
        f"p50 / floor {p50 / embed_p50:.1f}x"
    )
    print(
        f"warm GET /search?mode=graph over {count} queries ({graph_found} found a chunk): "
        f"p50 {statistics.median(graph_latencies):.0f} ms, p95 {_p95(graph_latencies):.0f} ms"
    )
    median = statistics.median
    print(
        f"\nno-change `unichunk ingest` without a service: {median(idle):.2f} s, "
        f"{median(idle) / median(idle_floor):.1f}x the CLI floor ({median(idle_floor):.2f} s; "
        f"medians of {len(idle)}; target under 5 s)"
    )
    print(
        f"\nCLI with the service, medians of {repeat}, each beside the CLI floor (a process importing "
        "typer, rich, httpx and pydantic-settings) timed just before it:"
    )
    print("\n| CLI command | without service (s) | with service (s) | floor (s) | with service / floor |")
    print("|---|---|---|---|---|")
    for name in commands:
        print(
            f"| {name} | {cold[name]:.2f} | {median(warm[name]):.2f} | {median(cli_floor[name]):.2f} "
            f"| {median(warm[name]) / median(cli_floor[name]):.1f}x |"
        )


if __name__ == "__main__":
    main()
