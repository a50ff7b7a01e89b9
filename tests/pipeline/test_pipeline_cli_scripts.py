"""The CLI for scripts and for people, through the real `unichunk` console script: `--json` prints one JSON
document on stdout and nothing else, `--version`, and the checks that fail in one line before anything
starts (an option or variable named, an empty query, an unknown generation or document, an OpenAI embedder
without key or URL, a Prefect API that does not answer). `up --port` gives the UI its API URL. In process:
the logs a run emits go through the progress bar's console, the embedder's truncation warnings once.

The subprocesses' stdout and stderr are pipes (not a terminal: no progress bar), as in a script or CI.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import servers
from rich.progress import TimeRemainingColumn

import unichunk
from unichunk.deployments.cli import console, flow_runs
from unichunk.local_stack import STATE_FILE, stack_dir
from unichunk.sinks.vectors.sink import VectorSink

UNICHUNK = str(Path(sys.executable).parent / "unichunk")


_env = servers.environment_with


def _unichunk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UNICHUNK, *args],
        env=env or dict(os.environ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _shown(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def _json(result: subprocess.CompletedProcess[str], code: int = 0) -> dict:
    """stdout holds exactly one JSON document (json.loads refuses anything before or after it)."""
    assert result.returncode == code, _shown(result)
    return json.loads(result.stdout)


def _one_error_line(result: subprocess.CompletedProcess[str], code: int, start: str) -> str:
    assert result.returncode == code, _shown(result)
    assert result.stdout == "", _shown(result)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {start}"), _shown(result)
    return line


def test_version_and_the_checks_that_fail_before_anything_starts(tmp_path: Path, corpus: Path) -> None:
    data_dir = tmp_path / "data"
    # No Prefect server named: a command that got as far as Prefect would start the data dir's own.
    env = _env(UNICHUNK_DATA_DIR=str(data_dir), PREFECT_API_URL=None)

    version = _unichunk("--version", env=env)
    assert version.returncode == 0 and version.stdout == f"unichunk {unichunk.__version__}\n", _shown(version)

    _one_error_line(_unichunk("search", "", env=env), 2, "the query is blank")
    _one_error_line(_unichunk("search", "  ", "--json", env=env), 2, "the query is blank")
    line = _one_error_line(_unichunk("ingest", str(corpus), "--strategy", "foo", env=env), 2, "--strategy: ")
    assert line == (
        "error: --strategy: 'foo' is not one of auto, token_window, fixed_chars, sentence, paragraph, "
        "markdown, html, semantic"
    )
    _one_error_line(
        _unichunk("ingest", str(corpus), env={**env, "UNICHUNK_CHUNK_NAME": "foo"}),
        2,
        "UNICHUNK_CHUNK_NAME: 'foo' is not one of auto,",
    )
    _one_error_line(
        _unichunk("rebuild", str(corpus), "--chunk-size", "100", env=env),
        2,
        "--chunk-size: input should be greater than or equal to 128 (got 100)",
    )
    _one_error_line(
        _unichunk("status", env={**env, "UNICHUNK_EMBEDDER": "bogus"}),
        2,
        "UNICHUNK_EMBEDDER: 'bogus' is not one of minilm, openai",
    )
    _one_error_line(_unichunk("generations", "drop", "gxyz", env=env), 1, "no such generation: gxyz")
    _one_error_line(
        _unichunk("delete", "doc_0000000000000000", env=env), 1, "no such document: doc_0000000000000000"
    )

    # An OpenAI embedder with neither key nor base URL: one line naming both, at once (no network).
    openai = {**env, "UNICHUNK_EMBEDDER": "openai"}
    for name in ("UNICHUNK_EMBEDDING_API_KEY", "UNICHUNK_EMBEDDING_BASE_URL"):
        openai.pop(name, None)
    started = time.monotonic()
    line = _one_error_line(_unichunk("ingest", str(corpus), env=openai), 2, "UNICHUNK_EMBEDDER=openai needs")
    assert "UNICHUNK_EMBEDDING_API_KEY" in line and "UNICHUNK_EMBEDDING_BASE_URL" in line
    assert time.monotonic() - started < 30  # the CLI's start-up alone; the embedder retried for 64 s

    # Nothing above started a Prefect server (or wrote anything) for the data dir.
    assert not (stack_dir(data_dir) / STATE_FILE).exists()
    assert not data_dir.exists()

    # A PREFECT_API_URL that does not answer: exit 3 in one line, without Prefect's retries.
    dead = f"http://127.0.0.1:{servers.free_port()}/api"
    started = time.monotonic()
    _one_error_line(
        _unichunk("ingest", str(corpus), env={**env, "PREFECT_API_URL": dead}),
        3,
        f"cannot reach the Prefect API at {dead} (PREFECT_API_URL): ConnectError:",
    )
    assert time.monotonic() - started < 30


@pytest.mark.timeout(600)
def test_json_output_is_one_document_on_stdout(pipeline_env: Path, corpus: Path, doc_id) -> None:  # type: ignore[no-untyped-def]
    ingested = _json(_unichunk("ingest", str(corpus), "--json"))
    assert ingested["flow"] == "ingest" and ingested["listed"] == 3 and ingested["processed"] == 3
    assert ingested["failed"] == [] and set(ingested["chunks_written"]) == {"vectors", "keywords", "graph"}

    status = _json(_unichunk("status", "--json"))
    assert status["counts"]["processed"] == 3 and status["counts"]["failed"] == 0
    (generation,) = status["generations"]
    assert generation["state"] == "live" and status["live"] == generation["generation_id"]
    assert generation["counts"]["processed"] == 3
    documents = {d["document_id"]: d for d in status["documents"]}
    plain = doc_id("notes/plain.txt")
    assert documents[plain]["source_id"] == "notes/plain.txt" and documents[plain]["state"] == "processed"
    assert "chunk_ids" not in documents[plain]
    assert _json(_unichunk("generations", "list", "--json")) == {
        "live": status["live"],
        "generations": status["generations"],
    }

    verify = _json(_unichunk("verify", "--json"))
    assert verify["ok"] is True and verify["expected"] > 0
    assert {name: sink["count"] for name, sink in verify["sinks"].items()} == dict.fromkeys(
        ("vectors", "keywords", "graph"), verify["expected"]
    )

    search = _json(_unichunk("search", "keyword overlap BM25 ranks", "-k", "2", "--json"))
    assert search["query"] == "keyword overlap BM25 ranks" and search["k"] == 2
    first = search["hits"][0]
    assert first["rank"] == 1 and first["document_id"] == plain and first["ranks"]["keywords"] == 1
    text = (corpus / "notes/plain.txt").read_text()
    assert text[first["start_char"] : first["end_char"]] == first["content"]

    deleted = _json(_unichunk("delete", plain, "--json"))
    assert deleted["document_id"] == plain and sum(deleted["removed"].values()) > 0
    # Exit codes are unchanged by --json: an unknown document is still 1, with its line on stderr.
    _one_error_line(_unichunk("delete", plain, "--json"), 1, f"no such document: {plain}")


def test_run_logs_print_above_the_bar_and_truncations_once(
    capsys: pytest.CaptureFixture, request: pytest.FixtureRequest
) -> None:
    """What reaches the root logger while a command runs flows, and Python warnings, print through the
    console the progress bar draws on (so above it, never through it); the vector sink's per-document truncation warnings (its
    real `_report_truncation`) become one line with their count, after the run."""
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.logging.handlers import PrefectConsoleHandler

    bar = console.progress()
    assert bar.live.console is console.err_console
    assert any(isinstance(column, TimeRemainingColumn) for column in bar.columns)

    ensure_logging_setup()
    root = logging.getLogger()
    # A logging configuration that silenced our package's warnings must not silence the CLI's summary.
    ours = logging.getLogger("unichunk.sinks")
    ours.setLevel(logging.ERROR)  # setLevel, not an attribute: it clears the loggers' cached levels
    request.addfinalizer(lambda: ours.setLevel(logging.NOTSET))
    consoles = [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]
    embedder = SimpleNamespace(
        name="all-MiniLM-L6-v2", max_tokens=256, count_tokens=lambda texts: [len(t) for t in texts]
    )
    sink = SimpleNamespace(embedder=embedder)
    with flow_runs.terminal_logging():
        assert not any(isinstance(h, PrefectConsoleHandler) for h in root.handlers)
        for document in range(81):
            chunks = [
                SimpleNamespace(document_id=f"doc_{document}", chunk_id=f"doc_{document}:{i}") for i in (0, 1)
            ]
            VectorSink._report_truncation(sink, chunks, ["x" * 300, "x" * (257 if document == 0 else 10)])  # type: ignore[arg-type]
        logging.getLogger("some.library").warning("something odd\nwith a second line")
        warnings.warn("a library's odd thing", UserWarning, stacklevel=1)  # written to stderr otherwise
        during = capsys.readouterr()
    first, second = during.err.splitlines()
    assert first == "warning: something odd" and during.out == ""
    assert second.startswith("warning: ") and second.endswith("UserWarning: a library's odd thing")
    assert [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)] == consoles
    assert logging.getLogger(flow_runs.TRUNCATION_LOGGER).level == logging.NOTSET  # restored
    (summary,) = capsys.readouterr().err.splitlines()
    assert summary.startswith(
        "warning: 81 document(s) had chunks over all-MiniLM-L6-v2's limit of 256 tokens (82 chunk(s) in all)"
    ), summary


@pytest.mark.timeout(300)
def test_up_on_another_port_points_its_ui_at_that_port(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = _env(UNICHUNK_DATA_DIR=str(data_dir), PREFECT_API_URL=None, PREFECT_UI_API_URL=None)
    port = servers.free_port()
    try:
        urls = _json(_unichunk("up", "--port", str(port), "--json", env=env))
        api = f"http://127.0.0.1:{port}/api"
        assert urls["prefect_api_url"] == api and urls["started_prefect"] is True
        assert httpx.get(f"{api}/health", timeout=10).status_code == 200
        # What the UI reads to find its API: this server, not :4200.
        ui_settings = httpx.get(f"http://127.0.0.1:{port}/ui-settings", timeout=10)
        assert ui_settings.status_code == 200 and ui_settings.json()["api_url"] == api, ui_settings.text
        printed = _unichunk("up", "--port", str(port), env=env)  # reused, and the export lines
        assert printed.returncode == 0 and f"export PREFECT_API_URL={api}" in printed.stdout, _shown(printed)
    finally:
        stopped = _unichunk("down", env=env)
    assert stopped.returncode == 0 and f"http://127.0.0.1:{port} (pid" in stopped.stdout, _shown(stopped)
