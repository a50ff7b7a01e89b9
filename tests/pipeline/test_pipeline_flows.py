"""The ingest, reindex and single-document flows against real stores and a real Prefect server.

Stores: Qdrant local mode and BM25 under a temporary data dir, FalkorDB from the `falkordb_url` fixture,
MiniLM embeddings and spaCy entities. The corpus is three short documents so the models stay cheap.
"""

from __future__ import annotations

import os

import pytest
from prometheus_client import REGISTRY

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.documents import delete_document, ingest_document
from unichunk.flows.ingest import ingest
from unichunk.flows.reindex import reindex
from unichunk.index.alignment import verify_alignment
from unichunk.index.generations import live_status, target_for_ingest
from unichunk.index.run import RunConfig
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks
from unichunk.sinks.vectors.sink import point_id


def _run(flow_fn, *args, **kwargs):
    state = flow_fn(*args, return_state=True, **kwargs)
    return state, state.result(raise_on_failure=False)


def _params(root, **kwargs) -> IngestParams:
    return IngestParams(source=SourceParams(root=str(root)), **kwargs)


def _sinks():
    """The sinks the next ingest uses (of the live generation, or the one a first ingest creates)."""
    run = RunConfig(ChunkStrategy(), SinkSettings())
    return get_sinks(SINK_NAMES, target_for_ingest(run, dry_run=True).settings)


def _held() -> dict[str, set[str]]:
    return {name: sink.chunk_ids() for name, sink in _sinks().items()}


def _assert_aligned(data_dir) -> set[str]:
    expected = live_status(SinkSettings(data_dir=data_dir)).expected_chunk_ids()
    assert _held() == dict.fromkeys(SINK_NAMES, expected)
    return expected


def _optimize_calls() -> dict[str, float]:
    """How many times each sink was asked to optimise after a run (`unichunk.engine.batches.optimize_after_run`)."""
    return {
        name: REGISTRY.get_sample_value(
            "unichunk_task_duration_seconds_count", {"task": "optimize", "sink": name}
        )
        or 0.0
        for name in SINK_NAMES
    }


def test_ingest_writes_one_set_of_chunk_ids_to_every_sink_chunking_each_document_once(
    pipeline_env, corpus, chunk_calls
):
    optimized = _optimize_calls()
    state, summary = _run(ingest, _params(corpus, batch_size=1))  # three batches
    assert state.is_completed(), state.message
    # the stores are optimised once, after the run's last write, not per batch
    assert _optimize_calls() == {name: optimized[name] + 1 for name in SINK_NAMES}
    assert (summary.listed, summary.processed, summary.skipped, summary.failed) == (3, 3, 0, [])
    rows = live_status(SinkSettings(data_dir=pipeline_env)).rows()
    assert sorted(r.source_id for r in rows) == ["guide.md", "notes/page.html", "notes/plain.txt"]
    assert {r.state for r in rows} == {"processed"}
    # Exactly once: one ChunkingService.chunk call per document in the run.
    assert dict(chunk_calls) == {r.document_id: 1 for r in rows}
    expected = _assert_aligned(pipeline_env)
    for row in rows:
        assert row.chunk_ids and all(cid.startswith(f"{row.document_id}::chunk::") for cid in row.chunk_ids)
        assert row.chunk_count == len(row.chunk_ids) and row.content_hash and row.last_success_at
    assert summary.chunks_written == dict.fromkeys(SINK_NAMES, len(expected))


def test_rerun_touch_edit_and_delete_are_incremental(pipeline_env, corpus, chunk_calls, doc_id):
    _run(ingest, _params(corpus))
    before = _held()["vectors"]
    chunk_calls.clear()

    state, summary = _run(ingest, _params(corpus))
    assert state.is_completed() and (summary.processed, summary.skipped) == (0, 3)
    assert not chunk_calls

    # A new mtime with the same content is loaded, found equal by hash, and skipped.
    plain = corpus / "notes/plain.txt"
    os.utime(plain, ns=(plain.stat().st_atime_ns, plain.stat().st_mtime_ns + 5_000_000_000))
    state, summary = _run(ingest, _params(corpus))
    assert (summary.processed, summary.skipped) == (0, 3) and not chunk_calls
    row = live_status(SinkSettings(data_dir=pipeline_env)).get(doc_id("notes/plain.txt"))
    assert row.mtime_ns == plain.stat().st_mtime_ns

    guide = doc_id("guide.md")
    old_guide_ids = set(live_status(SinkSettings(data_dir=pipeline_env)).get(guide).chunk_ids)
    (corpus / "guide.md").write_text("# Guide\n\nQdrant stores vectors. Edited: now with hybrid search.\n")
    state, summary = _run(ingest, _params(corpus))
    assert state.is_completed() and (summary.processed, summary.skipped) == (1, 2)
    assert dict(chunk_calls) == {guide: 1}
    expected = _assert_aligned(pipeline_env)
    assert not old_guide_ids & expected and not old_guide_ids & _held()["vectors"]
    assert before - old_guide_ids <= expected

    (corpus / "notes/page.html").unlink()
    state, summary = _run(ingest, _params(corpus))
    assert state.is_completed() and summary.deleted == 1
    page = doc_id("notes/page.html")
    assert live_status(SinkSettings(data_dir=pipeline_env)).get(page) is None
    assert not any(cid.startswith(page) for ids in _held().values() for cid in ids)
    _assert_aligned(pipeline_env)

    # delete_missing=False keeps the status (and chunks) of vanished documents.
    (corpus / "notes/plain.txt").unlink()
    state, summary = _run(ingest, _params(corpus, delete_missing=False))
    assert summary.deleted == 0 and live_status(SinkSettings(data_dir=pipeline_env)).get(
        doc_id("notes/plain.txt")
    )


def test_bad_files_fail_alone_and_the_run_ends_failed_after_the_rest(pipeline_env, corpus, doc_id):
    (corpus / "latin1.txt").write_bytes(b"caf\xe9 au lait \xc3\x28 is not UTF-8\n")
    (corpus / "binary.md").write_bytes(b"\x00\x01\x02PNG\x00" * 40)
    state, summary = _run(ingest, _params(corpus))
    assert state.is_failed()
    assert "2 document(s) failed" in state.message
    assert summary.processed == 3
    failed = {f.source_id: f.error for f in summary.failed}
    assert set(failed) == {"latin1.txt", "binary.md"}
    assert all(error.startswith("load failed:") for error in failed.values())
    status = live_status(SinkSettings(data_dir=pipeline_env))
    assert {r.source_id for r in status.rows(state="failed")} == {"latin1.txt", "binary.md"}
    assert status.get(doc_id("latin1.txt")).error == failed["latin1.txt"]
    expected = _assert_aligned(pipeline_env)
    assert not any(cid.startswith(doc_id("latin1.txt")) for cid in expected)


def test_a_document_one_sink_cannot_prepare_is_written_to_none(pipeline_env, corpus, monkeypatch, doc_id):
    graph = _sinks()["graph"]
    real_prepare = graph.prepare
    poisoned = doc_id("notes/plain.txt")

    def prepare(batch):
        if any(document.document_id == poisoned for document, _ in batch):
            raise RuntimeError("extractor exploded")
        return real_prepare(batch)

    monkeypatch.setattr(graph, "prepare", prepare)
    state, summary = _run(ingest, _params(corpus))
    assert state.is_failed() and summary.processed == 2
    assert [(f.source_id, "extractor exploded" in f.error) for f in summary.failed] == [
        ("notes/plain.txt", True)
    ]
    assert not any(cid.startswith(poisoned) for ids in _held().values() for cid in ids)
    _assert_aligned(pipeline_env)


def test_a_transient_write_failure_is_retried(pipeline_env, corpus, monkeypatch):
    keywords = _sinks()["keywords"]
    real_write = keywords.write
    attempts = []

    def flaky_write(prepared):
        attempts.append(len(prepared.documents))
        if len(attempts) == 1:
            raise ConnectionError("store briefly unavailable")
        return real_write(prepared)

    monkeypatch.setattr(keywords, "write", flaky_write)
    state, summary = _run(ingest, _params(corpus))
    assert state.is_completed() and summary.processed == 3
    assert attempts == [3, 3]
    _assert_aligned(pipeline_env)


def test_dry_run_reports_and_writes_nothing(pipeline_env, corpus, chunk_calls):
    state, summary = _run(ingest, _params(corpus, dry_run=True))
    assert state.is_completed() and summary.dry_run
    assert sorted(summary.would_process) == ["guide.md", "notes/page.html", "notes/plain.txt"]
    assert not pipeline_env.exists() and not chunk_calls

    _run(ingest, _params(corpus))
    rows_before = {
        r.document_id: r.as_dict() for r in live_status(SinkSettings(data_dir=pipeline_env)).rows()
    }
    held_before = _held()
    (corpus / "guide.md").write_text("# Guide\n\nRewritten entirely.\n")
    (corpus / "notes/page.html").unlink()
    chunk_calls.clear()
    state, summary = _run(ingest, _params(corpus, dry_run=True))
    assert (summary.would_process, summary.would_delete) == (["guide.md"], ["notes/page.html"])
    assert (summary.processed, summary.deleted) == (0, 0) and not chunk_calls
    assert {
        r.document_id: r.as_dict() for r in live_status(SinkSettings(data_dir=pipeline_env)).rows()
    } == rows_before
    assert _held() == held_before


def test_reindex_repairs_a_deleted_point_and_a_stray_document(pipeline_env, corpus, chunk_calls, doc_id):
    _run(ingest, _params(corpus))
    sinks = _sinks()
    status = live_status(SinkSettings(data_dir=pipeline_env))
    victim = status.get(doc_id("guide.md")).chunk_ids[0]
    vectors = sinks["vectors"]
    vectors._store_delete([point_id(victim)])  # engine-neutral (qdrant-edge or qdrant-client)
    stray = Document(text="A stray document nobody ingested.", source_system="fs", source_id="stray.txt")
    stray_chunks = ChunkingService().chunk(stray)
    sinks["keywords"].upsert(stray, stray_chunks)
    report = verify_alignment(sinks, expected=status.expected_chunk_ids())
    assert report.missing["vectors"] == {victim}
    assert report.extra["keywords"] == {c.chunk_id for c in stray_chunks}
    chunk_calls.clear()

    state, summary = _run(reindex, _params(corpus))
    assert state.is_completed(), state.message
    assert summary.repaired["rewritten"] == {"vectors": [doc_id("guide.md")]}
    assert summary.repaired["deleted"] == {"keywords": [stray.document_id]}
    assert summary.alignment["ok"] and summary.skipped == 3
    assert not chunk_calls  # repaired from the chunk store, not by re-chunking
    _assert_aligned(pipeline_env)


def test_single_document_flows(pipeline_env, corpus, doc_id):
    state, summary = _run(ingest_document, str(corpus / "guide.md"), root=str(corpus))
    assert state.is_completed() and summary.processed == 1
    guide = doc_id("guide.md")
    expected = _assert_aligned(pipeline_env)
    assert expected and all(cid.startswith(guide) for cid in expected)

    # The webhook's source_id wins over the path.
    state, summary = _run(
        ingest_document, str(corpus / "notes/plain.txt"), source_id="kb/plain", root=str(corpus)
    )
    assert state.is_completed() and live_status(SinkSettings(data_dir=pipeline_env)).get(doc_id("kb/plain"))

    state, removed = _run(delete_document, guide)
    assert state.is_completed() and removed == dict.fromkeys(SINK_NAMES, len(expected))
    assert live_status(SinkSettings(data_dir=pipeline_env)).get(guide) is None
    _assert_aligned(pipeline_env)

    # A path relative to the root (as a webhook may send) is resolved against it.
    state, summary = _run(ingest_document, "notes/page.html", root=str(corpus))
    assert state.is_completed() and live_status(SinkSettings(data_dir=pipeline_env)).get(
        doc_id("notes/page.html")
    )

    state, _ = _run(ingest_document, str(corpus / "missing.md"))
    assert state.is_failed() and "no such file" in state.message


def test_flow_runs_push_metrics_to_the_pushgateway(pipeline_env, corpus, pushgateway_url, monkeypatch):
    import httpx

    monkeypatch.setenv("PUSHGATEWAY_URL", pushgateway_url)
    state, _ = _run(ingest, _params(corpus))
    assert state.is_completed()
    text = httpx.get(f"{pushgateway_url}/metrics", timeout=10).text
    pushed = [line for line in text.splitlines() if line.startswith("unichunk_documents_total{")]
    assert any(
        'flow="ingest"' in line and 'job="unichunk"' in line and 'outcome="processed"' in line
        for line in pushed
    )


def test_a_pushgateway_outage_does_not_fail_the_run(pipeline_env, corpus, monkeypatch):
    monkeypatch.setenv("PUSHGATEWAY_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    state, summary = _run(ingest, _params(corpus, sinks=["keywords"]))
    assert state.is_completed() and summary.processed == 3


@pytest.mark.parametrize("bad", [{"kind": "directory"}, {"kind": "paths", "paths": []}])
def test_source_params_are_validated(bad):
    with pytest.raises(ValueError):
        SourceParams(**bad)
