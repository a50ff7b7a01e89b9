"""The graph server is killed in the middle of an ingest of 200 documents and restarted.

Proves: the run ends Failed and names exactly the documents whose graph write failed; the sinks that did
write were put back (a new document that failed is absent from every sink, not half-written); the client
reconnects to the restarted server by itself (later batches of the same run succeed); a second run
re-does only the failed documents and converges: every sink holds exactly the expected chunk IDs, and
nothing is stored twice (points, BM25 index entries, graph nodes).
"""

from __future__ import annotations

import threading
import time

import pytest
import servers
from fault_checks import assert_converged, duplicates, held, make_corpus

from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.index.generations import live_status
from unichunk.sinks.config import SinkSettings

DOCS = 200


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_graph_server_killed_mid_ingest_then_restarted_converges(
    fault_env, private_falkordb, tmp_path, monkeypatch
):
    monkeypatch.setenv("UNICHUNK_FALKORDB_URL", private_falkordb.url)
    port = int(private_falkordb.url.rsplit(":", 1)[1])
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCS)
    params = IngestParams(source=SourceParams(root=str(corpus)), batch_size=20)
    status = live_status(SinkSettings(data_dir=fault_env))
    outcome: dict = {}

    def first_run() -> None:
        state = ingest(params, return_state=True)
        outcome["state"], outcome["summary"] = state, state.result(raise_on_failure=False)

    runner = threading.Thread(target=first_run)
    runner.start()
    server = private_falkordb
    try:
        _wait_for(lambda: status.counts()["processed"] >= 20, 300, "the first batch")
        server.process.kill()  # SIGKILL: no shutdown, the append-only file is all that survives
        server.process.wait()
        _wait_for(lambda: status.counts()["failed"] >= 1, 300, "a batch to fail")
        server = servers.start_falkordb(tmp_path / "own-falkordb", reuse=False, port=port)
    finally:
        runner.join(timeout=500)
        private_falkordb.process = server.process  # the fixture stops whichever server is running
    state, summary = outcome["state"], outcome["summary"]

    assert state.is_failed() and f"{len(summary.failed)} document(s) failed" in state.message
    assert 0 < len(summary.failed) < DOCS - 20
    assert all("write[graph] failed" in f.error for f in summary.failed), summary.failed[0].error
    failed_ids = {f.document_id for f in summary.failed}
    rows = {r.document_id: r for r in status.rows()}
    assert {d for d, r in rows.items() if r.state == "failed"} == failed_ids
    assert summary.processed == DOCS - len(failed_ids) > 20  # batches after the restart went through
    # The vector and keyword writes of the failed batch(es) were undone: those sinks match the status.
    expected = status.expected_chunk_ids()
    stores = held()
    assert stores["vectors"] == stores["keywords"] == expected
    assert not any(cid.split("::")[0] in failed_ids for cid in stores["vectors"] | stores["keywords"])
    # The graph may hold part of what it wrote before the kill (only ever of the failed documents).
    assert {cid.split("::")[0] for cid in stores["graph"] - expected} <= failed_ids
    assert expected <= stores["graph"]
    assert duplicates() == {}

    second = ingest(params, return_state=True)
    summary2 = second.result(raise_on_failure=False)
    assert second.is_completed(), second.message
    assert (summary2.processed, summary2.skipped, summary2.failed) == (
        len(failed_ids),
        DOCS - len(failed_ids),
        [],
    )
    assert summary2.chunked == 0  # the failed documents' chunks came from the chunk store
    assert {r.state for r in status.rows()} == {"processed"}
    assert len(assert_converged(fault_env)) == DOCS
