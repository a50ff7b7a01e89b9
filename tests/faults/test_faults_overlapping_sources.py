"""One file, one document: two sources over the same files never store them twice (issue 29, item 4).

`ingest ov/` and `ingest ov/sub/` at once stored the 20 files under `sub/` twice in every store, and so did
the subfolder first, then its parent. Now a source that overlaps one recorded under another name is refused
(SourceOverlap, the CLI's exit 2) naming both roots, the check and the registration being one transaction
of the records store; a subfolder named after its parent is still ingested as part of it. And `verify`
reports one file stored under two document IDs, which the stores' chunk IDs alone cannot show.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import replace
from pathlib import Path

from fault_checks import assert_converged, make_corpus

from unichunk import Pipeline
from unichunk.chunking.ids import default_source_name
from unichunk.deployments.cli.exit_codes import ExitCode, exit_code_for
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.errors import SourceOverlap
from unichunk.flows.ingest import ingest
from unichunk.index.alignment import verify_live
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.source_registry import SourceRegistry
from unichunk.index.status import StatusStore
from unichunk.sinks.config import SinkSettings


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    parent = tmp_path / "ov"
    make_corpus(parent, 3)
    make_corpus(parent / "sub", 4, start=10)
    return parent, parent / "sub"


def _ingest(root: Path):  # type: ignore[no-untyped-def]
    state = ingest(IngestParams(source=SourceParams(root=str(root))), return_state=True)
    return state, state.result(raise_on_failure=False)


def _stored_once(data_dir: Path) -> None:
    rows = live_status(SinkSettings(data_dir=data_dir)).rows()
    paths = [row.path for row in rows]
    assert len(paths) == len(set(paths)), sorted(paths)  # each file under one document ID
    report = verify_live(SinkSettings(data_dir=data_dir))
    assert report.ok and report.stored_twice == {}, report.as_dict()
    assert_converged(data_dir)


def test_the_subfolder_first_then_its_parent_is_refused_naming_both(fault_env, tmp_path):
    parent, sub = _tree(tmp_path)
    state, summary = _ingest(sub)
    assert state.is_completed() and summary.processed == 4, summary
    state, result = _ingest(parent)
    assert state.is_failed()
    assert isinstance(result, SourceOverlap), result
    assert str(parent) in str(result) and str(sub) in str(result) and "Ingest one of them only" in str(result)
    assert exit_code_for(result) == ExitCode.USAGE
    assert len(live_status(SinkSettings(data_dir=fault_env)).rows()) == 4  # nothing of the parent stored
    _stored_once(fault_env)

    # The way out the message names: forget the subfolder's source, then the parent goes in whole.
    assert "forget-source" in str(result) and default_source_name(sub) in str(result)
    with Pipeline(SinkSettings()) as pipeline:
        assert pipeline.forget_source(default_source_name(sub)) == 4
    state, summary = _ingest(parent)
    assert state.is_completed() and summary.processed == 7, summary
    assert [r.root for r in SourceRegistry.of(SinkSettings(data_dir=fault_env)).all()] == [str(parent)]
    _stored_once(fault_env)


def test_the_parent_first_then_its_subfolder_is_ingested_as_part_of_it(fault_env, tmp_path):
    parent, sub = _tree(tmp_path)
    assert _ingest(parent)[0].is_completed()
    (sub / "doc_0010.txt").write_text("Report 10, revised: the crane was serviced in Lisbon.\n")
    state, summary = _ingest(sub)
    assert state.is_completed() and (summary.processed, summary.deleted) == (1, 0), summary
    assert len(live_status(SinkSettings(data_dir=fault_env)).rows()) == 7
    _stored_once(fault_env)


def test_two_concurrent_ingests_of_a_folder_and_its_subfolder_store_each_file_once(fault_env, tmp_path):
    """Whichever registers second is refused, naming both roots, unless the parent was recorded before
    the subfolder's run began: then that run is the parent's own (a part of a recorded folder is ingested
    as part of it) and both complete. Either way every file is stored once, under one source."""
    parent, sub = _tree(tmp_path)
    outcomes: dict[str, object] = {}
    go = threading.Barrier(2)

    def run(name: str, root: Path) -> None:
        go.wait()
        state, result = _ingest(root)
        outcomes[name] = result if state.is_failed() else "completed"

    threads = [  # each in a copy of this context: Prefect's settings (the test server's URL) live there
        threading.Thread(target=contextvars.copy_context().run, args=(run, n, r))
        for n, r in (("parent", parent), ("sub", sub))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    refused = [r for r in outcomes.values() if isinstance(r, SourceOverlap)]
    completed = list(outcomes.values()).count("completed")
    assert (len(refused), completed) in ((1, 1), (0, 2)), outcomes
    if refused:
        assert str(parent) in str(refused[0]) and str(sub) in str(refused[0])
    else:  # the subfolder's run was the parent's
        names = {row.source_system for row in live_status(SinkSettings(data_dir=fault_env)).rows()}
        assert names == {default_source_name(parent)}, names
    assert len(SourceRegistry.of(SinkSettings(data_dir=fault_env)).all()) == 1
    _stored_once(fault_env)


def test_verify_reports_one_file_stored_under_two_document_ids(fault_env, tmp_path):
    """What the issue saw, made on purpose: the subfolder's files under an explicit second name are
    refused now, so the duplicate is made the old way, by writing the status rows of a second source."""
    _, sub = _tree(tmp_path)
    assert _ingest(sub)[0].is_completed()
    status = StatusStore.of(reading_settings(SinkSettings()))
    row = status.rows()[0]
    twin = replace(row, document_id="doc_twin0000000000000000", source_system="twin")
    skip = ("document_id", "created_at", "updated_at")
    status.upsert_many([(twin.document_id, {k: v for k, v in twin.as_dict().items() if k not in skip})])
    report = verify_live(SinkSettings(data_dir=fault_env))
    assert report.stored_twice == {row.path: sorted([row.document_id, twin.document_id])}
    assert report.as_dict()["ok"] is False
    assert row.content_hash in report.same_content
