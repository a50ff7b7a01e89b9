"""Document identity includes its source: two folders that share relative paths never overwrite each other.

Before, document IDs hashed `fs:<path relative to the ingest root>`, so after `ingest ./docs` then `ingest
./bulk`, `bulk/intro.md` silently replaced `docs/intro.md`, and every later ingest flipped it back. Now a
document is (source name, path within it); a run with no source named re-scans every source ingested
before (and only those); an index whose IDs were made the old way is rebuilt, not mixed.
"""

from __future__ import annotations

from pathlib import Path

from fault_checks import assert_converged

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import default_source_name
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.flows.reindex import reindex
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.registry import GenerationRegistry
from unichunk.index.run import RunConfig
from unichunk.index.source_registry import SourceRegistry
from unichunk.retrieval import Readers, SearchOptions, search
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks


def _folder(root: Path, intro: str, extra: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "intro.md").write_text(f"# Intro\n\n{intro}\n")
    for name, text in (extra or {}).items():
        (root / name).write_text(text)
    return root


def _run(flow_fn, params: IngestParams):  # type: ignore[no-untyped-def]
    state = flow_fn(params, return_state=True)
    return state, state.result(raise_on_failure=False)


def _hits(query: str) -> list[str]:
    readers = Readers.of(get_sinks(("keywords", "vectors"), reading_settings(SinkSettings())))
    return [h.content for h in search(readers, query, 3, SearchOptions(context=False, graph=False)).hits]


def test_two_roots_with_the_same_relative_paths_are_both_stored_and_independent(fault_env, tmp_path):
    docs = _folder(
        tmp_path / "docs", "Docs intro: the harbour crane lifts containers.", {"a.txt": "Docs only."}
    )
    bulk = _folder(
        tmp_path / "bulk", "Bulk intro: tomatoes ripen in late summer sun.", {"b.txt": "Bulk only."}
    )
    for root in (docs, bulk):
        state, summary = _run(ingest, IngestParams(source=SourceParams(root=str(root))))
        assert state.is_completed() and summary.processed == 2, summary

    status = live_status(SinkSettings(data_dir=fault_env))
    rows = {(r.source_system, r.source_id): r for r in status.rows()}
    assert set(rows) == {
        (default_source_name(docs), "intro.md"),
        (default_source_name(docs), "a.txt"),
        (default_source_name(bulk), "intro.md"),
        (default_source_name(bulk), "b.txt"),
    }
    assert any("harbour crane" in c for c in _hits("harbour crane containers"))
    assert any("tomatoes ripen" in c for c in _hits("tomatoes ripen summer"))
    assert_converged(fault_env)

    bulk_before = {
        r.document_id: (r.last_success_at, r.chunk_ids)
        for r in status.rows(source_system=default_source_name(bulk))
    }
    (docs / "intro.md").write_text("# Intro\n\nDocs intro, edited: the harbour crane was replaced.\n")
    (docs / "a.txt").unlink()
    state, summary = _run(ingest, IngestParams(source=SourceParams(root=str(docs))))
    assert state.is_completed() and (summary.processed, summary.deleted) == (1, 1), summary
    bulk_after = {
        r.document_id: (r.last_success_at, r.chunk_ids)
        for r in status.rows(source_system=default_source_name(bulk))
    }
    assert bulk_after == bulk_before  # re-ingesting docs/ neither rewrote nor deleted anything of bulk/
    assert any("tomatoes ripen" in c for c in _hits("tomatoes ripen summer"))
    assert_converged(fault_env)


def test_a_run_with_no_source_rescans_every_recorded_source_and_keeps_a_vanished_ones_documents(
    fault_env, tmp_path
):
    docs = _folder(tmp_path / "docs", "Docs intro about lighthouses.")
    named = _folder(tmp_path / "elsewhere", "Named intro about ferries.")
    assert _run(ingest, IngestParams(source=SourceParams(root=str(docs))))[0].is_completed()
    params = IngestParams(source=SourceParams(root=str(named), source_system="kb"))
    assert _run(ingest, params)[0].is_completed()
    assert {r.name for r in SourceRegistry.of(SinkSettings(data_dir=fault_env)).all()} == {
        default_source_name(docs),
        "kb",
    }
    kb_intro = derive_document_id(source_system="kb", source_id="intro.md")
    assert (
        live_status(SinkSettings(data_dir=fault_env)).get(kb_intro) is not None
    )  # an explicit name is the ID's source

    (docs / "new.txt").write_text("A file added to docs after its first ingest.\n")
    (named / "intro.md").write_text("# Intro\n\nNamed intro about ferries, edited.\n")
    state, summary = _run(reindex, IngestParams())  # what the nightly reindex does with no source root
    assert state.is_completed(), state.message
    assert (summary.listed, summary.processed, summary.skipped) == (3, 2, 1), summary

    renamed = tmp_path / "docs-moved"
    docs.rename(renamed)  # an unmounted disk, say: its documents must survive the next reindex
    state, summary = _run(reindex, IngestParams())
    assert state.is_completed() and summary.deleted == 0, summary
    assert (
        len(live_status(SinkSettings(data_dir=fault_env)).rows(source_system=default_source_name(docs))) == 2
    )
    assert_converged(fault_env)


def test_an_index_whose_ids_were_made_the_old_way_is_refused_not_mixed(fault_env, tmp_path):
    docs = _folder(tmp_path / "docs", "Docs intro.")
    run = RunConfig(ChunkStrategy(), SinkSettings())
    old = {k: v for k, v in run.describe().items() if k != "document_ids"}
    GenerationRegistry.of(SinkSettings(data_dir=fault_env)).bootstrap(
        "gold0000000", "an-old-fingerprint", old
    )
    state, result = _run(ingest, IngestParams(source=SourceParams(root=str(docs))))
    assert state.is_failed()
    assert "document_ids: None -> 'source name + path'" in str(result) and "rebuild" in str(result)
    assert live_status(SinkSettings(data_dir=fault_env)).rows() == []  # nothing written into the old index


def test_a_file_or_subfolder_of_an_ingested_folder_keeps_its_ids_and_the_folder_its_record(
    fault_env, tmp_path
):
    """Ingesting one file (or a subfolder) of a folder ingested before updates the folder's documents in
    place: no second copy under IDs derived from the file's own folder, and the folder's record, which the
    nightly re-index lists, stays whole."""
    docs = _folder(tmp_path / "docs", "The harbour crane lifts containers.")
    (docs / "guide").mkdir()
    (docs / "guide" / "a.md").write_text("# A\n\nThe lighthouse keeper trims the wick.\n")
    (docs / "guide" / "b.md").write_text("# B\n\nThe ferry leaves at noon.\n")
    state, summary = _run(ingest, IngestParams(source=SourceParams(root=str(docs))))
    assert state.is_completed() and summary.processed == 3, summary
    name = default_source_name(docs)
    a_id = derive_document_id(source_system=name, source_id="guide/a.md")
    before = {r.document_id for r in live_status(SinkSettings(data_dir=fault_env)).rows()}

    (docs / "guide" / "a.md").write_text("# A\n\nThe lighthouse keeper polishes the lens.\n")
    one_file = SourceParams(kind="paths", root=str(docs / "guide"), paths=[str(docs / "guide" / "a.md")])
    state, summary = _run(ingest, IngestParams(source=one_file))
    assert state.is_completed() and (summary.processed, summary.deleted) == (1, 0), summary
    (docs / "guide" / "b.md").unlink()  # the subfolder's run deletes what vanished from the subfolder only
    state, summary = _run(ingest, IngestParams(source=SourceParams(root=str(docs / "guide"))))
    assert state.is_completed() and (summary.listed, summary.deleted) == (1, 1), summary

    rows = {r.document_id: r for r in live_status(SinkSettings(data_dir=fault_env)).rows()}
    assert set(rows) == before - {derive_document_id(source_system=name, source_id="guide/b.md")}
    assert rows[a_id].state == "processed"
    assert "polishes the lens" in _hits("lighthouse keeper lens")[0]
    records = SourceRegistry.of(SinkSettings(data_dir=fault_env)).all()
    assert [(r.name, r.kind, r.root) for r in records] == [(name, "directory", str(docs.resolve()))]

    (docs / "new.md").write_text(
        "# New\n\nA new page about tugboats.\n"
    )  # the re-index still lists the folder
    state, summary = _run(reindex, IngestParams())
    assert state.is_completed() and summary.processed == 1, summary
    assert_converged(fault_env)
