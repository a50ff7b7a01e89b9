"""Runs that stop when asked: real signals sent to a real `unichunk ingest` while it embeds a batch.

The first SIGINT or SIGTERM: exit 130 or 143, the Prefect flow run Cancelled (asked of the real API), no
row left `processing`, the stores aligned with the status table, and the next run converges. A second
SIGINT: exit 130 at once, the stores still consistent (the next run converges), and in a terminal the
cursor its progress bar hid shown again. SIGKILL: the next
`unichunk status` marks the flow run Crashed. The signal is sent once the run has chunked a batch and
not written it (rows `processing`: its prepare, the embedding, runs), never after a guessed sleep; the
only time bound is a generous one on the process exiting. Ctrl-C-to-exit seconds: benchmarks/README.md.
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import httpx
import pytest
from fault_checks import assert_converged
from processes import all_ended, descendants

from unichunk.chunking.config import ChunkStrategy
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.index.generations import live_status
from unichunk.index.run import RunConfig
from unichunk.index.status import StatusStore
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings

# Two batches: every signal lands in the first batch's embedding, whose size, not the corpus's, is what
# keeps the run busy when it comes; the rest is the next run's to redo.
DOCS = 12
BATCH = 6
# The rebuild is stopped in its second batch, which it finishes: a third must be left unwritten.
REBUILD_DOCS = 24
UNICHUNK = str(Path(sys.executable).parent / "unichunk")


def _corpus(root: Path, docs: int = DOCS) -> Path:
    """`docs` documents of about 20 chunks each: one batch's embedding takes a while on a CPU."""
    root.mkdir(parents=True, exist_ok=True)
    people = ["Alice Martin", "Bruno Costa", "Chen Wei", "Dara Okafor", "Emil Novak"]
    for n in range(docs):
        sections = [
            f"## Part {p}\n\n"
            + " ".join(
                f"{people[(n + p + s) % 5]} reviewed shard {n}-{p}-{s} of the cluster in week {s}, "
                f"noting latency {n * p + s} ms and {p + s} replicas."
                for s in range(12)
            )
            for p in range(20)
        ]
        (root / f"doc_{n:03d}.md").write_text(f"# Report {n}\n\n" + "\n\n".join(sections) + "\n")
    return root


def _start(corpus: Path, log: Path, spacy_process: str = "auto") -> subprocess.Popen:
    return subprocess.Popen(
        [UNICHUNK, "ingest", str(corpus), "--batch-size", str(BATCH)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "UNICHUNK_SPACY_PROCESS": spacy_process},
    )


def _worker_started(proc: subprocess.Popen, spacy_process: str) -> list[int]:
    """The run's child processes, once spaCy's worker is among them where it was asked for (the graph
    sink starts it with its first prepare, beside the embedding)."""
    deadline = time.monotonic() + 120
    while spacy_process == "worker" and not descendants(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, "spaCy's worker never started"
        time.sleep(0.05)
    return descendants(proc.pid)


def _wait_embedding(status: StatusStore, proc: subprocess.Popen, log: Path) -> None:
    """Until a batch is chunked and not written (rows `processing`): its prepare is running."""
    deadline = time.monotonic() + 600
    while not status.counts().get("processing"):
        assert proc.poll() is None, f"the run ended early ({proc.returncode}): {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the run never started a batch"
        time.sleep(0.05)


def _exit(proc: subprocess.Popen, log: Path) -> int:
    try:
        return proc.wait(timeout=300)  # generous: the point is that it exits, and with which code
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the run did not exit after the signal: {log.read_text()[-3000:]}")


def _flow_run(corpus: Path) -> dict:
    """The real Prefect API's record of the CLI's ingest run of `corpus`."""
    api = os.environ["PREFECT_API_URL"]
    runs = httpx.post(f"{api}/flow_runs/filter", json={"sort": "START_TIME_DESC", "limit": 50}).json()
    found = [
        r
        for r in runs
        if ((r["parameters"].get("params") or {}).get("source") or {}).get("root") == str(corpus)
    ]
    assert found, "no flow run of this ingest"
    return found[0]


def _task_runs(flow_run_id: str) -> list[dict]:
    """(name, state_type, message) of each task run of the flow run, from the real Prefect API."""
    api = os.environ["PREFECT_API_URL"]
    found = httpx.post(
        f"{api}/task_runs/filter", json={"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200}
    ).json()
    return [
        {"name": t["name"], "state_type": t["state_type"], "message": (t["state"] or {}).get("message")}
        for t in found
    ]


def _summary_artifact(flow_run_id: str, flow_name: str = "ingest") -> str:
    """The markdown of the run's summary artifact, from the real Prefect API."""
    api = os.environ["PREFECT_API_URL"]
    found = httpx.post(
        f"{api}/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}
    ).json()
    summaries = [a["data"] for a in found if a["key"] == f"{flow_name}-summary"]
    assert summaries, f"no summary artifact: {[a['key'] for a in found]}"
    return summaries[0]


def _next_run_converges(corpus: Path, data_dir: Path) -> None:
    state = ingest(IngestParams(source=SourceParams(root=str(corpus)), batch_size=BATCH), return_state=True)
    assert state.is_completed(), state.message
    counts = live_status(SinkSettings(data_dir=data_dir)).counts()
    assert counts.get("processed") == DOCS and not counts.get("processing") and not counts.get("failed")
    assert assert_converged(data_dir)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    ("signum", "code", "spacy_process"),
    [(signal.SIGINT, 130, "inline"), (signal.SIGTERM, 143, "inline"), (signal.SIGINT, 130, "worker")],
)
def test_first_signal_mid_embedding_stops_cancelled_and_the_next_run_converges(
    fault_env, tmp_path, signum, code, spacy_process
):
    corpus = _corpus(tmp_path / "corpus")
    log = tmp_path / "ingest.log"
    proc = _start(corpus, log, spacy_process)
    status = live_status(SinkSettings(data_dir=fault_env))
    _wait_embedding(status, proc, log)
    started = _worker_started(proc, spacy_process)
    os.killpg(proc.pid, signum)
    assert _exit(proc, log) == code, log.read_text()[-3000:]
    assert all_ended(started), "spaCy's worker outlived the stopped run"
    output = log.read_text()
    assert "stopping (" in output and "stopped:" in output
    assert "terminate called" not in output

    run = _flow_run(corpus)
    assert run["state_type"] == "CANCELLED", run["state"]
    # ... and so are its stopped tasks (the embedding's prepare): not Crashed, with "Crash detected!"
    # logged as an error, in the UI's run graph beside a run that stopped as asked
    tasks = _task_runs(run["id"])
    assert not [t for t in tasks if t["state_type"] not in ("COMPLETED", "CANCELLED")], tasks
    assert [t for t in tasks if t["state_type"] == "CANCELLED"], tasks
    counts = status.counts()
    assert not counts.get("processing") and not counts.get("failed"), counts
    assert counts.get("processed", 0) < DOCS  # it did stop early
    # what the stopped run did is in the UI too: its summary, headed Cancelled, counting what it wrote
    summary = _summary_artifact(run["id"])
    assert summary.startswith(f"### ingest: Cancelled\\: stopped by {signum.name}\\: "), summary
    assert f"| processed | {counts.get('processed', 0)} (" in summary, summary
    assert_converged(fault_env)  # verify: what was written is whole, nothing half-written
    _next_run_converges(corpus, fault_env)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("spacy_process", ["inline", "worker"])
def test_second_ctrl_c_exits_at_once_and_the_stores_stay_consistent(fault_env, tmp_path, spacy_process):
    corpus = _corpus(tmp_path / "corpus")
    log = tmp_path / "ingest.log"
    proc = _start(corpus, log, spacy_process)
    status = live_status(SinkSettings(data_dir=fault_env))
    _wait_embedding(status, proc, log)
    started = _worker_started(proc, spacy_process)
    os.killpg(proc.pid, signal.SIGINT)
    while "stopping (" not in log.read_text() and proc.poll() is None:  # the first one taken: now again
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    assert _exit(proc, log) == 130, log.read_text()[-3000:]
    assert "terminate called" not in log.read_text()
    assert all_ended(started), "spaCy's worker outlived the run"
    _next_run_converges(corpus, fault_env)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_run_killed_outright_is_marked_crashed_by_the_next_status(fault_env, tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    log = tmp_path / "ingest.log"
    proc = _start(corpus, log)
    status = live_status(SinkSettings(data_dir=fault_env))
    _wait_embedding(status, proc, log)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _flow_run(corpus)["state_type"] == "RUNNING"  # what the UI showed for good before

    shown = subprocess.run([UNICHUNK, "status"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    run = _flow_run(corpus)
    assert run["state_type"] == "CRASHED", run["state"]
    assert f"pid {proc.pid}" in run["state"]["message"]
    _next_run_converges(corpus, fault_env)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_stopped_rebuild_says_how_many_documents_it_wrote(fault_env, tmp_path):
    """`unichunk rebuild` stopped by SIGTERM once it has written a batch of the new generation and embeds the
    next: exit 143, Cancelled, and its `stopped:` line counts the documents the new generation holds, as
    does the run's summary artifact (outcome `stopped`, the build pass's figures)."""
    corpus = _corpus(tmp_path / "corpus", REBUILD_DOCS)
    strategy = ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=0)
    generation = RunConfig(strategy, SinkSettings(), SINK_NAMES).generation_id
    building = StatusStore.of(SinkSettings(data_dir=fault_env, generation=generation), readonly=True)
    log = tmp_path / "rebuild.log"
    options = (
        "--batch-size",
        str(BATCH),
        "--strategy",
        "sentence",
        "--chunk-size",
        "128",
        "--chunk-overlap",
        "0",
    )
    proc = subprocess.Popen(
        [UNICHUNK, "rebuild", str(corpus), *options],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while True:  # a batch written and the next one chunked, not written (its embedding runs)
        counts = building.counts()
        if counts.get("processed") and counts.get("processing"):
            break
        assert proc.poll() is None, f"the run ended early ({proc.returncode}): {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the rebuild never got to its second batch"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    assert _exit(proc, log) == 143, log.read_text()[-3000:]

    written = building.counts().get("processed", 0)
    assert 0 < written < REBUILD_DOCS and not building.counts().get("processing")
    assert f"stopped: {written} document(s) written by this run;" in log.read_text(), log.read_text()[-3000:]
    run = _flow_run(corpus)
    assert run["state_type"] == "CANCELLED"
    summary = _summary_artifact(run["id"], "rebuild")
    assert summary.startswith(f"### rebuild {generation}: stopped"), summary
    assert f"stopped by SIGTERM\\: {written} document\\(s\\) written by this run" in summary, summary
    assert "#### rebuild" in summary and f"| processed | {written} (" in summary, summary


def _start_in_terminal(corpus: Path) -> tuple[subprocess.Popen, bytearray, threading.Thread]:
    """`unichunk ingest` on a pseudo-terminal of 80 x 24, as from a shell (so it draws its progress bar,
    which hides the cursor): the process, what it writes there, and the thread reading it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen(
        [UNICHUNK, "ingest", str(corpus), "--batch-size", str(BATCH)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    shown = bytearray()

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process and its terminal are gone
                data = b""
            if not data:
                os.close(master)
                return
            shown.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return proc, shown, reader


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_second_ctrl_c_in_a_terminal_gives_the_cursor_back(fault_env, tmp_path):
    """The progress bar hides the cursor and the second Ctrl-C exits with `os._exit`, which runs none of
    the code that shows it again: the shell was left with no cursor and its prompt after the bar."""
    corpus = _corpus(tmp_path / "corpus")
    proc, shown, reader = _start_in_terminal(corpus)
    status = live_status(SinkSettings(data_dir=fault_env))
    deadline = time.monotonic() + 600
    while not status.counts().get("processing") or b"\x1b[?25l" not in shown:  # embedding, bar drawn
        assert proc.poll() is None, f"the run ended early ({proc.returncode}): {bytes(shown[-3000:])!r}"
        assert time.monotonic() < deadline, "the run never started a batch under its bar"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    while b"stopping (" not in shown and proc.poll() is None:
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=300) == 130, bytes(shown[-3000:])
    reader.join(timeout=30)
    output = bytes(shown)
    assert output.rfind(b"\x1b[?25h") > output.rfind(b"\x1b[?25l"), output[-3000:]  # shown after hidden
    assert b"quit: " in output, output[-3000:]  # the second Ctrl-C took it, not the end of the stop
    _next_run_converges(corpus, fault_env)
