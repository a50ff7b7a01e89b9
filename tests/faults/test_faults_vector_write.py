"""A vector store write fails (its storage is locked by another connection): what the stores hold after.

The guarantee, from unichunk.engine.batches._settle and unichunk.tasks.maintenance.restore_previous: the documents of
the batch are marked failed, and every sink whose write succeeded is put back to the document's
**previous version** (the last successful one, still in the chunk store because it is pruned only after
a success); a document that never succeeded is **absent** from them. The status table keeps the previous
chunk IDs, so `verify` agrees with those sinks. The sink that failed may hold part of the new version
(here Qdrant persists a point before applying it, so it holds nothing new); a re-run repairs everything.
"""

from __future__ import annotations

import sqlite3

from fault_checks import assert_converged, duplicates, held, make_corpus

from unichunk.engine import batches as pipeline
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks
from unichunk.tasks.sink_io import write_sink


def test_failed_vector_write_keeps_the_previous_version_everywhere_and_a_rerun_repairs(
    fault_env, tmp_path, monkeypatch
):
    monkeypatch.setenv("UNICHUNK_VECTOR_ENGINE", "local")  # the failure is injected into local mode's SQLite
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 3)
    params = IngestParams(source=SourceParams(root=str(corpus)))
    status = live_status(SinkSettings(data_dir=fault_env))
    assert ingest(params, return_state=True).is_completed()
    before = status.expected_chunk_ids()
    assert len(before) == 3

    edited = corpus / "doc_0000.txt"
    edited.write_text("Report 0, edited: Alice Martin moved the Qdrant cluster to Lisbon.\n")
    make_corpus(corpus, 1, start=3)  # a new document
    rows = status.get_many([])
    # Keep the sinks open (as `unichunk serve` does) so the flow reuses them, then lock Qdrant's storage
    # the way another process holding a write transaction would: every point write now times out.
    sinks = get_sinks(SINK_NAMES, reading_settings(SinkSettings()))
    storage = next(sinks["vectors"].settings.qdrant_path.rglob("storage.sqlite"))
    blocker = sqlite3.connect(storage, timeout=0, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(pipeline, "write_sink", write_sink.with_options(retries=1, retry_delay_seconds=0))
    try:
        state = ingest(params, return_state=True)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    summary = state.result(raise_on_failure=False)
    assert state.is_failed()
    failed = {f.source_id: f.error for f in summary.failed}
    assert sorted(failed) == ["doc_0000.txt", "doc_0003.txt"] and summary.skipped == 2
    assert all("write[vectors] failed" in e and "locked" in e for e in failed.values()), failed
    rows = {r.source_id: r for r in status.rows()}
    assert rows["doc_0000.txt"].state == rows["doc_0003.txt"].state == "failed"

    # Previous version intact (new document absent) in every sink, and the status still expects it.
    assert status.expected_chunk_ids() == before
    assert held() == dict.fromkeys(SINK_NAMES, before)
    assert sinks["keywords"].search("edited moved", k=10) == []  # the new text is not searchable
    assert duplicates() == {}

    state = ingest(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert (summary.processed, summary.skipped, summary.chunked) == (2, 2, 0)
    after = assert_converged(fault_env)
    assert len(after) == 4 and len(after & before) == 2
