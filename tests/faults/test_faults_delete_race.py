"""A file removed while a run is under way is a deletion, not a failure (issue 29, item 3).

A re-index lists its source, then loads batch after batch; files removed in between (their `deleted`
webhooks sent) used to fail the run: `2 document(s) failed (of 40 listed): doc_030.txt (cannot read
file: No such file or directory)`. The run here lists, then the files of later batches are removed (one
of them also deleted through the delete path first, as its webhook would), then the batches load: the
run must end Completed with nothing failed, and the removed documents gone from every store.
"""

from __future__ import annotations

from pathlib import Path

from fault_checks import assert_converged, held, make_corpus
from prefect import flow
from prefect.states import State

from unichunk.chunking.config import ChunkStrategy
from unichunk.engine.batches import delete_leased, finish, run_stores
from unichunk.engine.params import IngestParams, IngestSummary, SourceParams
from unichunk.engine.sources import Listed, sync_listed
from unichunk.flows.ingest import ingest
from unichunk.flows.run_settings import flow_metrics, flow_settings
from unichunk.index.generations import live_status, target_for_ingest
from unichunk.index.run import RunConfig
from unichunk.sinks.config import SinkSettings


@flow(name="ingest-racing-deletes")
def _ingest_racing_deletes(root: str, removed: list[str], deleted_first: list[str]) -> IngestSummary | State:
    """The ingest flow's steps, with `removed` files taken away between the listing and the loading (and
    `deleted_first` of them deleted from the stores meanwhile, as a `deleted` webhook does)."""
    params = SourceParams(root=root)
    source = params.build()
    items = source.list()  # the listing includes every file
    summary = IngestSummary(flow="ingest", listed=len(items))
    run = target_for_ingest(RunConfig(ChunkStrategy(), flow_settings()))
    for name in removed:
        (Path(root) / name).unlink()
    with run_stores(run, dry_run=False) as stores:
        if deleted_first:
            stores.open()
            ids = [item.document_id for item in items if item.source_id in deleted_first]
            delete_leased(run, ids)
        sync_listed(
            [Listed(params, source, items)], run, summary, stores, batch_size=2, dry_run=False, delete=True
        )
    return finish(summary, pushed=flow_metrics())


def test_files_removed_after_listing_are_deleted_and_the_run_completes(fault_env, tmp_path):
    root = tmp_path / "docs"
    paths = make_corpus(root, 8)
    state = ingest(IngestParams(source=SourceParams(root=str(root))), return_state=True)
    assert state.is_completed(), state.message
    status = live_status(SinkSettings(data_dir=fault_env))
    rows = {row.source_id: row for row in status.rows()}
    removed = ["doc_0005.txt", "doc_0007.txt"]  # in the third and fourth batches of two
    their_chunks = {chunk for name in removed for chunk in rows[name].chunk_ids}
    assert their_chunks and all(their_chunks <= ids for ids in held().values())

    for n, path in enumerate(paths):  # every file changed: the run loads them all
        path.write_text(path.read_text() + f"Revision {n}: the harbour crane was serviced.\n")
    state = _ingest_racing_deletes(str(root), removed, ["doc_0007.txt"], return_state=True)
    summary = state.result(raise_on_failure=False)

    assert state.is_completed(), state.message
    assert summary.failed == [], summary.failed
    assert (summary.processed, summary.deleted, summary.skipped) == (6, 1, 1), summary.line()
    left = {row.source_id for row in status.rows()}
    assert left == {f"doc_{n:04d}.txt" for n in range(8)} - set(removed)
    for ids in held().values():
        assert not (their_chunks & ids)
    assert_converged(fault_env)

    state = ingest(IngestParams(source=SourceParams(root=str(root))), return_state=True)  # the next run
    summary = state.result(raise_on_failure=False)
    assert state.is_completed() and (summary.processed, summary.deleted, summary.failed) == (0, 0, [])
