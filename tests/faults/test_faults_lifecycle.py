"""Processes end with their job: what each command starts is either gone when it ends, or recorded,
reported, reused by the next command and stopped by `unichunk down`; `unichunk serve` stops within 10 s of
SIGTERM or SIGINT, also mid-run, and the next run completes what the stopped one left.

Everything runs the real `unichunk` console script in its own session. Processes are attributed by their
environment: every process a command starts inherits its UNICHUNK_DATA_DIR (a fresh one per test), so
"what survives" is every process whose environment names the test's data dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import servers
from fault_checks import assert_converged, make_corpus
from served import FINAL, Tee, run_state, serve_process, start_run, stop_process, tail, wait

from unichunk.deployments.serving.serve import DEPLOYMENT_NAMES
from unichunk.index.generations import live_status
from unichunk.index.status import StatusStore
from unichunk.local_stack import STATE_FILE, UP_PORT, down, stack_dir
from unichunk.sinks.config import SinkSettings

UNICHUNK = str(Path(sys.executable).parent / "unichunk")
DOCS = 120
# Serve stopped mid-run: stopped once a batch of 10 is written and the next is being written, so about 4
# batches are left, far more than its run gets done in the time serve's SIGTERM takes to stop it.
STOPPED_DOCS = 60
STOP_WITHIN = 10.0


_env = servers.environment_with


def _unichunk(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UNICHUNK, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
    )


def _shown(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def _live_processes() -> Iterator[tuple[int, int, Path]]:
    """(pid, process group, its /proc folder) of every process but zombies (dead, awaiting their parent)
    and processes that ended while being read."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z":
            yield int(proc.name), int(stat[2]), proc


def _command_line(proc: Path) -> str:
    with contextlib.suppress(OSError):
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    return "(ended)"


def _processes_of(data_dir: Path, besides: int | None = None) -> dict[int, tuple[int, str]]:
    """pid -> (process group, command line) of every process started with `data_dir` (in its environment,
    or as its working directory: redis-server rewrites its environment block for its process title and
    works in `<data dir>/falkordb`), but this one and the process group `besides`."""
    marker = f"UNICHUNK_DATA_DIR={data_dir}".encode()
    found = {}
    for pid, group, proc in _live_processes():
        if pid == os.getpid() or group == besides:
            continue
        with contextlib.suppress(OSError):
            ours = marker in (proc / "environ").read_bytes().split(b"\0")
            if ours or (proc / "cwd").resolve().is_relative_to(data_dir.resolve()):
                found[pid] = (group, _command_line(proc))
    return found


def _group_members(group: int) -> dict[int, str]:
    """pid -> command line of the live processes of a process group."""
    return {pid: _command_line(proc) for pid, in_group, proc in _live_processes() if in_group == group}


def _recorded(data_dir: Path) -> dict[str, Any]:
    return json.loads((stack_dir(data_dir) / STATE_FILE).read_text())


def _wait_gone(data_dir: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := _processes_of(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == {}, f"still running: {left}"


def _wait_processed(status: StatusStore, proc: subprocess.Popen, at_least: int, log: Path) -> None:
    deadline = time.monotonic() + 300
    while status.counts()["processed"] < at_least:
        assert proc.poll() is None, f"the run ended early ({proc.returncode}): {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"the run made no progress: {log.read_text()[-3000:]}"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_ingest_leaves_only_the_recorded_server_which_the_next_reuses_and_down_stops(
    fault_env: Path, tmp_path: Path
) -> None:
    env = _env(PREFECT_API_URL=None)  # no Prefect server named: the data dir's local one is used
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    status = live_status(SinkSettings(data_dir=fault_env))
    log = tmp_path / "killed.log"
    proc = subprocess.Popen(
        [UNICHUNK, "ingest", str(corpus), "--batch-size", "10"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        try:
            _wait_processed(status, proc, 20, log)
        finally:
            os.kill(proc.pid, signal.SIGKILL)  # the CLI alone, as `kill -9 <pid>` would: no cleanup
            proc.wait()
        assert "Prefect: local server http://127.0.0.1:" in log.read_text(), log.read_text()
        server = _recorded(fault_env)
        pid, url = server["pid"], server["api_url"].removesuffix("/api")
        assert not url.endswith(f":{UP_PORT}")

        # Survivors: exactly the recorded server (its process group), nothing unaccounted.
        time.sleep(1)
        survivors = _processes_of(fault_env)
        assert survivors and {group for group, _ in survivors.values()} == {pid}, survivors
        assert "prefect server start" in survivors[pid][1], survivors
        assert httpx.get(f"{url}/api/health", timeout=5).status_code == 200

        done = status.counts()["processed"]
        rerun = _unichunk("ingest", str(corpus), "--batch-size", "20", env=env)
        assert rerun.returncode == 0, _shown(rerun)
        assert f"Prefect: reusing local server {url} (`unichunk down` stops it)" in rerun.stderr, _shown(
            rerun
        )
        assert f"{done} unchanged" in rerun.stdout and ", 0 failed" in rerun.stdout, _shown(rerun)
        assert set(_processes_of(fault_env)) == set(survivors)  # the command started nothing that stayed
    finally:
        stopped = _unichunk("down", env=env)
    assert stopped.returncode == 0, _shown(stopped)
    assert f"Prefect server  {url} (pid {pid}) stopped" in stopped.stdout, _shown(stopped)
    _wait_gone(fault_env)
    assert not (stack_dir(fault_env) / STATE_FILE).exists()
    assert len(assert_converged(fault_env)) == DOCS


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_says_what_it_left_running_and_down_stops_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # The defaults a new user has: no Prefect server, no FalkorDB named, so the demo starts both.
    env = _env(
        UNICHUNK_DATA_DIR=str(data_dir),
        PREFECT_API_URL=None,
        UNICHUNK_FALKORDB_URL=None,
        UNICHUNK_GRAPH_NAME=None,
        PUSHGATEWAY_URL=None,
    )
    try:
        demo = _unichunk("demo", env=env)
        assert demo.returncode == 0, _shown(demo)
        lines = demo.stdout.splitlines()
        left = lines[lines.index(next(line for line in lines if "left running" in line)) + 1 :]
        assert len(left) == 3 and left[2] == "`unichunk down` stops them.", _shown(demo)
        falkordb = left[0].split()[1]
        assert left[0] == f"FalkorDB {falkordb} (embedded, data in {data_dir.resolve() / 'falkordb'})"
        prefect = _recorded(data_dir)
        url = prefect["api_url"].removesuffix("/api")
        assert left[1] == f"Prefect server {url} (pid {prefect['pid']})"
        assert redis.Redis.from_url(falkordb, socket_connect_timeout=3).ping()
        assert httpx.get(f"{url}/api/health", timeout=5).status_code == 200
        running = _processes_of(data_dir)
        assert len({group for group, _ in running.values()}) == 2, running  # the two servers, nothing else
    finally:
        stopped = _unichunk("down", env=env)
    assert stopped.returncode == 0, _shown(stopped)
    assert stopped.stdout.splitlines() == [
        f"Prefect server  {url} (pid {prefect['pid']}) stopped",
        f"FalkorDB        {falkordb} stopped",
    ], _shown(stopped)
    _wait_gone(data_dir)
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(falkordb, socket_connect_timeout=2).ping()
    again = _unichunk("down", env=env)
    assert again.stdout.splitlines() == ["Prefect server  not running", "FalkorDB        not running"]
    down(data_dir, echo=False)  # nothing left either way


# --- unichunk serve -------------------------------------------------------------------------------------


@pytest.fixture
def own_prefect(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A Prefect server of this test alone: the served deployments' runs must not mix with other tests'."""
    try:
        server = servers.start_prefect(tmp_path / "own-prefect", reuse=False)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    yield server
    server.stop()


class Served:
    """`unichunk serve` in its own session, its deployments on `api`, its receiver on `port`."""

    def __init__(self, tmp_path: Path, api: str) -> None:
        self.api, self.port, self.log = api, servers.free_port(), tmp_path / "serve.log"
        self.starts = 0
        self.env = _env(
            PREFECT_API_URL=api,
            UNICHUNK_METRICS_PORT="0",
            PREFECT_RUNNER_POLL_FREQUENCY="1",
            PUSHGATEWAY_URL=None,
        )
        self.cwd = tmp_path
        self.process: subprocess.Popen | None = None

    def start(self, tee: bool = False) -> str:
        """Start and wait until its deployments are registered and its receiver answers; the `ingest`
        deployment's id. Each start logs to a file of its own: the line that says it is serving must be
        this start's, not an earlier one's (which let a signal land while it still registered). `tee`:
        its output goes through a pipe (`self.tee`), as `unichunk serve 2>&1 | tee LOG` does."""
        self.starts += 1
        self.log = self.cwd / f"serve-{self.starts}.log"
        self.tee = Tee(self.log) if tee else None
        self.process = serve_process(
            [UNICHUNK, "serve", "--port", str(self.port)],
            self.env,
            self.log,
            self.cwd,
            output=self.tee.write if self.tee else None,
        )
        if self.tee:
            os.close(self.tee.write)  # serve holds the pipe's only writing end

        def ready() -> str | None:
            assert self.process is not None and self.process.poll() is None, (
                f"serve exited:\n{tail(self.log)}"
            )
            try:
                health = httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code
                deployment = httpx.get(f"{self.api}/deployments/name/ingest/ingest", timeout=5)
            except httpx.HTTPError:
                return None
            serving = f"unichunk serve: serving {len(DEPLOYMENT_NAMES)} deployment(s)" in tail(self.log)
            return (
                deployment.json()["id"]
                if health == 200 and deployment.status_code == 200 and serving
                else None
            )

        return wait("serve ready (deployments registered, receiver healthy, serving)", ready, 180, self.log)

    def stop_with(self, signum: int) -> float:
        """Send `signum` to the serve process alone; seconds until it exited (asserted 0 and < 10 s)."""
        assert self.process is not None
        os.kill(self.process.pid, signum)
        sent = time.monotonic()
        try:
            code = self.process.wait(timeout=STOP_WITHIN + 20)
        except subprocess.TimeoutExpired:
            stop_process(self.process)
            raise AssertionError(f"serve still running 30 s after {signum}:\n{tail(self.log)}") from None
        took = time.monotonic() - sent
        assert code == 0, f"serve exited with {code}:\n{tail(self.log)}"
        assert took < STOP_WITHIN, f"serve took {took:.1f} s to stop after {signum}:\n{tail(self.log)}"
        # Its flow-run processes (its process group) go too, within the same 10 s of the signal.
        survivors = _group_members(self.process.pid)
        while survivors and time.monotonic() - sent < STOP_WITHIN:
            time.sleep(0.1)
            survivors = _group_members(self.process.pid)
        assert not survivors, f"still running {time.monotonic() - sent:.1f} s after {signum}: {survivors}"
        return took

    def close(self) -> None:
        if self.process is not None:
            stop_process(self.process)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_serve_stops_within_10_s_of_sigterm_and_of_sigint(
    fault_env: Path, tmp_path: Path, own_prefect: servers.Server
) -> None:
    served = Served(tmp_path, own_prefect.url)
    took = {}
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            served.start()
            took[signum.name] = round(served.stop_with(signum), 1)
    finally:
        served.close()
    assert _processes_of(fault_env, besides=own_prefect.process.pid) == {}
    print(f"serve stopped in {took}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_serve_whose_output_pipe_closed_still_stops_on_sigint(
    fault_env: Path, tmp_path: Path, own_prefect: servers.Server
) -> None:
    """`unichunk serve 2>&1 | tee serve.log`, then Ctrl-C: the terminal's SIGINT ends `tee` too, and
    serve's line announcing the stop fails (EPIPE). The stop must happen all the same (that failure once
    left serve running, deaf to every later SIGINT and SIGTERM)."""
    served = Served(tmp_path, own_prefect.url)
    try:
        served.start(tee=True)
        assert served.tee is not None
        served.tee.cut()
        served.stop_with(signal.SIGINT)
    finally:
        served.close()


def _corpus_parameters(tmp_path: Path, docs: int = DOCS) -> dict[str, Any]:
    """An `ingest` run's parameters over a fresh corpus of `docs` documents, in batches of 10."""
    corpus = tmp_path / "corpus"
    make_corpus(corpus, docs)
    return {"params": {"source": {"kind": "directory", "root": str(corpus)}, "batch_size": 10}}


def _run_until_mid_batch(
    served: Served, deployment: str, parameters: dict[str, Any], status: StatusStore
) -> str:
    """Start a served run and wait until it has written a batch and is writing the next; its id."""
    run = start_run(served.api, deployment, parameters)

    def mid_batch() -> bool:
        state = run_state(served.api, run)
        assert state not in FINAL, f"the run ended ({state}) before the stop:\n{tail(served.log)}"
        counts = status.counts()
        return state == "RUNNING" and counts["processed"] >= 10 and counts["processing"] > 0

    wait("the run to be writing a batch", mid_batch, 300, served.log)
    return run


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_serve_stopped_mid_run_exits_within_10_s_and_the_next_run_completes(
    fault_env: Path, tmp_path: Path, own_prefect: servers.Server
) -> None:
    api, own_server = own_prefect.url, own_prefect.process.pid
    parameters = _corpus_parameters(tmp_path, STOPPED_DOCS)
    status = live_status(SinkSettings(data_dir=fault_env))
    served = Served(tmp_path, api)
    try:
        deployment = served.start()
        first = _run_until_mid_batch(served, deployment, parameters, status)
        took = served.stop_with(signal.SIGTERM)
        assert _processes_of(fault_env, besides=own_server) == {}, "a flow-run process outlived serve"
        # The interrupted run is recorded as ended, not left Running for ever.
        assert run_state(api, first) in ("CANCELLED", "CRASHED", "FAILED")
        rows = {r.document_id: r for r in status.rows()}
        done = {d: r.last_success_at for d, r in rows.items() if r.state == "processed"}
        in_flight = {d for d, r in rows.items() if r.state == "processing"}
        assert 10 <= len(done) < STOPPED_DOCS and {r.state for r in rows.values()} <= {
            "processed",
            "processing",
            "pending",
        }

        deployment = served.start()
        second = start_run(api, deployment, parameters)
        final = wait(
            "the next run to finish",
            lambda: (s := run_state(api, second)) in FINAL and s,
            600,
            served.log,
        )
        assert final == "COMPLETED", f"next run {final}:\n{tail(served.log)}"
    finally:
        served.close()
    rows = {r.document_id: r for r in status.rows()}
    assert len(rows) == STOPPED_DOCS and {r.state for r in rows.values()} == {"processed"}
    assert {d: rows[d].last_success_at for d in done} == done  # what was done is not redone
    assert all(rows[d].last_success_at for d in in_flight)  # what was in flight is done now
    assert len(assert_converged(fault_env)) == STOPPED_DOCS
    print(f"stopped mid-run in {took:.1f} s with {len(done)} done, {len(in_flight)} in flight")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_served_run_cancelled_from_prefect_says_so_and_the_next_run_converges(
    fault_env: Path, tmp_path: Path, own_prefect: servers.Server
) -> None:
    """Cancel in the Prefect UI sets the run Cancelling; serve's runner then sends its process SIGTERM.
    The run ends Cancelled within seconds, its message saying it was cancelled from Prefect (not a bare
    signal name), with what it wrote counted, and the next run completes the rest."""
    api = own_prefect.url
    parameters = _corpus_parameters(tmp_path)
    served = Served(tmp_path, api)
    try:
        deployment = served.start()
        first = _run_until_mid_batch(
            served, deployment, parameters, live_status(SinkSettings(data_dir=fault_env))
        )
        response = httpx.post(  # what the UI's Cancel button sends
            f"{api}/flow_runs/{first}/set_state",
            json={"state": {"type": "CANCELLING", "name": "Cancelling"}},
            timeout=15,
        )
        assert response.json()["status"] == "ACCEPT", response.text
        wait("the run to end", lambda: run_state(api, first) in FINAL, 120, served.log)
        state = httpx.get(f"{api}/flow_runs/{first}", timeout=10).json()["state"]
        assert state["type"] == "CANCELLED", state
        assert state["message"].startswith("cancelled from Prefect: "), state["message"]
        assert "document(s) written by this run" in state["message"], state["message"]

        second = start_run(api, deployment, parameters)
        final = wait(
            "the next run to finish", lambda: (s := run_state(api, second)) in FINAL and s, 600, served.log
        )
        assert final == "COMPLETED", f"next run {final}:\n{tail(served.log)}"
    finally:
        served.close()
    assert len(assert_converged(fault_env)) == DOCS
