"""`unichunk.Pipeline` from a notebook's point of view: real flows on the session's Prefect server, real
stores, and the import that must work whatever the working directory holds."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from documents import write_files

from unichunk import Pipeline, __version__
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.models import Document
from unichunk.chunking.sources import default_source_name
from unichunk.errors import NotFound, UsageError
from unichunk.sinks.config import SinkSettings

REPO = Path(__file__).resolve().parents[2]
CORPUS = {
    "guide.md": "# Guide\n\nQdrant stores vectors for semantic search.\n\n## Setup\n\nInstall Prefect and run the flow.\n",
    "notes/plain.txt": "BM25 ranks chunks by keyword overlap. Alice maintains the keyword index in Berlin.\n",
}


def _corpus(root: Path) -> Path:
    return write_files(root, CORPUS)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_import_works_from_a_folder_holding_modules_named_like_ours(tmp_path: Path) -> None:
    for name in ("tasks", "flows", "index", "chunking"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('the user {name}.py was imported')\n")
    done = _python(
        "from unichunk import Pipeline, Document, __version__\n"
        "import unichunk.flows.ingest, unichunk.tasks.chunk, unichunk.index.run\n"
        "print(unichunk.flows.ingest.__file__, unichunk.tasks.chunk.__file__, unichunk.index.run.__file__, __version__)",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    files = done.stdout.split()[:3]
    assert all(Path(f).is_relative_to(REPO) for f in files), files
    assert (
        done.stdout.split()[3] == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    )


def test_a_users_module_named_like_a_folder_of_ours_is_the_users(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text("VALUE = 1\n")
    done = _python("import tasks\nimport unichunk.tasks.chunk\nprint(tasks.VALUE)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]


def test_version_is_the_installed_distributions() -> None:
    assert __version__ == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_ingest_search_update_delete_verify_from_python(pipeline_env: Path, tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus")
    with Pipeline() as p:
        first = p.ingest(corpus)
        assert (first.listed, first.processed, first.failed) == (2, 2, [])
        assert p.ingest(corpus).skipped == 2  # unchanged: nothing redone

        result = p.search("who maintains the keyword index", k=3)
        top = result.hits[0]
        source = default_source_name(corpus)
        assert top.document_id == derive_document_id(source_system=source, source_id="notes/plain.txt")
        assert CORPUS["notes/plain.txt"][top.start_char : top.end_char] == top.content
        assert result.context is not None and "Alice" in result.context.text
        assert [c.chunk_id for c in p.get_chunks([top.chunk_id, "doc_x::chunk::000::00000000"])] == [
            top.chunk_id
        ]
        assert top.chunk_id in {c.chunk_id for c in p.neighbours(top.chunk_id)}

        # in-memory documents: by name within a named source; a bad name fails alone
        notes = p.ingest(
            {"faq.md": "# FAQ\n\nThe zebra index answers questions about zebras.\n", "../x.md": "no"},
            source_name="notes",
        )
        assert notes.processed == 1
        assert [(f.source_id, f.error.split(":")[0]) for f in notes.failed] == [
            ("../x.md", "InvalidDocumentName")
        ]
        faq_id = derive_document_id(source_system="notes", source_id="faq.md")
        assert p.search("zebra", k=1, mode="keywords").hits[0].document_id == faq_id
        same = p.ingest(
            [Document(text="# FAQ\n\nThe zebra index answers questions about zebras.\n", source_id="faq.md")],
            source_name="notes",
        )
        assert (same.processed, same.skipped) == (0, 1)  # the same text again: unchanged
        changed = p.ingest(
            {"faq.md": "# FAQ\n\nThe okapi index answers questions about okapis.\n"}, source_name="notes"
        )
        assert changed.processed == 1
        assert p.search("okapi", k=1, mode="keywords").hits[0].document_id == faq_id
        assert p.search("zebra", k=3, mode="keywords").hits == []

        status = p.status()
        assert status.live is not None and status.counts["processed"] == 3
        assert p.verify().ok

        removed = p.delete(faq_id)
        assert set(removed) == {"vectors", "keywords", "graph"} and all(removed.values())
        assert not (pipeline_env / "inline" / "notes" / "faq.md").exists()  # a re-index cannot bring it back
        assert p.status().counts["processed"] == 2
        with pytest.raises(NotFound, match="no such document"):
            p.delete(faq_id)
        assert p.verify().ok

        # new chunking beside the live index, verified, then switched to; reads follow the switch
        live = p.status().live
        rebuilt = p.rebuild(strategy=ChunkStrategy(name="sentence"))
        assert rebuilt.outcome == "switched", rebuilt.line()
        assert p.status().live == rebuilt.generation != live
        assert p.search("who maintains the keyword index", k=1).hits[0].document_id == top.document_id
        assert p.verify().ok


def test_settings_given_in_python_reach_the_flows_and_are_undone_after(
    pipeline_env: Path, tmp_path: Path
) -> None:
    corpus = _corpus(tmp_path / "corpus")
    elsewhere = tmp_path / "elsewhere"
    before = os.environ["UNICHUNK_DATA_DIR"]
    with Pipeline(SinkSettings(data_dir=elsewhere), sinks=["keywords"]) as p:
        summary = p.ingest(corpus / "guide.md")
        assert summary.chunks_written.keys() == {"keywords"}
        assert p.search("semantic search vectors", k=1, mode="keywords").hits[0].content.count("Qdrant") == 1
    assert os.environ["UNICHUNK_DATA_DIR"] == before
    assert (elsewhere / "generations").is_dir() and not (pipeline_env / "generations").exists()
    with pytest.raises(UsageError, match="no such file or directory"):
        Pipeline().ingest(tmp_path / "missing")
    with pytest.raises(UsageError, match="need a source_name"):
        Pipeline().ingest({"a.md": "x"})
