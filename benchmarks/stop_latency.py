"""Ctrl-C to exit: seconds from SIGINT, sent while `unichunk ingest` embeds a batch, to the process's exit.

    python -m benchmarks.stop_latency [--repeat 3] [--signal INT|TERM] [--batch-size 20]

Each try: a fresh data dir, a generated corpus (60 documents of about 20 chunks), the real CLI in its own
session; once a batch is chunked and not yet written (status rows `processing`: its embedding runs), the
signal is sent and the seconds to exit are measured, with the exit code, the Prefect flow run's state and
the seconds until that state was set (`state_final_after`).
The data dir's local Prefect server is started once and reused (its start-up is not what is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from unichunk.index.generations import live_status
from unichunk.local_stack import down
from unichunk.sinks.config import SinkSettings

UNICHUNK = str(Path(sys.executable).parent / "unichunk")


def corpus(root: Path, documents: int = 60) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    people = ["Alice Martin", "Bruno Costa", "Chen Wei", "Dara Okafor", "Emil Novak"]
    for n in range(documents):
        parts = [
            f"## Part {p}\n\n"
            + " ".join(
                f"{people[(n + p + s) % 5]} reviewed shard {n}-{p}-{s} of the cluster in week {s}, "
                f"noting latency {n * p + s} ms and {p + s} replicas."
                for s in range(12)
            )
            for p in range(20)
        ]
        (root / f"doc_{n:03d}.md").write_text(f"# Report {n}\n\n" + "\n\n".join(parts) + "\n")
    return root


def one_try(base: Path, signum: int, batch_size: int, env: dict[str, str]) -> dict[str, object]:
    data = Path(tempfile.mkdtemp(dir=base, prefix="data-"))
    env = {**env, "UNICHUNK_DATA_DIR": str(data)}
    source = corpus(base / "corpus")
    log = data.parent / f"{data.name}.log"
    proc = subprocess.Popen(
        [UNICHUNK, "ingest", str(source), "--batch-size", str(batch_size)],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    status = None
    while proc.poll() is None:
        if status is None and (data / "generations").is_dir():
            try:
                status = live_status(SinkSettings(data_dir=data))
            except Exception:
                status = None
        if status is not None and status.counts().get("processing"):
            break
        time.sleep(0.05)
    sent, sent_at = time.monotonic(), datetime.now(UTC)
    os.killpg(proc.pid, signum)
    code = proc.wait()
    seconds = time.monotonic() - sent
    down(data, echo=False)  # the embedded FalkorDB the run started for its data dir
    api = env["PREFECT_API_URL"]
    runs = httpx.post(f"{api}/flow_runs/filter", json={"sort": "START_TIME_DESC", "limit": 1}).json()
    state = runs[0]["state"] if runs else None
    final = datetime.fromisoformat(state["timestamp"]) if state else None  # when it became final
    return {
        "seconds": round(seconds, 2),
        "state_final_after": round((final - sent_at).total_seconds(), 2) if final else None,
        "exit": code,
        "state": runs[0]["state_type"] if runs else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--signal", choices=["INT", "TERM"], default="INT")
    parser.add_argument("--batch-size", type=int, default=20)
    args = parser.parse_args()
    signum = signal.Signals[f"SIG{args.signal}"]
    base = Path(tempfile.mkdtemp(prefix="stop-latency-"))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1")
    if "PREFECT_API_URL" not in env:
        from unichunk.local_stack import ensure_prefect_server, stop_prefect_server

        server = base / "prefect"
        env["PREFECT_API_URL"] = ensure_prefect_server(server).api_url
    else:
        server = None
    try:
        results = [one_try(base, signum, args.batch_size, env) for _ in range(args.repeat)]
    finally:
        if server is not None:
            stop_prefect_server(server)
    load = os.getloadavg()[0]
    print(json.dumps({"signal": args.signal, "load_1min": round(load, 1), "tries": results}, indent=2))


if __name__ == "__main__":
    main()
