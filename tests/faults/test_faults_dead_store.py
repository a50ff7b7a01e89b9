"""The graph server is killed in the middle of an ingest (the real CLI) and restarted after the run ended.

Proves: the run stops taking batches once the write task's retries give up on the unreachable store (at
most the batch whose write failed, one prepared and one chunked are touched after the kill, far from the
rest of the list), exits 3 with one `error:` line naming the graph store and its URL with the password
hidden, and leaves what is stored consistent: the vector and keyword writes of the failed batch undone,
no status row stuck in `processing`, the failed batch `failed` (retried, not a content failure), the
chunked but unwritten documents `pending`. Once FalkorDB is back, the next run stores the rest and
converges: every sink holds exactly the expected chunk IDs, nothing twice. (Replaces the test in which the
same run went on after a restart, batch by batch.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import servers
from fault_checks import assert_converged, duplicates, held, make_corpus

from unichunk.index.generations import live_status
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import close_all_sinks

# The kill comes after 2 batches; what the run may touch after it (3 batches) and a batch or two the test's
# poll may see late still leave most of the list untouched, for the next run to store.
DOCS = 48
BATCH = 4
PASSWORD = "s3cret-pw"
UNICHUNK = str(Path(sys.executable).parent / "unichunk")


def _ingest(corpus: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [UNICHUNK, "ingest", str(corpus), "--batch-size", str(BATCH)],
        env={**os.environ, "UNICHUNK_DEBUG": "0"},
        stdout=out.with_suffix(".out").open("wb"),
        stderr=out.with_suffix(".err").open("wb"),
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_graph_server_killed_mid_ingest_stops_the_run_with_exit_3(fault_env, tmp_path, monkeypatch):
    try:
        server = servers.start_falkordb(tmp_path / "own-falkordb", reuse=False, password=PASSWORD)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    port = int(server.url.rsplit(":", 1)[1])
    monkeypatch.setenv("UNICHUNK_FALKORDB_URL", server.url)
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    status = live_status(SinkSettings(data_dir=fault_env))
    try:
        run = _ingest(corpus, tmp_path / "first")
        deadline = time.monotonic() + 300
        while status.counts()["processed"] < 2 * BATCH:
            assert run.poll() is None, (tmp_path / "first.err").read_text()
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.05)
        server.process.kill()  # SIGKILL: no shutdown, the append-only file is all that survives
        server.process.wait()
        processed_at_kill = status.counts()["processed"]
        code = run.wait(timeout=300)
        err = (tmp_path / "first.err").read_text()

        assert code == 3, err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err
        assert "[graph] store unreachable at " in errors[0]
        assert f"redis://:***@127.0.0.1:{port}" in errors[0], errors[0]
        assert PASSWORD not in err + (tmp_path / "first.out").read_text()
        assert "Traceback" not in err

        rows = {row.document_id: row for row in status.rows()}
        by_state: dict[str, list] = {}
        for row in rows.values():
            by_state.setdefault(row.state, []).append(row)
        assert "processing" not in by_state, by_state["processing"]
        processed = len(by_state.get("processed", []))
        failed, pending = by_state.get("failed", []), by_state.get("pending", [])
        # Stopped early: besides what was written before the kill (at most one batch in flight then), one
        # batch failed, and at most one more was prepared and one chunked; the rest was never touched.
        assert processed_at_kill <= processed <= processed_at_kill + BATCH
        assert 0 < len(failed) <= BATCH
        assert all("write[graph] failed" in r.error and r.failure is None for r in failed)
        assert len(pending) <= 2 * BATCH
        assert all(r.error.startswith("not written: the run stopped: [graph]") for r in pending)
        assert len(rows) <= processed + 3 * BATCH < DOCS

        # Restart FalkorDB where it was: the stores agree with the records, the failed batch undone.
        server = servers.start_falkordb(tmp_path / "own-falkordb", reuse=False, port=port, password=PASSWORD)
        expected = status.expected_chunk_ids()
        stores = held()
        assert stores["vectors"] == stores["keywords"] == expected
        failed_ids = {r.document_id for r in failed}
        # The graph may hold part of what it wrote before the kill (only ever of the failed documents).
        assert {cid.split("::")[0] for cid in stores["graph"] - expected} <= failed_ids
        assert expected <= stores["graph"]
        assert duplicates() == {}
        close_all_sinks()  # the CLI's run needs the embedded stores' lock

        second = _ingest(corpus, tmp_path / "second")
        assert second.wait(timeout=300) == 0, (tmp_path / "second.err").read_text()
        assert {r.state for r in status.rows()} == {"processed"}
        assert len(status.rows()) == DOCS
        assert len(assert_converged(fault_env)) == DOCS
        assert duplicates() == {}
    finally:
        server.stop()
