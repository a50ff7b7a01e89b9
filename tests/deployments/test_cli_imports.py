"""The CLI's start-up stays light: `import unichunk.deployments.cli.main` (what every command pays before it knows whether
a running service will answer) loads no library behind the stores, the models or the flows.

Checked in a fresh interpreter (this one has them all loaded), by the modules it holds, not by a timing:
before the package faces loaded lazily, `import unichunk.deployments.cli.main` pulled in qdrant_client, both graph clients
and numpy (2.7 s); `tests/deployments/test_service_handover.py` checks the same for whole `search`,
`status` and `delete` commands answered by a running service.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# What a command answered by a service must not load: the models and their runtimes, the stores' clients,
# the records' database layer, the flows' orchestrator, the API server, the chunker's parsers and numeric
# libraries.
HEAVY_LIBRARIES = frozenset(
    {
        "torch",
        "sentence_transformers",
        "transformers",
        "spacy",
        "qdrant_client",
        "qdrant_edge",
        "bm25s",
        "Stemmer",
        "falkordb",
        "neo4j",
        "redis",
        "prefect",
        "fastapi",
        "uvicorn",
        "numpy",
        "tiktoken",
        "tokenizers",
        "pathspec",
        "bs4",
        "lxml",
        "pypdf",
        "trafilatura",
        "llama_index",
        "sqlalchemy",
        "psycopg",
    }
)

# Runs the CLI as `unichunk ...` and, at exit (after typer's SystemExit too), writes the names of every
# module the process loaded to the file named by its first argument.
RECORDING_CLI = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "unichunk"
from unichunk.deployments.cli.main import main
main()
"""


def heavy_loaded(modules: list[str]) -> set[str]:
    """The heavy libraries among loaded module names (top-level package names)."""
    return {name.split(".")[0] for name in modules} & HEAVY_LIBRARIES


def run_recording_cli(
    out: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`unichunk *args` in a fresh process; its result and the heavy libraries it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", RECORDING_CLI, str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, heavy_loaded(json.loads(out.read_text()))


def test_importing_the_cli_loads_no_store_model_or_flow_library() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, unichunk.deployments.cli.main; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(done.stdout)
    assert "unichunk.deployments.cli.main" in loaded
    assert heavy_loaded(loaded) == set()
    # Nor the pipeline's records (status, registry), whatever they are stored in: a command the service
    # answers needs none of them, even when the service runs on another machine.
    assert not {"unichunk.index.status", "unichunk.index.registry", "unichunk.index.generations"} & set(
        loaded
    )


def test_the_recording_cli_sees_what_a_command_loads(tmp_path: Path) -> None:
    """The recorder sees libraries a command loads after start-up: `status` with no service reads the
    records itself (SQLAlchemy); `--version` and `search --help` load none (the `unichunk` face that
    `--version` imports loads its names on first use)."""
    env = {k: v for k, v in os.environ.items() if k != "UNICHUNK_SERVICE_URL"}
    env["UNICHUNK_DATA_DIR"] = str(tmp_path / "data")
    done, heavy = run_recording_cli(tmp_path / "status.json", "status", env=env)
    assert done.returncode == 0, done.stderr
    assert "sqlalchemy" in heavy
    done, heavy = run_recording_cli(tmp_path / "version.json", "--version", env=env)
    assert done.returncode == 0 and done.stdout.startswith("unichunk ")
    assert heavy == set()
    done, heavy = run_recording_cli(tmp_path / "help.json", "search", "--help", env=env)
    assert done.returncode == 0 and "Hybrid search" in done.stdout
    assert heavy == set()
