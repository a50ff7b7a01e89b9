"""Deterministic IDs: same input, same IDs; any change of source, position or content, a new ID."""

from __future__ import annotations

import pytest

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id, make_chunk_id, parse_chunk_id, sha256_hex
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService

TEXT = "\n\n".join(f"Paragraph {i}: some text about item {i}." * 30 for i in range(20))


def test_document_id_from_source_key_else_content() -> None:
    by_source = Document(text="hello", source_system="fs", source_id="a/b.txt")
    assert by_source.document_id == "doc_" + sha256_hex("fs:a/b.txt")[:16]
    assert (
        Document(text="other text", source_system="fs", source_id="a/b.txt").document_id
        == by_source.document_id
    )
    assert Document(text="hello").document_id == "art_" + sha256_hex("hello")[:8]
    assert derive_document_id(source_system="s3", source_id="a/b.txt") != by_source.document_id
    with pytest.raises(ValueError):
        derive_document_id()


def test_chunk_ids_are_stable_across_runs_and_services() -> None:
    document = Document(text=TEXT, source_system="fs", source_id="doc.txt")
    for name in ("token_window", "fixed_chars", "sentence", "paragraph"):
        strategy = ChunkStrategy(name=name, chunk_size=128, chunk_overlap=16, single_piece_max=128)
        first = ChunkingService().chunk(document, strategy)
        second = ChunkingService().chunk(
            Document(text=TEXT, source_system="fs", source_id="doc.txt"), strategy
        )
        assert len(first) > 1
        assert [c.chunk_id for c in first] == [c.chunk_id for c in second]
        for chunk in first:
            assert chunk.chunk_id == make_chunk_id(document.document_id, chunk.chunk_index, chunk.content)
            assert parse_chunk_id(chunk.chunk_id) == (
                document.document_id,
                chunk.chunk_index,
                sha256_hex(chunk.content)[:8],
            )
        assert len({c.chunk_id for c in first}) == len(first)


def test_chunk_id_changes_with_document_index_or_content() -> None:
    base = make_chunk_id("doc_1", 3, "text")
    assert base == f"doc_1::chunk::003::{sha256_hex('text')[:8]}"
    assert make_chunk_id("doc_2", 3, "text") != base
    assert make_chunk_id("doc_1", 4, "text") != base
    assert make_chunk_id("doc_1", 3, "text!") != base
    assert parse_chunk_id(make_chunk_id("doc::odd", 1234, "x"))[:2] == ("doc::odd", 1234)
    with pytest.raises(ValueError):
        parse_chunk_id("not-a-chunk-id")


def test_editing_one_paragraph_changes_only_nearby_chunk_ids() -> None:
    strategy = ChunkStrategy(name="paragraph", chunk_size=128)
    before = ChunkingService().chunk(Document(text=TEXT, source_id="d", source_system="fs"), strategy)
    edited = TEXT.replace("Paragraph 19:", "Paragraph XIX:")
    after = ChunkingService().chunk(Document(text=edited, source_id="d", source_system="fs"), strategy)
    same = [a.chunk_id == b.chunk_id for a, b in zip(before, after, strict=False)]
    assert same[0] and not all(same)
