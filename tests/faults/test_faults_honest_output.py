"""What the CLI prints is what happened: data is printed literally, each failure is one line, and the exit
code says which kind of failure it was (`unichunk.deployments.cli.main`'s docstring has the codes).

Most checks run the real `unichunk` console script in a subprocess with pipes for stdout and stderr (not a
terminal, as in a log file or CI), because Prefect's console logging, which used to print tracebacks before
the CLI's own line, writes to the process's real stderr, which typer's CliRunner does not capture. The
`[vectors]` store error is made in-process (the Qdrant storage locked under a running flow, as in
`test_faults_vector_write.py`), then printed by both.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import servers
from fault_checks import make_corpus
from typer.testing import CliRunner

from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import default_source_name
from unichunk.deployments.cli.main import app
from unichunk.engine import batches as pipeline
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import close_all_sinks, get_sinks
from unichunk.tasks.sink_io import write_sink

UNICHUNK = str(Path(sys.executable).parent / "unichunk")
HOSTILE = "[red]x[bold] y.txt"  # Rich markup would print it as "x y.txt"
NOISE = ("Traceback", "| ERROR", "| WARNING", "Flow run", "Encountered exception", "Finished in state")


def _unichunk(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The console script, stdout and stderr piped (not a terminal), in the test's environment + `env`."""
    return subprocess.run(
        [UNICHUNK, *args],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _shown(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def _assert_quiet(result: subprocess.CompletedProcess[str]) -> None:
    """None of Prefect's console logging (its tracebacks, its `| ERROR |` lines) reached the terminal."""
    for noise in NOISE:
        assert noise not in result.stdout + result.stderr, _shown(result)


def _free_url(scheme: str, suffix: str = "") -> str:
    return f"{scheme}://127.0.0.1:{servers.free_port()}{suffix}"


def test_a_hostile_file_name_and_its_error_print_verbatim(fault_env: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 2)
    (corpus / HOSTILE).write_bytes(b"\xc3\x28 not utf-8 \xff")
    document = derive_document_id(source_system=default_source_name(corpus), source_id=HOSTILE)

    ingested = _unichunk("ingest", str(corpus))
    assert ingested.returncode == 1, _shown(ingested)  # a document failed
    row = live_status(SinkSettings(data_dir=fault_env)).get(document)
    assert row is not None and row.state == "failed" and row.error and HOSTILE in row.error
    lines = ingested.stdout.splitlines()
    assert lines[0].startswith("ingest: 3 listed, 2 processed") and "1 failed" in lines[0], _shown(ingested)
    assert lines[1:] == [f"  failed  {HOSTILE}: {row.error}"], _shown(ingested)  # one line, the whole error
    assert ingested.stderr.strip() == "", _shown(ingested)
    _assert_quiet(ingested)

    expected = f"  failed  {HOSTILE} ({document}): {row.error}"
    status = _unichunk("status", "--failed")
    assert status.returncode == 0, _shown(status)
    assert expected in status.stdout.splitlines(), _shown(status)
    assert HOSTILE in status.stdout.replace("│", "|")  # in the table too, unmangled
    in_process = CliRunner().invoke(app, ["status", "--failed"])
    assert in_process.exit_code == 0 and expected in in_process.output.splitlines(), in_process.output

    # Unchanged since it failed: reported, not retried, as a warning line naming it as it is.
    again = _unichunk("ingest", str(corpus))
    assert again.returncode == 0, _shown(again)
    assert "1 known unreadable" in again.stdout
    (warning,) = again.stderr.splitlines()
    assert warning.startswith("warning: 1 known unreadable file(s)") and warning.endswith(HOSTILE), warning


def test_a_hit_whose_text_holds_terminal_controls_prints_them_literally(
    fault_env: Path, tmp_path: Path
) -> None:
    """A document's text reaches the terminal in `search`'s preview: its ESC sequences (here: clear the
    screen, turn the text red) and bell are written as `\\x1b[2J` and `\\x07`, never sent to the terminal."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "alert.txt").write_bytes(
        b"Pager alert: \x1b[2J\x1b[31mdisk quota\x1b[0m exceeded on the \x07 host."
    )
    ingested = _unichunk("ingest", str(corpus))
    assert ingested.returncode == 0, _shown(ingested)

    found = _unichunk("search", "disk quota exceeded", "--mode", "keywords")
    assert found.returncode == 0, _shown(found)
    assert "\x1b" not in found.stdout and "\x07" not in found.stdout, _shown(found)
    assert "Pager alert: \\x1b[2J\\x1b[31mdisk quota\\x1b[0m exceeded on the \\x07 host." in found.stdout


def test_a_store_error_keeps_its_sink_name(fault_env: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("UNICHUNK_VECTOR_ENGINE", "local")  # the failure is injected into local mode's SQLite
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 2)
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(corpus)]).exit_code == 0
    (corpus / "doc_0000.txt").write_text("Report 0, edited: Alice Martin moved the cluster to Lisbon.\n")
    # The flow shares this process's open Qdrant client; a write transaction held on its storage makes
    # every point write fail: the document fails with a `write[vectors] failed ...` error.
    sinks = get_sinks(SINK_NAMES, reading_settings(SinkSettings()))
    storage = next(sinks["vectors"].settings.qdrant_path.rglob("storage.sqlite"))
    monkeypatch.setattr(pipeline, "write_sink", write_sink.with_options(retries=1, retry_delay_seconds=0))
    blocker = sqlite3.connect(storage, timeout=0, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        result = runner.invoke(app, ["ingest", str(corpus)])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        close_all_sinks()
    assert result.exit_code == 1, result.output
    (row,) = live_status(SinkSettings(data_dir=fault_env)).rows(state="failed")
    assert row.error and "[vectors]" in row.error, row.error
    assert f"  failed  doc_0000.txt: {row.error}" in result.output.splitlines(), result.output

    status = _unichunk("status", "--failed")
    assert status.returncode == 0, _shown(status)
    assert f"  failed  doc_0000.txt ({row.document_id}): {row.error}" in status.stdout.splitlines()


@pytest.mark.timeout(600)
def test_exit_codes_tell_usage_from_infrastructure_each_in_one_line(
    fault_env: Path, tmp_path: Path, prefect_api_url: str
) -> None:
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 2)
    first = _unichunk("ingest", str(corpus))
    assert first.returncode == 0, _shown(first)
    assert first.stderr.strip() == "" and "Prefect:" not in first.stdout  # PREFECT_API_URL is set: used

    # Flow-run logs still reach the Prefect API at INFO (the UI), though not the terminal.
    runs = httpx.post(
        f"{prefect_api_url}/flow_runs/filter", json={"sort": "START_TIME_DESC", "limit": 50}, timeout=30
    ).json()
    (run,) = [
        r
        for r in runs
        if ((r["parameters"].get("params") or {}).get("source") or {}).get("root") == str(corpus)
    ]
    logs = httpx.post(
        f"{prefect_api_url}/logs/filter",
        json={"logs": {"flow_run_id": {"any_": [run["id"]]}, "level": {"ge_": 20}}},
        timeout=30,
    ).json()
    assert any(log["level"] == 20 and log["message"].startswith("ingest: 2 listed") for log in logs), logs

    def one_error_line(result: subprocess.CompletedProcess[str], code: int, start: str) -> None:
        assert result.returncode == code, _shown(result)
        assert result.stdout.strip() == "", _shown(result)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"error: {start}"), _shown(result)
        _assert_quiet(result)

    # 2: the command cannot run as given.
    started = time.monotonic()
    mismatch = _unichunk("ingest", str(corpus), "--strategy", "sentence")
    one_error_line(mismatch, 2, "these settings are not those of the live index generation")
    assert "unichunk rebuild" in mismatch.stderr
    one_error_line(_unichunk("generations", "switch", "g0000000000"), 2, "no generation g0000000000")
    usage = _unichunk("ingest", "--no-such-option")
    assert usage.returncode == 2 and "No such option" in usage.stderr, _shown(usage)

    # 3: infrastructure. A graph server that does not answer, named as the graph store (a new document: a
    # run with nothing to write opens no store, so it would not notice).
    make_corpus(corpus, 1, start=2)
    graph_down = _unichunk("ingest", str(corpus), UNICHUNK_FALKORDB_URL=_free_url("redis"))
    one_error_line(graph_down, 3, "[graph] cannot open the store: ConnectionError:")
    # A Prefect API that does not answer.
    prefect_down = _unichunk("ingest", str(corpus), PREFECT_API_URL=_free_url("http", "/api"))
    one_error_line(prefect_down, 3, "cannot reach the Prefect API at")
    print(f"exit-code runs: {time.monotonic() - started:.0f} s")

    # UNICHUNK_DEBUG=1 shows the traceback instead.
    debug = _unichunk("ingest", str(corpus), "--strategy", "sentence", UNICHUNK_DEBUG="1")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "GenerationMismatch" in debug.stderr


@pytest.mark.timeout(600)
def test_ctrl_c_exits_130_in_one_line_and_the_next_run_finishes(fault_env: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 60)
    status = live_status(SinkSettings(data_dir=fault_env))
    log = tmp_path / "interrupted.log"
    proc = subprocess.Popen(
        [UNICHUNK, "ingest", str(corpus), "--batch-size", "5"],
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while status.counts()["processed"] < 10:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    printed = log.read_text()
    lines = printed.strip().splitlines()  # one line when the stop is taken, one when the run has stopped
    assert code == 130 and lines[-2].startswith("stopping (Ctrl-C)") and lines[-1].startswith("stopped: "), (
        printed
    )
    assert not any(noise in printed for noise in NOISE), printed
    rerun = _unichunk("ingest", str(corpus))
    assert rerun.returncode == 0 and ", 0 failed" in rerun.stdout, _shown(rerun)
