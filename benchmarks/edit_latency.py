"""One edited document through the CLI, as a webhook-sized run: MiniLM compiled ahead of time against uncompiled.

    python -m benchmarks.edit_latency [--rounds 3]

A run that writes one document is mostly start-up: imports, the model and spaCy loaded, stores opened.
This copies the bundled sample corpus into a temporary folder, ingests it once (the package compiled
first if this machine has none), then each round appends a line to one document and runs
`unichunk ingest` in a fresh process with `UNICHUNK_EMBEDDING_COMPILED=false` and with the default (true),
in turn, against one data dir and its local Prefect server (started by the first run, stopped at the end).
Printed per run: the process's wall time, and the run's own seconds from its summary line.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.embedder_speed import machine_load
from benchmarks.evaldata import SAMPLE_CORPUS

SETTINGS = {"uncompiled": "false", "compiled (default)": "true"}


def unichunk(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """`unichunk <args>` in a fresh process: (its wall seconds, its output)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "unichunk.deployments.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    return time.perf_counter() - started, done.stdout + done.stderr


def run_seconds(output: str) -> float:
    """The run's own seconds, the last figure of its summary line."""
    return float(re.findall(r"; ([0-9.]+) s$", output, re.M)[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="unichunk-edit-latency-") as work:
        corpus = Path(work) / "corpus"
        shutil.copytree(SAMPLE_CORPUS, corpus)
        env = {**os.environ, "UNICHUNK_DATA_DIR": str(Path(work) / "data")}
        edited = sorted(corpus.glob("*.md"))[0]
        try:
            unichunk(["ingest", str(corpus)], env)
            print(f"load before: {machine_load()}", file=sys.stderr)
            walls: dict[str, list[float]] = {name: [] for name in SETTINGS}
            runs: dict[str, list[float]] = {name: [] for name in SETTINGS}
            for number in range(args.rounds):
                for name, compiled in SETTINGS.items():
                    with edited.open("a", encoding="utf-8") as handle:
                        handle.write(f"\nEdited in round {number + 1}, {name}.\n")
                    wall, output = unichunk(
                        ["ingest", str(corpus)], {**env, "UNICHUNK_EMBEDDING_COMPILED": compiled}
                    )
                    assert "1 processed" in output, output[-2000:]
                    walls[name].append(wall)
                    runs[name].append(run_seconds(output))
                    print(
                        f"round {number + 1} {name}: wall {wall:.2f} s, run {runs[name][-1]:.1f} s",
                        file=sys.stderr,
                    )
        finally:
            unichunk(["down"], env)
    base = "uncompiled"
    print(f"\none document of the sample corpus edited, {args.rounds} rounds, load after: {machine_load()}\n")
    print(
        "| MiniLM | `unichunk ingest` wall, s (median; each) | the run's own seconds (median) | wall x uncompiled |"
    )
    print("|---|---|---:|---:|")
    for name in SETTINGS:
        print(f"| {name} | {statistics.median(walls[name]):.2f} ({', '.join(f'{w:.2f}' for w in walls[name])}) | "
              f"{statistics.median(runs[name]):.1f} | {statistics.median(walls[name]) / statistics.median(walls[base]):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
