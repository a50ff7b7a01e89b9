"""Runs interrupted from outside: the ingest process killed mid-flow, the Prefect server restarted mid-run.

Both use the real CLI (`unichunk ingest`) in a subprocess, as an operator or a worker would run it.
Proves: the next run resumes from the document states (documents already processed are skipped by their
status row and keep their `last_success_at`; documents chunked but not written come from the chunk
store), finishes, and leaves every sink with exactly the expected chunk IDs, nothing stored twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import servers
from fault_checks import assert_converged, make_corpus

from unichunk.chunking.config import ChunkStrategy
from unichunk.engine.params import IngestParams, RebuildParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.flows.rebuild import rebuild
from unichunk.index.chunk_cache import ChunkCache
from unichunk.index.generations import live_status
from unichunk.index.registry import GenerationRegistry
from unichunk.index.run import RunConfig
from unichunk.index.status import StatusStore
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings

DOCS = 120
UNICHUNK = str(Path(sys.executable).parent / "unichunk")


def _cli(command: str, corpus: Path, log: Path, *options: str, **env: str) -> subprocess.Popen:
    """`unichunk <command> <corpus> --batch-size 10 <options>` in its own session, output to `log`."""
    return subprocess.Popen(
        [UNICHUNK, command, str(corpus), "--batch-size", "10", *options],
        env={**os.environ, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_processed(status: StatusStore, proc: subprocess.Popen, at_least: int, log: Path) -> None:
    deadline = time.monotonic() + 300
    while status.counts()["processed"] < at_least:
        assert proc.poll() is None, f"the run ended early ({proc.returncode}): {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.1)


def _done_before(status: StatusStore) -> dict[str, str | None]:
    return {r.document_id: r.last_success_at for r in status.rows(state="processed")}


def _assert_not_redone(status: StatusStore, done: dict[str, str | None]) -> None:
    now = {r.document_id: r for r in status.rows()}
    assert len(now) == DOCS and {r.state for r in now.values()} == {"processed"}
    assert {d: now[d].last_success_at for d in done} == done  # nothing written twice


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killed_ingest_process_resumes_from_document_states(fault_env, tmp_path):
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    status = live_status(SinkSettings(data_dir=fault_env))
    log = tmp_path / "killed.log"
    proc = _cli("ingest", corpus, log)
    try:
        _wait_processed(status, proc, 30, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no cleanup of any kind: flow, tasks, sinks all cut off
        proc.wait()
    done = _done_before(status)
    in_flight = {r.document_id for r in status.rows(state="processing")}
    # chunks are stored before the status row says "processing", so a kill between the two leaves a
    # stored document still "pending": the chunk store, not the status, says what needs no chunking
    stored_not_done = ChunkCache.of(SinkSettings(data_dir=fault_env)).document_ids() - done.keys()
    assert 30 <= len(done) < DOCS
    assert in_flight <= stored_not_done

    state = ingest(IngestParams(source=SourceParams(root=str(corpus)), batch_size=10), return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert (summary.skipped, summary.processed) == (len(done), DOCS - len(done))
    assert summary.chunked == DOCS - len(done) - len(stored_not_done)  # the rest came from the store
    _assert_not_redone(status, done)
    assert len(assert_converged(fault_env)) == DOCS


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_prefect_server_restarted_during_a_run_then_the_next_run_finishes(fault_env, tmp_path):
    workdir = tmp_path / "own-prefect"
    try:
        server = servers.start_prefect(workdir, reuse=False)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    status = live_status(SinkSettings(data_dir=fault_env))
    try:
        log = tmp_path / "during-restart.log"
        proc = _cli("ingest", corpus, log, PREFECT_API_URL=server.url)
        try:
            _wait_processed(status, proc, 20, log)
            server.stop()
            server = servers.start_prefect(workdir, reuse=False, port=port)
            proc.wait(timeout=600)  # it either rode out the outage or ended crashed: both are allowed
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        done = _done_before(status)
        assert len(done) >= 20
        log2 = tmp_path / "next.log"
        rerun = _cli("ingest", corpus, log2, PREFECT_API_URL=server.url)
        assert rerun.wait(timeout=600) == 0, log2.read_text()[-3000:]
        assert f"{len(done)} unchanged" in log2.read_text()
    finally:
        server.stop()
    _assert_not_redone(status, done)
    assert len(assert_converged(fault_env)) == DOCS


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_killed_rebuild_leaves_the_live_generation_untouched_and_a_rerun_resumes(fault_env, tmp_path):
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    source = SourceParams(root=str(corpus))
    assert ingest(IngestParams(source=source, batch_size=20), return_state=True).is_completed()
    live_ids = assert_converged(fault_env)
    registry = GenerationRegistry.of(SinkSettings(data_dir=fault_env))
    live = registry.live()
    new_strategy = ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=0)
    new_generation = RunConfig(new_strategy, SinkSettings(), SINK_NAMES).generation_id
    assert new_generation != live.generation_id

    log = tmp_path / "rebuild.log"
    options = ("--strategy", "sentence", "--chunk-size", "128", "--chunk-overlap", "0")
    proc = _cli("rebuild", corpus, log, *options)
    building = StatusStore.of(SinkSettings(data_dir=fault_env, generation=new_generation), readonly=True)
    try:
        _wait_processed(building, proc, 30, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # mid-build: no cleanup of any kind
        proc.wait()
    done = {r.document_id for r in building.rows(state="processed")}
    assert 30 <= len(done) < DOCS

    # The live generation is exactly as it was: same generation, same chunks, nothing twice.
    assert registry.live() == live and registry.get(new_generation).state == "building"
    assert assert_converged(fault_env) == live_ids

    state = rebuild(RebuildParams(source=source, strategy=new_strategy, batch_size=20), return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert summary.outcome == "switched" and summary.build.skipped == len(done)
    assert summary.build.processed == DOCS - len(done)
    assert registry.live().generation_id == new_generation
    assert len(assert_converged(fault_env)) == DOCS  # the new generation, complete and aligned
