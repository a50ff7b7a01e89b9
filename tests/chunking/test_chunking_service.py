"""ChunkingService: auto strategy resolution, chunker cache, env settings, Prometheus metrics."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys

import pytest
from prometheus_client import REGISTRY

from unichunk.chunking import config
from unichunk.chunking.config import (
    AUTO_DEFAULTS,
    STRATEGY_DEFAULTS,
    ChunkStrategy,
    EmbeddingBudget,
    default_strategy,
)
from unichunk.chunking.models import Block, Document
from unichunk.chunking.service import ChunkingService, document_kind, resolve_strategy, resolve_strategy_name

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
        ({"mime_type": "text/plain", "path": "a.txt"}, "sentence"),
        ({"mime_type": "application/pdf"}, "sentence"),
        ({"mime_type": "message/rfc822", "path": "mail.eml"}, "sentence"),
        ({}, "sentence"),
    ],
)
def test_auto_resolution_by_mime_extension_and_blocks(fields: dict, expected: str) -> None:
    assert resolve_strategy_name(Document(text="text", **fields), AUTO) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"path": "a.txt"}, ("sentence", 176, 88)),
        ({"mime_type": "application/pdf"}, ("sentence", 176, 88)),
        ({"path": "a.md"}, ("markdown", 176, 88)),
        ({"path": "a.html"}, ("html", 220, 0)),
    ],
)
def test_auto_uses_the_benchmarked_sizes_per_kind(fields: dict, expected: tuple) -> None:
    """The shipped default follows the README's retrieval benchmark under all-MiniLM-L6-v2's 256 word
    pieces; html keeps its own word packing under that token ceiling."""
    settings = resolve_strategy(Document(text="text", **fields), AUTO)
    assert (settings.name, settings.chunk_size, settings.chunk_overlap) == expected
    assert settings.sizes_for(settings.name) == expected[1:]


def test_auto_keeps_the_unfitted_sizes_for_an_embedder_reading_more() -> None:
    openai = ChunkStrategy(embedding=EmbeddingBudget(max_tokens=8191, tokenizer="cl100k_base"))
    for kind, (name, size, overlap) in AUTO_DEFAULTS.items():
        settings = openai.for_kind(kind)  # type: ignore[arg-type]
        assert (settings.name, settings.chunk_size, settings.chunk_overlap) == (name, size, overlap)


def test_auto_sizes_fill_only_what_the_user_left_unset() -> None:
    text = Document(text="text", path="a.txt")
    half = resolve_strategy(text, ChunkStrategy(chunk_size=300))  # keeps the default's half overlap
    assert half.sizes_for("sentence") == (300, 150)
    assert resolve_strategy(text, ChunkStrategy(chunk_overlap=0)).sizes_for("sentence") == (176, 0)
    assert resolve_strategy(text, ChunkStrategy(chunk_size=128)).sizes_for("sentence") == (128, 64)
    only_size = resolve_strategy(text, ChunkStrategy(chunk_size=200, chunk_overlap=10))
    assert (only_size.name, only_size.chunk_size, only_size.chunk_overlap) == ("sentence", 200, 10)
    # a strategy named explicitly keeps its own defaults (issue 2), not auto's
    explicit = resolve_strategy(text, ChunkStrategy(name="sentence"))
    assert explicit.chunk_size is None and explicit.sizes_for("sentence") == STRATEGY_DEFAULTS["sentence"]
    assert ChunkStrategy(name="token_window").sizes_for("token_window") == STRATEGY_DEFAULTS["token_window"]


def test_auto_chunks_plain_text_at_the_auto_size() -> None:
    """Real chunking: the text chunks are sentence chunks no larger than auto's 176 tokens."""
    text = " ".join(f"Sentence number {i} says something about topic {i % 7}." for i in range(600))
    chunks = ChunkingService().chunk(Document(text=text, path="notes.txt"), AUTO)
    assert len(chunks) > 3
    assert {c.metadata["strategy"] for c in chunks} == {"sentence"}
    assert max(c.token_count for c in chunks) <= 176
    assert max(c.token_count for c in chunks) > 150  # packed up to the size, not left as tiny pieces
    assert all(b.start_char < a.end_char for a, b in itertools.pairwise(chunks))  # the 88-token overlap


def test_fingerprint_changes_when_a_default_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks are keyed by the fingerprint, so a changed default must not reuse chunks made under the old."""
    auto, sentence = ChunkStrategy(), ChunkStrategy(name="sentence")
    explicit = ChunkStrategy(name="sentence", chunk_size=300, chunk_overlap=30)
    before = (auto.fingerprint(), sentence.fingerprint(), explicit.fingerprint())
    assert before == (ChunkStrategy().fingerprint(), ChunkStrategy(name="sentence").fingerprint(),
                      explicit.fingerprint())  # fmt: skip
    monkeypatch.setattr(config, "AUTO_BUDGET_SHARE", 0.9)  # auto's sizes under the embedder's limit
    assert auto.fingerprint() != before[0]
    assert (sentence.fingerprint(), explicit.fingerprint()) == before[1:]
    monkeypatch.undo()
    monkeypatch.setitem(config.AUTO_DEFAULTS, "text", ("sentence", 200, 30))
    assert auto.fingerprint() != before[0]
    assert (sentence.fingerprint(), explicit.fingerprint()) == before[1:]
    monkeypatch.setitem(config.STRATEGY_DEFAULTS, "sentence", (500, 100))
    assert sentence.fingerprint() != before[1]
    assert explicit.fingerprint() == before[2]  # both sizes set: the defaults cannot matter
    assert ChunkStrategy(name="paragraph").fingerprint() != ChunkStrategy(name="markdown").fingerprint()


@pytest.mark.parametrize(
    ("fields", "kind"),
    [({"path": "x.MARKDOWN"}, "markdown"), ({"mime_type": "application/xhtml+xml"}, "html"), ({}, "text")],
)
def test_document_kind(fields: dict, kind: str) -> None:
    assert document_kind(Document(text="text", **fields)) == kind


def test_explicit_strategy_wins_over_type() -> None:
    document = Document(text="text", mime_type="text/markdown")
    assert resolve_strategy_name(document, ChunkStrategy(name="sentence")) == "sentence"


def test_strategy_none_is_the_built_in_one_whatever_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only an entry point reads UNICHUNK_CHUNK_* (`ChunkStrategy()`); a library call without a strategy
    chunks as the built-in one does, so the process's environment cannot change its chunks."""
    monkeypatch.setenv("UNICHUNK_CHUNK_NAME", "fixed_chars")
    monkeypatch.setenv("UNICHUNK_CHUNK_CHUNK_SIZE", "200")
    monkeypatch.setenv("UNICHUNK_CHUNK_CHUNK_OVERLAP", "0")
    document = Document(text="x" * 500)
    chunks = ChunkingService().chunk(document)
    assert {c.metadata["strategy"] for c in chunks} == {"sentence"}  # auto's choice for plain text
    assert chunks == ChunkingService().chunk(document, default_strategy())
    from_environment = ChunkingService().chunk(document, ChunkStrategy())  # what an entry point reads
    assert [(c.start_char, c.end_char) for c in from_environment] == [(0, 200), (200, 400), (400, 500)]
    assert {c.metadata["strategy"] for c in from_environment} == {"fixed_chars"}


def test_chunkers_are_cached_per_name_and_settings() -> None:
    service = ChunkingService()
    text_doc, other_doc = Document(text="a b c"), Document(text="d e f", path="x.txt")
    first = service.chunker_for(text_doc, AUTO)
    assert service.chunker_for(other_doc, ChunkStrategy(name="auto")) is first
    assert first.name == "sentence"
    assert first.strategy.sizes_for("sentence") == (176, 88)
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
    if importlib.util.find_spec("unichunk.chunking.markdown") is None:
        pytest.skip("chunking/markdown.py is not written yet")
    chunks = ChunkingService().chunk(Document(text="# Title\n\nSome text.", path="a.md"), AUTO)
    assert chunks and chunks[0].metadata["strategy"] == "markdown"


def test_import_is_light_and_strategies_load_lazily() -> None:
    code = (
        "import sys, chunking\n"
        "heavy = [m for m in ('bs4', 'pypdf', 'llama_index.core', 'lxml', 'unichunk.chunking.markdown', 'unichunk.chunking.html',"
        " 'unichunk.chunking.html_extract', 'unichunk.chunking.sentence') if m in sys.modules]\n"
        "print(heavy)\n"
        "assert not heavy, heavy\n"
        "for name in ('Document', 'Chunk', 'Block', 'ChunkStrategy', 'ChunkingService', 'load_document',"
        " 'DirectorySource', 'PathsSource', 'should_chunk', 'DocumentLoadError', 'EmptyDocumentError',"
        " 'UndecodableTextError', 'UnsupportedFormatError', 'UnichunkError'):\n"
        "    getattr(chunking, name)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr + result.stdout
