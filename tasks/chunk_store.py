"""Chunks on disk, keyed by what produced them, in the spirit of LlamaIndex's ingestion cache.

The chunk task writes each document's chunks here and passes only a `ChunkKey` on; sink tasks, retries
and reindex repairs read them back. The key is (document_id, content_hash, strategy fingerprint): the
same text under the same settings always maps to the same chunks, so a re-run never chunks twice. The
document ID is part of the key because chunk IDs are scoped to their document (identical text in two
files gives different chunk IDs). The document itself is kept too, since sinks store its source fields.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import TypeAdapter

from chunking.models import Chunk, Document

_CHUNKS = TypeAdapter(list[Chunk])

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    document_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (document_id, content_hash)
);
CREATE TABLE IF NOT EXISTS chunks (
    document_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    body BLOB NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (document_id, content_hash, fingerprint)
);
"""


@dataclass(frozen=True)
class ChunkKey:
    """Names one stored chunk list; this, not the chunks, is what tasks hand each other."""

    document_id: str
    content_hash: str
    fingerprint: str


class ChunkStore:
    """`<data_dir>/chunks.sqlite3`: zlib-compressed JSON of each document and its chunks."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)

    @classmethod
    def in_data_dir(cls, data_dir: str | Path) -> ChunkStore:
        return cls(Path(data_dir) / "chunks.sqlite3")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def put(self, document: Document, fingerprint: str, chunks: list[Chunk]) -> ChunkKey:
        key = ChunkKey(document.document_id, document.content_hash, fingerprint)
        doc_body = zlib.compress(document.model_dump_json().encode())
        chunk_body = zlib.compress(_CHUNKS.dump_json(chunks))
        with self._connect() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO documents VALUES (?, ?, ?)",
                (key.document_id, key.content_hash, doc_body),
            )
            conn.execute(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?, ?)",
                (*_key_tuple(key), len(chunks), chunk_body, datetime.now(UTC).isoformat()),
            )
        return key

    def has(self, key: ChunkKey) -> bool:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT 1 FROM chunks WHERE document_id = ? AND content_hash = ? AND fingerprint = ?",
                _key_tuple(key),
            ).fetchone()
        return row is not None

    def get_chunks(self, key: ChunkKey) -> list[Chunk] | None:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT body FROM chunks WHERE document_id = ? AND content_hash = ? AND fingerprint = ?",
                _key_tuple(key),
            ).fetchone()
        return None if row is None else _CHUNKS.validate_json(zlib.decompress(row[0]))

    def get_document(self, document_id: str, content_hash: str) -> Document | None:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT body FROM documents WHERE document_id = ? AND content_hash = ?",
                (document_id, content_hash),
            ).fetchone()
        return None if row is None else Document.model_validate_json(zlib.decompress(row[0]))

    def load(self, key: ChunkKey) -> tuple[Document, list[Chunk]]:
        """The document and its chunks; KeyError if either is absent (the store was cleared)."""
        document = self.get_document(key.document_id, key.content_hash)
        chunks = self.get_chunks(key)
        if document is None or chunks is None:
            raise KeyError(f"no stored chunks for {key}")
        return document, chunks

    def prune(self, document_id: str, keep_content_hash: str, fingerprint: str) -> int:
        """Drop older versions of a document chunked under `fingerprint` once a newer one is stored everywhere.

        Scoped to one fingerprint: while a rebuild chunks under new settings, the live generation may
        still need its own older chunks (for repair and restore), and the other way round.
        """
        with self._connect() as conn:
            removed = conn.execute(
                "DELETE FROM chunks WHERE document_id = ? AND fingerprint = ? AND content_hash != ?",
                (document_id, fingerprint, keep_content_hash),
            ).rowcount
            conn.execute(
                "DELETE FROM documents WHERE document_id = ? AND content_hash != ? AND NOT EXISTS ("
                "SELECT 1 FROM chunks WHERE chunks.document_id = documents.document_id "
                "AND chunks.content_hash = documents.content_hash)",
                (document_id, keep_content_hash),
            )
            return removed

    def delete_fingerprint(self, fingerprint: str) -> int:
        """Forget every chunk list made under `fingerprint` (a dropped generation's), and orphaned documents."""
        with self._connect() as conn:
            removed = conn.execute("DELETE FROM chunks WHERE fingerprint = ?", (fingerprint,)).rowcount
            conn.execute(
                "DELETE FROM documents WHERE NOT EXISTS (SELECT 1 FROM chunks WHERE "
                "chunks.document_id = documents.document_id AND chunks.content_hash = documents.content_hash)"
            )
            return removed

    def document_ids(self) -> set[str]:
        """Every document with at least one stored chunk list (any version, any settings)."""
        with self._connect() as conn:
            return {row[0] for row in conn.execute("SELECT DISTINCT document_id FROM chunks")}

    def delete_document(self, document_id: str) -> int:
        with self._connect() as conn:
            conn.execute("DELETE FROM documents WHERE document_id = ?", (document_id,))
            return conn.execute("DELETE FROM chunks WHERE document_id = ?", (document_id,)).rowcount


def _key_tuple(key: ChunkKey) -> tuple[str, str, str]:
    return key.document_id, key.content_hash, key.fingerprint
