"""ChunkingService: auto strategy resolution, chunker cache, env settings, Prometheus metrics."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from prometheus_client import REGISTRY

from chunking.config import ChunkStrategy
from chunking.models import Block, Document
from chunking.service import ChunkingService, resolve_strategy_name

AUTO = ChunkStrategy(name="auto")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"mime_type": "text/markdown"}, "markdown"),
        ({"path": "notes/readme.MD"}, "markdown"),
        ({"source_id": "a/b.markdown"}, "markdown"),
        ({"mime_type": "text/html; charset=utf-8"}, "html"),
        ({"path": "page.htm"}, "html"),
        ({"blocks": (Block(kind="paragraph", start=0, end=4),)}, "html"),
        ({"mime_type": "text/plain", "path": "a.txt"}, "token_window"),
        ({"mime_type": "application/pdf"}, "token_window"),
        ({}, "token_window"),
    ],
)
def test_auto_resolution_by_mime_extension_and_blocks(fields: dict, expected: str) -> None:
    assert resolve_strategy_name(Document(text="text", **fields), AUTO) == expected


def test_explicit_strategy_wins_over_type() -> None:
    document = Document(text="text", mime_type="text/markdown")
    assert resolve_strategy_name(document, ChunkStrategy(name="sentence")) == "sentence"


def test_strategy_none_reads_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICHUNK_CHUNK_NAME", "fixed_chars")
    monkeypatch.setenv("UNICHUNK_CHUNK_CHUNK_SIZE", "200")
    monkeypatch.setenv("UNICHUNK_CHUNK_CHUNK_OVERLAP", "0")
    chunks = ChunkingService().chunk(Document(text="x" * 500))
    assert [(c.start_char, c.end_char) for c in chunks] == [(0, 200), (200, 400), (400, 500)]
    assert {c.metadata["strategy"] for c in chunks} == {"fixed_chars"}


def test_chunkers_are_cached_per_name_and_settings() -> None:
    service = ChunkingService()
    text_doc, other_doc = Document(text="a b c"), Document(text="d e f", path="x.txt")
    first = service.chunker_for(text_doc, AUTO)
    assert service.chunker_for(other_doc, ChunkStrategy(name="auto")) is first
    assert first.name == "token_window"
    assert service.chunker_for(text_doc, ChunkStrategy(name="auto", chunk_size=300)) is not first
    assert service.chunker_for(text_doc, ChunkStrategy(name="sentence")).name == "sentence"


def _sample(name: str, strategy: str) -> float:
    return REGISTRY.get_sample_value(name, {"strategy": strategy}) or 0.0


def test_metrics_are_recorded_per_strategy() -> None:
    text = "\n\n".join(f"Paragraph {i} with a few words." for i in range(300))
    before_chunks = _sample("unichunk_chunks_created_total", "paragraph")
    before_runs = _sample("unichunk_chunking_duration_seconds_count", "paragraph")
    before_sizes = _sample("unichunk_chunk_size_tokens_count", "paragraph")
    before_tokens = _sample("unichunk_chunk_size_tokens_sum", "paragraph")
    chunks = ChunkingService().chunk(Document(text=text), ChunkStrategy(name="paragraph", chunk_size=128))
    assert _sample("unichunk_chunks_created_total", "paragraph") - before_chunks == len(chunks)
    assert _sample("unichunk_chunking_duration_seconds_count", "paragraph") - before_runs == 1
    assert _sample("unichunk_chunk_size_tokens_count", "paragraph") - before_sizes == len(chunks)
    assert _sample("unichunk_chunk_size_tokens_sum", "paragraph") - before_tokens == sum(
        c.token_count for c in chunks
    )


def test_auto_markdown_uses_the_markdown_chunker_when_available() -> None:
    if importlib.util.find_spec("chunking.markdown") is None:
        pytest.skip("chunking/markdown.py is not written yet")
    chunks = ChunkingService().chunk(Document(text="# Title\n\nSome text.", path="a.md"), AUTO)
    assert chunks and chunks[0].metadata["strategy"] == "markdown"


def test_import_is_light_and_strategies_load_lazily() -> None:
    code = (
        "import sys, chunking\n"
        "heavy = [m for m in ('bs4', 'pypdf', 'llama_index.core', 'lxml', 'chunking.markdown', 'chunking.html',"
        " 'chunking.html_extract', 'chunking.sentence') if m in sys.modules]\n"
        "print(heavy)\n"
        "assert not heavy, heavy\n"
        "for name in ('Document', 'Chunk', 'Block', 'ChunkStrategy', 'ChunkingService', 'load_document',"
        " 'expand_neighbors', 'embed_text', 'should_chunk', 'DocumentLoadError', 'EmptyDocumentError',"
        " 'UndecodableTextError', 'UnsupportedFormatError'):\n"
        "    getattr(chunking, name)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr + result.stdout
