"""Documents with hand-made chunks for the store tests: exactly the pieces given, real IDs and offsets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document

MakeDoc = Callable[..., tuple[Document, list[Chunk]]]


def make_document(
    document_id: str, pieces: Sequence[str], title: str | None = None
) -> tuple[Document, list[Chunk]]:
    """A document whose chunks are exactly `pieces`, joined by one space, with real IDs and offsets."""
    document = Document(document_id=document_id, text=" ".join(pieces), title=title)
    spans, start = [], 0
    for piece in pieces:
        spans.append(Span(start, start + len(piece), token_count=len(piece.split())))
        start += len(piece) + 1
    return document, chunks_from_spans(document, spans)


def write_files(root: Path, files: Mapping[str, str]) -> Path:
    """A folder holding `files` (relative path -> text), for tests that ingest a small corpus; returns it."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root
