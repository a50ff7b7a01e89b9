"""Queued webhook updates through the real `ingest-document` flow, stores and Prefect server.

Proves: the run given one queued update applies every update pending for the source in one run (each file
read as it is then: several updates of one file store its latest content, once); the runs started for
the others end Completed at once, naming the run that applied theirs; an update queued after that run
claimed is left for the next run; a run whose update is not in the queue (swept, or started by hand)
queues it and applies it; a missing file fails its own run only, with the reason, never the run that
met it in the queue. `tests/faults/test_faults_queued_updates.py` does the same through `unichunk serve`.
"""

from __future__ import annotations

from pathlib import Path

from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.sources import default_source_name
from unichunk.flows.documents import ingest_document
from unichunk.index.alignment import verify_alignment
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.update_queue import UpdateQueue
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.factory import open_sinks


def _run(entry: str, path: Path, corpus: Path):  # type: ignore[no-untyped-def]
    state = ingest_document(
        str(path),
        source_id=path.relative_to(corpus).as_posix(),
        root=str(corpus),
        entry=entry,
        return_state=True,
    )
    return state, state.result(raise_on_failure=False)


def _enqueue(queue: UpdateQueue, entry: str, corpus: Path, path: Path) -> None:
    queue.enqueue(entry, default_source_name(corpus), path.relative_to(corpus).as_posix(), str(path))


def _hashes(data_dir: Path) -> dict[str, str | None]:
    return {r.source_id: r.content_hash for r in live_status(SinkSettings(data_dir=data_dir)).rows()}


def test_one_run_applies_every_queued_update_and_the_others_end_at_once(pipeline_env, corpus):
    queue = UpdateQueue.of(SinkSettings())
    paths = [corpus / f"burst_{n}.md" for n in range(5)]
    for n, path in enumerate(paths):
        path.write_text(f"# Burst {n}\n\nFirst version of report {n}, filed in Porto.\n")
        _enqueue(queue, f"e{n}", corpus, path)
    latest = "# Burst 1\n\nSecond version of report 1, filed in Lisbon.\n"
    paths[1].write_text(latest)
    _enqueue(queue, "e1-again", corpus, paths[1])  # the same file updated twice before any run

    state, summary = _run("e3", paths[3], corpus)  # whichever update's run takes the lock first
    assert state.is_completed(), state.message
    assert summary.processed == 5 and summary.listed == 5  # six updates, five documents, one run
    applied = queue.entries()
    assert {u.state for u in applied} == {"done"} and len({u.holder for u in applied}) == 1
    hashes = _hashes(pipeline_env)
    assert hashes["burst_1.md"] == sha256_hex(latest)  # the latest content, read when applied

    for entry, path in [("e0", paths[0]), ("e1", paths[1]), ("e1-again", paths[1]), ("e4", paths[4])]:
        state, result = _run(entry, path, corpus)
        assert state.is_completed() and result is None, state.message  # no summary: nothing was done
        assert state.message.endswith(f"applied by {applied[0].holder}"), state.message

    # Queued after that run claimed: left pending, applied by the next run that takes the lock.
    newer = "# Burst 2\n\nThird version, filed in Faro.\n"
    paths[2].write_text(newer)
    _enqueue(queue, "late", corpus, paths[2])
    assert queue.get("late").state == "pending"  # type: ignore[union-attr]
    state, summary = _run("late", paths[2], corpus)
    assert state.is_completed() and summary.processed == 1
    assert _hashes(pipeline_env)["burst_2.md"] == sha256_hex(newer)

    # Not in the queue (swept long ago, or started by hand): queued by its run, and applied.
    newest = "# Burst 0\n\nRewritten without a queue entry, in Braga.\n"
    paths[0].write_text(newest)
    state, summary = _run("never-queued", paths[0], corpus)
    assert state.is_completed() and summary.processed == 1
    assert queue.get("never-queued").state == "done"  # type: ignore[union-attr]
    assert _hashes(pipeline_env)["burst_0.md"] == sha256_hex(newest)
    _assert_aligned(pipeline_env)


def test_a_missing_file_fails_its_own_run_not_the_run_that_met_it(pipeline_env, corpus):
    queue = UpdateQueue.of(SinkSettings())
    gone, kept = corpus / "gone.md", corpus / "kept.md"
    gone.write_text("# Gone\n\nDeleted before any run read it.\n")
    kept.write_text("# Kept\n\nStays.\n")
    _enqueue(queue, "gone", corpus, gone)
    _enqueue(queue, "kept", corpus, kept)
    gone.unlink()
    state, summary = _run("kept", kept, corpus)
    assert state.is_completed(), state.message  # the other update's missing file is not this run's failure
    assert summary.processed == 1 and not summary.failed
    state, _ = _run("gone", gone, corpus)
    assert state.is_failed() and "no such file" in state.message and "gone.md" in state.message


def _assert_aligned(data_dir: Path) -> None:
    expected = live_status(SinkSettings(data_dir=data_dir)).expected_chunk_ids()
    sinks = open_sinks(reading_settings(SinkSettings()))
    try:
        report = verify_alignment(sinks, expected)
    finally:
        for sink in sinks.values():
            sink.close()
    assert report.ok, report.as_dict()
