"""Bad files through the real flows: one bad file never blocks the rest, and is recorded once.

The pipeline-level property: a directory of random and mutated .txt/.md/.html/.pdf/.eml files
(`tests/hostile_bytes.py`) beside good files of every format, ingested by the real `ingest` flow in
small batches, never crashes the flow; every listed file gets a status row; every good file is
processed; every other file is processed or failed with a `load failed:` error; the stores hold exactly
the expected chunk IDs; and a re-run reads none of the failed files again: it reports them as known
unreadable and ends Completed.

Hypothesis draws the corpus, with few examples: each runs two ingests (MiniLM, spaCy, three stores) on
2 cores. The data dir of the `fault_env` fixture is shared by the examples on purpose (hence the
suppressed `function_scoped_fixture` health check): each example replaces the previous one's files by
its own, under names no other example uses, so its ingest also deletes the previous example's
documents, and `assert_converged` checks the stores after a history of runs, not only a fresh one.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from fault_checks import assert_converged
from hostile_bytes import EMAIL_UNKNOWN_CHARSET, SEEDS, SUFFIXES, inputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.engine.params import IngestParams, IngestSummary, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.flows.reindex import reindex
from unichunk.index.chunk_cache import ChunkCache, ChunkKey
from unichunk.index.generations import live_status
from unichunk.index.status import DocumentStatus
from unichunk.sinks.config import SinkSettings

GOOD = {f"good{suffix}": seeds[0] for suffix, seeds in SEEDS.items()} | {
    "good_charset.eml": EMAIL_UNKNOWN_CHARSET,
    "good_note.txt": b"Report: Dara Okafor met Emil Novak in Nairobi to review the BM25 index.\n",
}
_EXAMPLES = itertools.count()


def bad_files() -> st.SearchStrategy[list[tuple[str, bytes]]]:
    """One to three random or mutated files of each of the five formats."""
    per_format = [
        st.lists(inputs(suffix).map(lambda data, s=suffix: (s, data)), min_size=1, max_size=3)
        for suffix in SUFFIXES
    ]
    return st.tuples(*per_format).map(lambda groups: [file for group in groups for file in group])


def _rows_under(data_dir: Path, root: Path) -> dict[str, DocumentStatus]:
    return {
        r.source_id: r
        for r in live_status(SinkSettings(data_dir=data_dir)).rows()
        if r.path and Path(r.path).parent == root
    }


def _write(root: Path, files: dict[str, bytes]) -> None:
    for old in root.iterdir():
        old.unlink()
    for name, data in files.items():
        (root / name).write_bytes(data)


@settings(
    max_examples=6,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(bad=bad_files())
def test_random_and_mutated_files_never_abort_a_run_and_every_good_file_is_stored(fault_env, tmp_path, bad):
    n = next(_EXAMPLES)
    root = tmp_path / "corpus"
    root.mkdir(exist_ok=True)
    good = {f"e{n}_{name}": data for name, data in GOOD.items()}
    files = good | {f"e{n}_bad_{i}{suffix}": data for i, (suffix, data) in enumerate(bad)}
    _write(root, files)
    params = IngestParams(source=SourceParams(root=str(root)), batch_size=4)

    state = ingest(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    assert isinstance(summary, IngestSummary), summary  # a summary, never a crash
    assert summary.listed == len(files)
    rows = _rows_under(fault_env, root)
    assert set(rows) == set(files)  # every listed file has a status row
    for name in good:
        assert rows[name].state == "processed", (name, rows[name].error)
    failed = {name for name, row in rows.items() if row.state != "processed"}
    for name in failed:
        assert rows[name].state == "failed" and rows[name].error.startswith("load failed: "), rows[name]
    assert {f.source_id for f in summary.failed} == failed
    assert state.is_failed() == bool(failed)
    assert_converged(fault_env)

    # Recorded once: a re-run reads none of them again, reports them, and ends Completed.
    state = ingest(params, return_state=True)
    again = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert (again.processed, again.failed, again.skipped) == (0, [], len(files) - len(failed))
    assert {u.source_id for u in again.unreadable} == failed
    assert _rows_under(fault_env, root) == rows


def test_an_unknown_charset_email_is_stored_with_every_good_file_of_its_batches(fault_env, tmp_path):
    """The issue's case: the .eml's LookupError crashed the flow, so nothing of its batch or any later
    batch was stored and the .eml got no row. Now it decodes (its text is UTF-8) and everything lands."""
    root = tmp_path / "corpus"
    root.mkdir()
    files = {
        "a_first.txt": b"Before the e-mail: Alice Martin in Lisbon.\n",
        "b_made_up.eml": EMAIL_UNKNOWN_CHARSET,
        "c_latin1.txt": "Caf\xe9 in Lisbon".encode("latin-1"),  # really unreadable (plain text is UTF-8)
        "d_next.md": b"# Later batch\n\nChen Wei visited Osaka.\n",
        "e_last.html": b"<p>The last batch: Bruno Costa in Toronto.</p>",
    }
    _write(root, files)
    params = IngestParams(source=SourceParams(root=str(root)), batch_size=2)
    state = ingest(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_failed() and [f.source_id for f in summary.failed] == ["c_latin1.txt"]
    rows = _rows_under(fault_env, root)
    assert {name: row.state for name, row in rows.items()} == {
        name: "failed" if name == "c_latin1.txt" else "processed" for name in files
    }
    email = rows["b_made_up.eml"]
    document, chunks = ChunkCache.of(SinkSettings(data_dir=fault_env)).load(
        ChunkKey(email.document_id, email.content_hash, email.chunk_fingerprint)
    )
    assert (
        "Grüße aus München" in document.text and document.metadata["declared_charset"] == "x-made-up-charset"
    )
    assert email.chunk_ids == [c.chunk_id for c in chunks]
    assert_converged(fault_env)


def test_reindex_ends_completed_when_the_only_failures_are_known_unreadable(fault_env, tmp_path):
    """The nightly reindex failed forever while one unreadable file existed; now only its first run
    fails (the failure is new there), later ones report it and complete."""
    root = tmp_path / "corpus"
    root.mkdir()
    _write(root, {"ok.txt": GOOD["good_note.txt"], "bad.txt": b"not \xff UTF-8\n"})
    params = IngestParams(source=SourceParams(root=str(root)))
    state = reindex(params, return_state=True)
    first = state.result(raise_on_failure=False)
    assert state.is_failed() and [f.source_id for f in first.failed] == ["bad.txt"]
    for _ in range(2):
        state = reindex(params, return_state=True)
        summary = state.result(raise_on_failure=False)
        assert state.is_completed(), state.message
        assert [u.source_id for u in summary.unreadable] == ["bad.txt"] and not summary.failed
        assert summary.alignment["ok"] and "1 known unreadable" in summary.line()
    assert [r.source_id for r in live_status(SinkSettings(data_dir=fault_env)).rows(state="failed")] == [
        "bad.txt"
    ]
    assert_converged(fault_env)
