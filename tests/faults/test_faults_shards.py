"""One run split across workers, on real servers: a Prefect server, a process work pool with the
`ingest-shard` deployment registered from prefect.yaml (`prefect deploy`), three `unichunk worker`
processes polling it, FalkorDB, the keyword index (Qdrant cannot run here; the vector sink's server path
is the same client code as its local mode, and the compose stack is where it runs).

Proves:
- `ingest` with shards=4 over 200 documents, in server mode (UNICHUNK_DATABASE_URL): every document is processed exactly once (the workers'
  /metrics count 200 processings in all and as many chunks written per sink as the index holds, while all
  200 documents end processed: a document processed twice would push the count past 200); the shards
  ran on more than one worker; the chunk IDs are a single-process run's; the stores agree with the status
  table and hold nothing twice; the parent's summary adds the shards' up, and a file that cannot be read
  fails alone, in its shard, and fails the parent naming it; no record is left under the data dir.
- A worker SIGKILLed (with its flow-run processes: a lost machine) while its shard of a `reindex` runs:
  the parent sees the shard's process gone, marks that run Crashed, starts the shard again alone, another
  worker finishes it; nothing is stored twice; the reindex's alignment check, run once after the shards,
  passes.
- SIGTERM to a shard run's process (its worker cancelling it or stopping): the run stops between batches and
  ends Cancelled with what it wrote, not Crashed; the parent starts the shard again; nothing is stored twice.
- Stopping the parent (Ctrl-C on `unichunk ingest --shards 3`, whose handler only asks the run to stop;
  a KeyboardInterrupt in a CLI-style run; the `on_cancellation` hook a worker runs after cancelling a
  parent) cancels its shard runs; a run in shards without the deployment fails at once, saying what to
  start.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import servers
from fault_checks import duplicates, held, make_corpus
from processes import descendants, parent_of
from served import stop_process, tail, wait

from unichunk.chunking.sources import DirectorySource
from unichunk.engine.params import IngestParams, IngestSummary, SourceParams
from unichunk.engine.shards import SHARD_DEPLOYMENT, ShardsUnavailable, cancel_shard_runs
from unichunk.flows.ingest import ingest
from unichunk.flows.reindex import reindex
from unichunk.index.generations import live_status
from unichunk.index.shard_records import ShardRecords
from unichunk.index.shards import split
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import close_all_sinks

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SINKS = ["keywords", "graph"]
DOCS = 200
# Documents of the sharded runs no worker takes: a document's shard is a hash of its ID, which names the
# corpus's absolute path, so a corpus of 20 left one of 3 shards empty (11, 9, 0) about once in a thousand
# runs, and the parent then made 2 shard runs where these tests wait for 3; with 60, about once in 1e10.
UNSTARTED_DOCS = 60
WORKERS = 3
START_TIMEOUT = 120.0


def _api(prefect_api_url: str, method: str, path: str, body: object = None) -> object:
    response = httpx.request(method, f"{prefect_api_url}{path}", json=body, timeout=30)
    response.raise_for_status()
    return response.json() if response.content else None


@pytest.fixture(scope="module")
def shard_pool(prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A process work pool of this module's own, with `ingest-shard` deployed on it by `prefect deploy`
    from prefect.yaml, as an operator does (deleted after)."""
    pool = f"shards-{uuid.uuid4().hex[:8]}"
    _api(prefect_api_url, "POST", "/work_pools/", {"name": pool, "type": "process"})
    log = tmp_path_factory.mktemp("deploy") / "deploy.log"
    env = servers.environment_with(PREFECT_API_URL=prefect_api_url)
    done = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "ingest-shard", "--pool", pool],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, log.read_text()[-3000:]
    deployment = _api(prefect_api_url, "GET", f"/deployments/name/{SHARD_DEPLOYMENT}")
    assert deployment["work_pool_name"] == pool
    yield pool
    httpx.delete(f"{prefect_api_url}/deployments/{deployment['id']}", timeout=30)
    httpx.delete(f"{prefect_api_url}/work_pools/{pool}", timeout=30)


class Worker:
    """One `unichunk worker` process (its own session), its /metrics port and log."""

    def __init__(self, name: str, pool: str, log: Path) -> None:
        self.name, self.log = name, log
        self.port = servers.free_port()
        env = servers.environment_with(
            PREFECT_WORKER_QUERY_SECONDS="1",  # poll every second, not every 10 s
            PROMETHEUS_MULTIPROC_DIR=None,  # each worker its own directory
        )
        command = [str(BIN / "unichunk"), "worker", "--pool", pool, "--limit", "1", "--name", name]
        self.process = subprocess.Popen(
            [*command, "--metrics-port", str(self.port)],
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def metrics(self) -> dict[str, float]:
        """`unichunk_*_total` samples of its /metrics, by sample line name and labels."""
        text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10).text
        found = {}
        for line in text.splitlines():
            if line.startswith("unichunk_") and "_total{" in line:
                name, value = line.rsplit(" ", 1)
                found[name] = float(value)
        return found

    def kill_tree(self) -> None:
        """SIGKILL the worker and every process below it (its flow runs run in sessions of their own):
        what a lost machine looks like."""
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()


@contextlib.contextmanager
def _three_workers(pool: str, prefect_api_url: str, tmp_path: Path) -> Iterator[list[Worker]]:
    """Three `unichunk worker`s on `pool`, with this test's environment (data dir, graph, records), each
    running one flow run at a time; stopped (or what is left of them killed) after."""
    started = [
        Worker(f"w{n}-{uuid.uuid4().hex[:6]}", pool, tmp_path / f"worker{n}.log") for n in range(WORKERS)
    ]
    try:
        for worker in started:
            wait(f"{worker.name}'s /metrics", lambda w=worker: _answers(w), START_TIMEOUT, worker.log)

        def online() -> bool:
            try:
                found = _api(prefect_api_url, "POST", f"/work_pools/{pool}/workers/filter", {})
            except httpx.TimeoutException:  # the server can stall while three workers start on 2 cores:
                return False  # a slow answer is "not yet", and `wait`'s deadline still bounds the whole
            names = {w["name"] for w in found if w["status"] == "ONLINE"}
            return {w.name for w in started} <= names

        wait("the workers to poll the pool", online, START_TIMEOUT, started[0].log)
        yield started
    finally:
        for worker in started:
            stop_process(worker.process)
            with contextlib.suppress(ProcessLookupError):  # flow runs it left in their own sessions
                for pid in descendants(worker.process.pid):
                    os.kill(pid, signal.SIGKILL)
        close_all_sinks()


@pytest.fixture
def workers(shard_pool: str, prefect_api_url: str, fault_env: Path, tmp_path: Path) -> Iterator[list[Worker]]:
    """Three workers on the embedded records (SQLite files in the test's data dir, shared on this machine)."""
    with _three_workers(shard_pool, prefect_api_url, tmp_path) as started:
        yield started


@pytest.fixture
def server_mode_workers(
    shard_pool: str, prefect_api_url: str, fault_env: Path, server_records: str, tmp_path: Path
) -> Iterator[list[Worker]]:
    """Three workers in server mode: UNICHUNK_DATABASE_URL names a fresh PostgreSQL database, as workers on
    several machines would share it."""
    with _three_workers(shard_pool, prefect_api_url, tmp_path) as started:
        yield started


def _answers(worker: Worker) -> bool:
    if worker.process.poll() is not None:
        raise AssertionError(f"{worker.name} exited: {tail(worker.log)}")
    try:
        return bool(worker.metrics())
    except httpx.HTTPError:
        return False


def _single_process_chunk_ids(corpus: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The chunk IDs a run on its own (shards=1) stores for `corpus` (keywords only: chunk IDs depend on
    the chunking alone), in a data dir of its own, on the embedded records."""
    with monkeypatch.context() as patch:
        patch.setenv("UNICHUNK_DATA_DIR", str(data_dir))
        patch.delenv("UNICHUNK_DATABASE_URL", raising=False)
        try:
            state = ingest(IngestParams(source=_source(corpus), sinks=["keywords"]), return_state=True)
            summary = state.result(raise_on_failure=False)
            assert isinstance(summary, IngestSummary) and summary.processed == DOCS
            return live_status(SinkSettings(data_dir=data_dir)).expected_chunk_ids()
        finally:
            close_all_sinks()


def _source(corpus: Path) -> SourceParams:
    return SourceParams(kind="directory", root=str(corpus), source_system="sharded-corpus")


def test_without_the_shard_deployment_a_sharded_run_says_what_to_start(fault_env, prefect_api_url, tmp_path):
    existing = httpx.get(f"{prefect_api_url}/deployments/name/{SHARD_DEPLOYMENT}", timeout=30)
    if existing.status_code == 200:  # left by an earlier test's `unichunk serve`, long stopped
        httpx.delete(f"{prefect_api_url}/deployments/{existing.json()['id']}", timeout=30)
    make_corpus(tmp_path / "corpus", 3)
    with pytest.raises(ShardsUnavailable, match=r"unichunk serve.*unichunk worker --pool unichunk"):
        ingest(IngestParams(source=_source(tmp_path / "corpus"), sinks=SINKS, shards=2))


def test_ingest_in_four_shards_on_three_workers_processes_each_document_once(
    server_mode_workers: list[Worker], fault_env: Path, prefect_api_url: str, tmp_path: Path, monkeypatch
) -> None:
    """In server mode, the configuration of workers on many machines (the killed-worker test below runs on
    the embedded records)."""
    workers = server_mode_workers
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    (corpus / "broken.txt").write_bytes(b"\x00\x01binary\x00" * 50)  # fails alone, in whichever shard
    before = {name: sum(_outcomes(w)[name] for w in workers) for name in ("processed", "failed")}
    params = IngestParams(source=_source(corpus), sinks=SINKS, shards=4, batch_size=16)

    state = ingest(params, return_state=True)

    summary = state.result(raise_on_failure=False)
    assert isinstance(summary, IngestSummary), summary
    assert state.is_failed() and state.message.startswith("1 document(s) failed (of 201 listed): broken.txt")
    assert (summary.listed, summary.processed) == (DOCS + 1, DOCS)
    assert [f.source_id for f in summary.failed] == ["broken.txt"]
    assert [s.attempts for s in summary.shards] == [1] * 4
    assert sorted(s.state for s in summary.shards) == ["Completed"] * 3 + ["Failed"]  # the broken file's
    assert [s.documents for s in summary.shards] == [len(p) for p in split(_listing(corpus), 4)]
    assert sum(s.processed for s in summary.shards) == DOCS
    assert _open_run_keys() == []  # the parent dropped its manifest and records

    # Exactly once: 200 processings and 1 failure in all across the workers' /metrics, and every document
    # ended processed (a document processed twice would push the sum past 200).
    rows = live_status(SinkSettings(data_dir=fault_env)).rows()
    assert len(rows) == DOCS + 1
    assert sorted(row.state for row in rows) == ["failed"] + ["processed"] * DOCS
    after = [_outcomes(w) for w in workers]
    assert sum(o["processed"] for o in after) - before["processed"] == DOCS, after
    assert sum(o["failed"] for o in after) - before["failed"] == 1, after
    assert sum(1 for o in after if o["processed"]) >= 2, f"the shards all ran on one worker: {after}"
    expected = live_status(SinkSettings(data_dir=fault_env)).expected_chunk_ids()
    for sink in SINKS:
        written = sum(w.metrics().get(f'unichunk_chunks_written_total{{sink="{sink}"}}', 0) for w in workers)
        assert written == len(expected) == summary.chunks_written[sink], sink

    # The stores agree with the status table, hold nothing twice, and hold what one process would store.
    assert held(SINKS) == dict.fromkeys(SINKS, expected) and duplicates(SINKS) == {}
    # Nothing under the data dir: every record and the keyword terms are in PostgreSQL, the graph on its server.
    assert [p for p in fault_env.rglob("*") if p.is_file()] == []
    assert expected == _single_process_chunk_ids(corpus, tmp_path / "alone", monkeypatch)


def test_a_worker_killed_mid_shard_the_parent_retries_the_shard_elsewhere(
    workers: list[Worker], fault_env: Path, prefect_api_url: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    parts = split(_listing(corpus), 2)
    status = live_status(SinkSettings(data_dir=fault_env))
    killed: list[tuple[int, str]] = []

    def kill_a_worker_mid_shard() -> None:
        """Once a shard has written a few documents and has most still to do, kill its worker."""
        records = ShardRecords.of(SinkSettings())
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            for key in _open_run_keys():
                for shard, record in records.records(key).items():
                    if record.process is None:
                        continue
                    ids = [item.document_id for item in parts[shard]]
                    done = sum(1 for row in status.get_many(ids).values() if row.state == "processed")
                    if 4 <= done < len(ids) // 2:
                        worker = next(w for w in workers if _runs_under(record.process.pid, w))
                        worker.kill_tree()
                        killed.append((shard, worker.name))
                        return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_a_worker_mid_shard, daemon=True)
    killer.start()
    summary = reindex(IngestParams(source=_source(corpus), sinks=SINKS, shards=2, batch_size=4))
    killer.join(timeout=5)

    assert killed, "no shard was caught mid-way (it finished before the killer saw it)"
    shard, _ = killed[0]
    assert isinstance(summary, IngestSummary), summary
    assert summary.failed == [] and [s.state for s in summary.shards] == ["Completed", "Completed"]
    assert [s.attempts for s in summary.shards] == [2 if n == shard else 1 for n in range(2)]
    assert summary.shards[shard].flow_run == f"ingest-shard · {shard + 1}/2 (attempt 2)"
    lost = [r for r in _shard_runs(prefect_api_url) if r["state"]["type"] == "CRASHED"]
    assert [r["name"] for r in lost] == [f"ingest-shard · {shard + 1}/2"]
    assert "is gone: its worker stopped or died" in lost[0]["state"]["message"]

    # Every document stored once, and the alignment check the reindex ran after its shards passed.
    rows = live_status(SinkSettings(data_dir=fault_env)).rows()
    assert len(rows) == DOCS and {row.state for row in rows} == {"processed"}
    assert summary.alignment is not None and summary.alignment["ok"], summary.alignment
    expected = live_status(SinkSettings(data_dir=fault_env)).expected_chunk_ids()
    assert held(SINKS) == dict.fromkeys(SINKS, expected) and duplicates(SINKS) == {}


def test_a_shard_run_sent_sigterm_stops_cancelled_and_its_parent_retries_it(
    workers: list[Worker], fault_env: Path, prefect_api_url: str, tmp_path: Path
) -> None:
    """SIGTERM to a shard run's own process (what its worker sends when the run is cancelled or the worker
    stops) while it has documents left: the run stops between batches, ends Cancelled saying what it wrote
    (not Crashed, as Prefect's own handler would leave it), its worker lives on, its leases are released,
    and the parent starts the shard again; every document ends stored once."""
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    parts = split(_listing(corpus), 2)
    status = live_status(SinkSettings(data_dir=fault_env))
    stopped: list[tuple[int, int]] = []

    def stop_a_shard_mid_way() -> None:
        records = ShardRecords.of(SinkSettings())
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not stopped:
            for key in _open_run_keys():
                for shard, record in records.records(key).items():
                    if record.process is None:
                        continue
                    ids = [item.document_id for item in parts[shard]]
                    done = sum(1 for row in status.get_many(ids).values() if row.state == "processed")
                    if 4 <= done < len(ids) // 2:
                        os.kill(record.process.pid, signal.SIGTERM)
                        stopped.append((shard, record.process.pid))
                        return
            time.sleep(0.1)

    stopper = threading.Thread(target=stop_a_shard_mid_way, daemon=True)
    stopper.start()
    # a reindex, as above: the next test reads the latest `ingest` parent's shard runs
    summary = reindex(IngestParams(source=_source(corpus), sinks=SINKS, shards=2, batch_size=4))
    stopper.join(timeout=5)

    assert stopped, "no shard was caught mid-way (it finished before the signal was sent)"
    shard, _ = stopped[0]
    assert isinstance(summary, IngestSummary), summary
    assert summary.failed == [] and [s.attempts for s in summary.shards] == [
        2 if n == shard else 1 for n in range(2)
    ]
    runs = _shard_runs(prefect_api_url)
    assert not [r for r in runs if r["state"]["type"] == "CRASHED"], runs
    first = [r for r in runs if r["name"] == f"ingest-shard · {shard + 1}/2"]
    assert [r["state"]["type"] for r in first] == ["CANCELLED"], first
    said = re.fullmatch(
        r"stopped by SIGTERM: (\d+) document\(s\) written by this run; any document not written is done "
        r"by the next run",
        first[0]["state"]["message"],
    )
    assert said, first[0]["state"]["message"]
    # What the stopped attempt wrote stays written: its retry finds exactly those unchanged, and does the rest.
    assert int(said[1]) == summary.skipped >= 4 and summary.processed + summary.skipped == DOCS
    assert all(w.process.poll() is None for w in workers)  # the signal stopped the run, not its worker

    rows = live_status(SinkSettings(data_dir=fault_env)).rows()
    assert len(rows) == DOCS and {row.state for row in rows} == {"processed"}
    assert summary.alignment is not None and summary.alignment["ok"], summary.alignment
    expected = live_status(SinkSettings(data_dir=fault_env)).expected_chunk_ids()
    assert held(SINKS) == dict.fromkeys(SINKS, expected) and duplicates(SINKS) == {}
    assert not list((fault_env / "runs").glob("*.json"))  # each run's process record went with it


def test_stopping_the_parent_cancels_its_shard_runs(
    shard_pool: str, fault_env: Path, prefect_api_url: str, tmp_path: Path
) -> None:
    """No worker polls the pool here, so the shard runs wait, Scheduled: Ctrl-C on the parent (a CLI-style
    run in a subprocess) cancels them; the `on_cancellation` hook cancels a parent's open shard runs."""
    corpus = tmp_path / "corpus"
    make_corpus(corpus, UNSTARTED_DOCS)
    log = tmp_path / "parent.log"
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from unichunk.flows.ingest import ingest\nfrom unichunk.engine.params import IngestParams, SourceParams\n"
        f"ingest(IngestParams(source=SourceParams(kind='directory', root={str(corpus)!r}), "
        f"sinks={SINKS!r}, shards=3))\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], env=os.environ.copy(), stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    try:
        children = wait(
            "the parent's three shard runs",
            lambda: _children_of_latest(prefect_api_url, 3),
            START_TIMEOUT,
            log,
        )
        assert {c["state"]["type"] for c in children} == {"SCHEDULED"}
        parent.send_signal(signal.SIGINT)
        parent.wait(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
    states = {c["id"]: _api(prefect_api_url, "GET", f"/flow_runs/{c['id']}")["state"] for c in children}
    assert {s["type"] for s in states.values()} == {"CANCELLED"}, states
    assert {s["message"] for s in states.values()} == {"the parent run stopped"}
    assert not _open_run_keys()  # the parent dropped its manifest

    # The hook: given a parent whose shard runs are still open, it cancels them.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import FlowRun

    parent_run = FlowRun.model_validate(_api(prefect_api_url, "GET", f"/flow_runs/{children[0]['parent']}"))
    for child in children:  # open again, as if the parent had been killed before it could cancel them
        _api(
            prefect_api_url,
            "POST",
            f"/flow_runs/{child['id']}/set_state",
            {"state": {"type": "SCHEDULED"}, "force": True},
        )
    cancel_shard_runs(flow=None, flow_run=parent_run, state=None)
    with get_client(sync_client=True) as client:
        assert {client.read_flow_run(c["id"]).state.type.value for c in children} == {"CANCELLED"}


def test_ctrl_c_on_a_cli_sharded_run_cancels_its_shards_and_exits_130(
    shard_pool: str, fault_env: Path, prefect_api_url: str, tmp_path: Path
) -> None:
    """The CLI's own Ctrl-C handler only asks the run to stop (`unichunk.stopping`): the parent, waiting
    for shards no worker takes, sees the stop at its next poll, cancels them and exits 130, Cancelled."""
    corpus = tmp_path / "corpus"
    make_corpus(corpus, UNSTARTED_DOCS)
    log = tmp_path / "parent.log"
    sinks = [option for sink in SINKS for option in ("--sink", sink)]
    earlier = (_children_of_latest(prefect_api_url, 3) or [{"parent": None}])[0]["parent"]

    def new_children() -> list[dict] | None:  # of this test's parent, not an earlier test's
        children = _children_of_latest(prefect_api_url, 3)
        return children if children and children[0]["parent"] != earlier else None

    parent = subprocess.Popen(
        [str(BIN / "unichunk"), "ingest", str(corpus), "--shards", "3", *sinks],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        children = wait("the parent's three shard runs", new_children, START_TIMEOUT, log)
        os.killpg(parent.pid, signal.SIGINT)
        assert parent.wait(timeout=120) == 130, tail(log)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    states = {
        c["id"]: _api(prefect_api_url, "GET", f"/flow_runs/{c['id']}")["state"]["type"] for c in children
    }
    assert set(states.values()) == {"CANCELLED"}, states
    parent_state = _api(prefect_api_url, "GET", f"/flow_runs/{children[0]['parent']}")["state"]["type"]
    assert parent_state == "CANCELLED"
    assert "stopped:" in log.read_text()
    assert not _open_run_keys()


# --- helpers --------------------------------------------------------------------------------------------


def _listing(corpus: Path) -> list:
    return DirectorySource(corpus, source_system="sharded-corpus").list()


def _outcomes(worker: Worker) -> dict[str, float]:
    """The worker's `unichunk_documents_total` by outcome (every run it spawned, summed)."""
    samples = worker.metrics()
    return {
        o: samples.get(f'unichunk_documents_total{{outcome="{o}"}}', 0.0) for o in ("processed", "failed")
    }


def _runs_under(pid: int, worker: Worker) -> bool:
    while pid > 1:
        if pid == worker.process.pid:
            return True
        pid = parent_of(pid)
    return False


def _open_run_keys() -> list[str]:
    return ShardRecords.of(SinkSettings()).run_keys()


def _shard_runs(prefect_api_url: str) -> list[dict]:
    """The shard runs of the latest sharded parent."""
    parents = _api(
        prefect_api_url,
        "POST",
        "/flow_runs/filter",
        {"flows": {"name": {"any_": ["ingest", "reindex"]}}, "sort": "EXPECTED_START_TIME_DESC", "limit": 1},
    )
    body = {"flow_runs": {"parent_flow_run_id": {"any_": [parents[0]["id"]]}}}
    return _api(prefect_api_url, "POST", "/flow_runs/filter", body)


def _children_of_latest(prefect_api_url: str, count: int) -> list[dict] | None:
    parents = _api(
        prefect_api_url,
        "POST",
        "/flow_runs/filter",
        {"flows": {"name": {"any_": ["ingest"]}}, "sort": "EXPECTED_START_TIME_DESC", "limit": 1},
    )
    if not parents:
        return None
    body = {"flow_runs": {"parent_flow_run_id": {"any_": [parents[0]["id"]]}}}
    children = _api(prefect_api_url, "POST", "/flow_runs/filter", body)
    for child in children:
        child["parent"] = parents[0]["id"]
    return children if len(children) == count else None
