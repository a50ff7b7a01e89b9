"""A document that failed is listed to the readers of its source, never to others: with the labels it was
listed with while no store holds a version of it, with the labels its stored chunks carry once one does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from unichunk import Pipeline
from unichunk.access import Principal
from unichunk.sinks.config import SinkSettings

ENG = Principal(name="eng", labels=("eng",))
HR = Principal(name="hr", labels=("hr",))
UNICHUNK = str(Path(sys.executable).parent / "unichunk")
GUIDE = "# Guide\n\nAlice Johnson runs the Berlin office of Acme Corporation.\n"


def _by_source(pipeline: Pipeline) -> dict[str, object]:
    return {info.source_id: info for info in pipeline.documents().values()}


def test_a_new_document_that_failed_is_listed_to_its_sources_readers_alone(
    pipeline_env: Path, tmp_path: Path
):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text(GUIDE)
    (folder / "broken.pdf").write_bytes(b"this is no PDF at all")
    with Pipeline() as owner:
        summary = owner.ingest(folder, labels=["eng"])
        assert summary.processed == 1 and len(summary.failed) == 1, summary
        eng = owner.scoped(ENG)
        listed = _by_source(eng)
        assert set(listed) == {"guide.md", "broken.pdf"}
        broken = listed["broken.pdf"]
        assert broken.state == "failed" and broken.labels == ["eng"] and broken.chunk_count == 0
        assert broken.error.startswith("load failed: broken.pdf: ") and broken.path is None
        assert eng.document(broken.document_id).document.error == broken.error
        assert list(eng.documents(state="failed")) == [broken.document_id]
        assert set(eng.documents(source=broken.source_system)) == {i.document_id for i in listed.values()}
        assert eng.documents(source="another-source") == {}
        assert eng.documents([broken.document_id], state="processed") == {}
        assert owner.scoped(HR).documents() == {}  # another source's readers see nothing of it
        assert owner.verify().ok  # nothing stored for it, in any store

        (folder / "broken.pdf").unlink()  # a run with the source's new labels takes them, failure and all
        (folder / "other.pdf").write_bytes(b"nor is this")
        owner.ingest(folder, labels=["hr"])
        assert set(_by_source(owner.scoped(HR))) == {"guide.md", "other.pdf"}
        assert _by_source(owner.scoped(ENG)) == {}
    # the CLI in its own process, no service running: the owner's view, the failure's error whole
    listed = subprocess.run(
        [UNICHUNK, "documents", "--failed"], capture_output=True, text=True, timeout=300, check=False
    )
    assert listed.returncode == 0, listed.stderr
    assert "other.pdf" in listed.stdout and "guide.md" not in listed.stdout
    assert "load failed: other.pdf: not a PDF file" in " ".join(listed.stdout.split())
    assert "1 document(s)" in listed.stdout


def test_a_failed_update_keeps_the_labels_its_stored_chunks_carry(pipeline_env: Path, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text(GUIDE)
    with Pipeline() as owner:
        owner.ingest(folder, labels=["eng"])
        stored = owner.documents()
    (folder / "guide.md").write_text(GUIDE * 20)  # over the limit below: the update fails to load
    with Pipeline(SinkSettings(max_document_bytes=len(GUIDE) * 2)) as strict:
        summary = strict.ingest(folder, labels=["hr"])
        assert len(summary.failed) == 1, summary
        (info,) = strict.scoped(ENG).documents().values()  # the eng chunks are still what is stored
        assert info.state == "failed" and info.labels == ["eng"] and info.chunk_count > 0
        assert info.document_id in stored and strict.scoped(HR).documents() == {}
        report = strict.verify()
        assert report.ok and not any(report.mislabelled.values()), report
    with Pipeline() as owner:  # the file fits again: written whole, with the source's labels
        owner.ingest(folder, labels=["hr"])
        (info,) = owner.scoped(HR).documents().values()
        assert info.state == "processed" and info.labels == ["hr"]
        assert owner.scoped(ENG).documents() == {}
        assert owner.verify().ok
