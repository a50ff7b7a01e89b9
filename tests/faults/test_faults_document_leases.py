"""Runs in parallel (the stores take concurrent writers) never write one document at once, and the later
update of a document wins.

The runs write the keyword index and the graph only (`sinks=["keywords", "graph"]`): they open no Qdrant
directory, so they take no embedded-store lock and really run side by side here, as runs against a Qdrant
server do.

Proves:
- two `ingest` runs started together over overlapping sources, while shared files are edited under them,
  both complete; every document is processed once per version; each document's stored content (status
  row, BM25 and graph chunks) is that of its file as it is at the end; nothing is stored twice;
- a run meeting a document another run holds waits for it (logging whom it waits for), writes nothing of
  it meanwhile, and once the lease is released stores the file as it is then; a deletion waits the same way;
- a run keeps its leases past the ttl while its process lives (the heartbeat), and lets go on exit;
- only a run opening the embedded vector store takes the store's lock.
"""

from __future__ import annotations

import contextvars
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fault_checks import assert_converged, make_corpus

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.sources import PathsSource, load_item
from unichunk.engine.leases import RunLeases
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.engine.store_access import store_lock_path
from unichunk.flows.documents import delete_document, ingest_document
from unichunk.flows.ingest import ingest
from unichunk.index.alignment import verify_alignment
from unichunk.index.document_leases import DocumentLeases
from unichunk.index.generations import live_status, reading_settings, target_for_ingest
from unichunk.index.run import RunConfig
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import flow_sinks, get_sinks

SINKS = ["keywords", "graph"]


def _run_in_thread(target: Any, *args: Any, **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Start a flow in a thread; `out["state"]` is its final state (or the exception it raised).

    The thread runs in a copy of this context: the Prefect settings pointing at the session's server are
    a context variable, and a thread without them would start (and leave running) a temporary server."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["state"] = target(*args, return_state=True, **kwargs)
        except BaseException as exc:  # kept, so a failure names its cause instead of a missing entry
            out["state"] = exc

    thread = threading.Thread(target=contextvars.copy_context().run, args=(body,))
    thread.start()
    return thread, out


def _assert_completed(out: dict[str, Any]) -> Any:
    state = out.get("state")
    assert state is not None and not isinstance(state, BaseException), repr(state)
    assert state.is_completed(), state.message
    return state.result()


def _assert_stores_hold_the_files_as_they_are(data_dir: Path, corpus: Path, paths: list[Path]) -> None:
    """Every document processed, with its file's current content: the status row's hash, and in BM25 and
    the graph exactly the chunk IDs the chunking service derives from the file now, nothing twice."""
    items = PathsSource(paths, root=corpus).list()
    documents = {item.document_id: load_item(item) for item in items}
    rows = {row.document_id: row for row in live_status(SinkSettings(data_dir=data_dir)).rows()}
    assert rows.keys() == documents.keys()
    assert {r.state for r in rows.values()} == {"processed"}
    stale = [r.source_id for d, r in rows.items() if r.content_hash != documents[d].content_hash]
    assert stale == []
    service = ChunkingService()
    current = {c.chunk_id for doc in documents.values() for c in service.chunk(doc, ChunkStrategy())}
    assert assert_converged(data_dir, SINKS) == current
    report = verify_alignment(get_sinks(SINKS, reading_settings(SinkSettings())), expected=current)
    assert report.ok, report.as_dict()  # each stored chunk's content is the one its ID names


@pytest.mark.timeout(600)
def test_two_parallel_runs_with_edits_under_them_store_each_files_latest_version(
    fault_env, tmp_path, monkeypatch
):
    corpus = tmp_path / "corpus"
    paths = make_corpus(corpus, 60)
    shared, only_a, only_b = paths[:36], paths[36:48], paths[48:]  # both runs start on the shared ones
    sources = {
        "a": SourceParams(kind="paths", root=str(corpus), paths=[str(p) for p in shared + only_a]),
        "b": SourceParams(kind="paths", root=str(corpus), paths=[str(p) for p in shared + only_b]),
    }
    # Count the documents a run found leased by the other: without any, the test proved nothing.
    # The runs are made to meet, whatever the machine's load: the first run to lease a batch keeps it
    # until the other run has asked for leases too (both start with the shared documents, in one order),
    # so the second finds the first batch held. Without this, on a loaded machine one run could finish
    # the shared documents before the other had started, and the test would prove nothing.
    refused: list[str] = []
    holders: set[str] = set()
    both_asked = threading.Event()
    acquire = DocumentLeases.acquire

    def counting_acquire(
        self: DocumentLeases, holder: str, generation: str, ids: Any, *a: Any, **k: Any
    ) -> set[str]:
        ids = list(ids)
        got = acquire(self, holder, generation, ids, *a, **k)
        refused.extend(d for d in ids if d not in got)
        holders.add(holder)
        if len(holders) >= 2:
            both_asked.set()
        both_asked.wait(timeout=300)
        return got

    monkeypatch.setattr(DocumentLeases, "acquire", counting_acquire)

    # The editor changes each shared file once, the moment a run starts writing it (its row turns
    # "processing": that run has read it and holds its lease). The other run has not read it then (it
    # would need the lease), so it will, after the writer lets go: the final content must be the edit.
    edited: set[str] = set()
    stop = threading.Event()
    by_id = {item.document_id: Path(item.path) for item in PathsSource(shared, root=corpus).list()}

    def editor() -> None:
        while not stop.is_set():
            rows = live_status(SinkSettings(data_dir=fault_env)).rows(
                state="processing"
            )  # empty until the first run makes it
            for row in rows:
                path = by_id.get(row.document_id)
                if path is not None and row.document_id not in edited and len(edited) < 12:
                    path.write_text(path.read_text() + "It was revised after the review.\n")
                    edited.add(row.document_id)
            time.sleep(0.005)

    watcher = threading.Thread(target=editor)
    watcher.start()
    started = threading.Barrier(2)

    def run(name: str, return_state: bool) -> Any:
        started.wait()
        return ingest(
            IngestParams(source=sources[name], sinks=SINKS, batch_size=3), return_state=return_state
        )

    # The models and stores opened before, held open for both runs (as `unichunk serve` holds them), so
    # neither run spends its first seconds loading spaCy while the other gets ahead alone.
    target = target_for_ingest(RunConfig(ChunkStrategy(), SinkSettings(), tuple(SINKS)))
    try:
        with flow_sinks(SINKS, target.settings):
            runs = {name: _run_in_thread(run, name) for name in ("a", "b")}
            for thread, _ in runs.values():
                thread.join(timeout=500)
    finally:
        stop.set()
        watcher.join()
    summaries = {name: _assert_completed(out) for name, (_, out) in runs.items()}
    assert refused, "the runs never met on a document: nothing was tested"
    assert len(edited) >= 3, edited  # edits landed while a run was writing the document
    for name, summary in summaries.items():
        assert summary.failed == [] and summary.listed == 48, (name, summary.line())
        # every listed document accounted for once: written by this run, or found current
        assert summary.processed + summary.skipped == 48, (name, summary.line())
    # Each version was written once: every document once, plus once more per edit.
    assert sum(s.processed for s in summaries.values()) == 60 + len(edited)
    _assert_stores_hold_the_files_as_they_are(fault_env, corpus, paths)


def _wait_until_waiting(caplog: pytest.LogCaptureFixture, thread: threading.Thread, text: str) -> None:
    """Until the flow logs that it waits (starting a flow run in a thread takes seconds of its own)."""
    deadline = time.monotonic() + 60
    while not any(
        "waiting for 1 document(s)" in r.getMessage() and text in r.getMessage() for r in caplog.records
    ):
        assert thread.is_alive(), "the run ended without waiting"
        assert time.monotonic() < deadline, "the run never said it waits"
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_a_run_waits_for_a_document_another_run_holds_then_stores_its_latest_content(
    fault_env, records_settings, tmp_path, caplog
):
    """On both backends (`records_settings`: the leases and records in SQLite files, or in PostgreSQL)."""
    corpus = tmp_path / "corpus"
    paths = make_corpus(corpus, 4)
    first = ingest(IngestParams(source=SourceParams(root=str(corpus)), sinks=SINKS), return_state=True)
    assert first.is_completed(), first.message
    target = paths[1]
    item = PathsSource([target], root=corpus).list()[0]
    before = live_status(SinkSettings(data_dir=fault_env)).get(item.document_id)
    assert before is not None and before.state == "processed"
    generation = reading_settings(SinkSettings()).generation
    assert generation is not None

    # Another run (this test, as a foreign holder) is writing the document; meanwhile it is edited.
    table = DocumentLeases.of(SinkSettings(data_dir=fault_env))
    assert table.acquire("another-run", generation, [item.document_id], 600, label="the test") == {
        item.document_id
    }
    target.write_text(target.read_text() + "First revision.\n")
    thread, out = _run_in_thread(
        ingest_document, str(target.relative_to(corpus)), root=str(corpus), sinks=SINKS
    )
    try:
        _wait_until_waiting(caplog, thread, f"{target.name} (held by the test)")
        time.sleep(2)
        assert thread.is_alive() and "state" not in out, out  # waiting, not failed, not done
        now = live_status(SinkSettings(data_dir=fault_env)).get(item.document_id)
        assert now is not None and now.as_dict() == before.as_dict()  # nothing written meanwhile
        assert get_sinks(SINKS, reading_settings(SinkSettings()))["keywords"].chunk_ids(
            item.document_id
        ) == set(before.chunk_ids)
        # Edited again before the holder lets go: the waiting run must store this version.
        target.write_text(target.read_text() + "Second revision.\n")
    finally:
        table.release("another-run", generation, [item.document_id])
    thread.join(timeout=120)
    summary = _assert_completed(out)
    assert (summary.processed, summary.failed) == (1, [])
    assert (
        live_status(SinkSettings(data_dir=fault_env)).get(item.document_id).content_hash
        == load_item(PathsSource([target], root=corpus).list()[0]).content_hash
    )
    _assert_stores_hold_the_files_as_they_are(fault_env, corpus, paths)

    # A deletion waits the same way: never under another run's write.
    table.acquire("another-run", generation, [item.document_id], 600, label="the test")
    thread, out = _run_in_thread(delete_document, item.document_id, sinks=SINKS)
    try:
        _wait_until_waiting(caplog, thread, f"{item.document_id} (held by the test)")
        time.sleep(1)
        assert (
            thread.is_alive()
            and live_status(SinkSettings(data_dir=fault_env)).get(item.document_id) is not None
        )
    finally:
        table.release("another-run", generation, [item.document_id])
    thread.join(timeout=120)
    assert _assert_completed(out)["keywords"] > 0
    assert live_status(SinkSettings(data_dir=fault_env)).get(item.document_id) is None
    for name, sink in get_sinks(SINKS, reading_settings(SinkSettings())).items():
        assert sink.chunk_ids(item.document_id) == set(), name


def test_a_slow_batch_keeps_its_leases_for_as_long_as_its_process_lives(records_settings):
    """The heartbeat renews: a run holding a document far longer than the ttl still holds it."""
    run = RunConfig(ChunkStrategy(), records_settings.for_generation("g1"), tuple(SINKS))
    table = DocumentLeases.of(records_settings)
    with RunLeases(run, ttl=0.4) as leases:
        assert leases.take_ids(["doc"]) == {"doc"}
        time.sleep(1.5)  # almost four ttls without a batch
        assert table.acquire("another-run", "g1", ["doc"], 60) == set()
        assert table.held_by_others("another-run", "g1", ["doc"]).keys() == {"doc"}
    assert table.acquire("another-run", "g1", ["doc"], 60) == {"doc"}  # released on exit


def test_only_a_run_that_opens_the_embedded_vector_store_takes_its_lock(tmp_path):
    settings = SinkSettings(data_dir=tmp_path, generation="g1", qdrant_url=None)
    assert store_lock_path(settings, SINKS) is None  # keywords + graph: no Qdrant directory opened
    assert store_lock_path(settings, ["vectors"]) == store_lock_path(settings)  # the default: every sink
    assert store_lock_path(settings) is not None
    assert store_lock_path(settings.model_copy(update={"qdrant_url": "http://qdrant:6333"})) is None
