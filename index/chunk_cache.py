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
from collections.abc import Iterable, Iterator, Sequence
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


class ChunkCache:
    """`<data_dir>/chunks.sqlite3`: zlib-compressed JSON of each document and its chunks."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)

    @classmethod
    def in_data_dir(cls, data_dir: str | Path) -> ChunkCache:
        return cls(Path(data_dir) / "chunks.sqlite3")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        # A cache: in WAL mode NORMAL never corrupts, it only may lose the last commits on power loss
        # (re-chunked on the next run), and it saves an fsync per commit.
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def put(self, document: Document, fingerprint: str, chunks: list[Chunk]) -> ChunkKey:
        return self.put_many([(document, chunks)], fingerprint)[0]

    def put_many(self, entries: Sequence[tuple[Document, list[Chunk]]], fingerprint: str) -> list[ChunkKey]:
        """Store several documents' chunks in one transaction (one commit per batch, not per document)."""
        keys: list[ChunkKey] = []
        documents, chunk_lists = [], []
        now = datetime.now(UTC).isoformat()
        for document, chunks in entries:
            key = ChunkKey(document.document_id, document.content_hash, fingerprint)
            keys.append(key)
            documents.append(
                (key.document_id, key.content_hash, zlib.compress(document.model_dump_json().encode()))
            )
            chunk_lists.append((*_key_tuple(key), len(chunks), zlib.compress(_CHUNKS.dump_json(chunks)), now))
        if keys:
            with self._connect() as conn:
                conn.executemany("INSERT OR REPLACE INTO documents VALUES (?, ?, ?)", documents)
                conn.executemany("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?, ?)", chunk_lists)
        return keys

    def has(self, key: ChunkKey) -> bool:
        return key in self.existing([key])

    def existing(self, keys: Iterable[ChunkKey]) -> set[ChunkKey]:
        """Which of `keys` are stored (one connection for the lot)."""
        found: set[ChunkKey] = set()
        with self._connect() as conn:
            for key in keys:
                if conn.execute(_HAS_CHUNKS, _key_tuple(key)).fetchone():
                    found.add(key)
        return found

    def get_chunks(self, key: ChunkKey) -> list[Chunk] | None:
        return self.get_chunks_many([key]).get(key)

    def get_chunks_many(self, keys: Iterable[ChunkKey]) -> dict[ChunkKey, list[Chunk]]:
        """The stored chunk lists of `keys` (absent keys are left out)."""
        found: dict[ChunkKey, list[Chunk]] = {}
        with self._connect() as conn:
            for key in keys:
                row = conn.execute(_SELECT_CHUNKS, _key_tuple(key)).fetchone()
                if row is not None:
                    found[key] = _CHUNKS.validate_json(zlib.decompress(row[0]))
        return found

    def get_document(self, document_id: str, content_hash: str) -> Document | None:
        with self._connect() as conn:
            return _document(conn, document_id, content_hash)

    def load(self, key: ChunkKey) -> tuple[Document, list[Chunk]]:
        """The document and its chunks; KeyError if either is absent (the store was cleared)."""
        return self.load_many([key])[0]

    def load_many(self, keys: Sequence[ChunkKey]) -> list[tuple[Document, list[Chunk]]]:
        """`load` for a batch, in order, over one connection."""
        loaded: list[tuple[Document, list[Chunk]]] = []
        with self._connect() as conn:
            for key in keys:
                document = _document(conn, key.document_id, key.content_hash)
                row = conn.execute(_SELECT_CHUNKS, _key_tuple(key)).fetchone()
                if document is None or row is None:
                    raise KeyError(f"no stored chunks for {key}")
                loaded.append((document, _CHUNKS.validate_json(zlib.decompress(row[0]))))
        return loaded

    def prune(self, document_id: str, keep_content_hash: str, fingerprint: str) -> int:
        return self.prune_many([ChunkKey(document_id, keep_content_hash, fingerprint)])

    def prune_many(self, keep: Iterable[ChunkKey]) -> int:
        """Drop older versions of documents chunked under a fingerprint once a newer one is stored everywhere.

        `keep` names the version to keep of each document. Scoped to its fingerprint: while a rebuild chunks
        under new settings, the live generation may still need its own older chunks (for repair and
        restore), and the other way round. One transaction for the lot.
        """
        removed = 0
        with self._connect() as conn:
            for key in keep:
                removed += conn.execute(
                    "DELETE FROM chunks WHERE document_id = ? AND fingerprint = ? AND content_hash != ?",
                    (key.document_id, key.fingerprint, key.content_hash),
                ).rowcount
                conn.execute(
                    "DELETE FROM documents WHERE document_id = ? AND content_hash != ? AND NOT EXISTS ("
                    "SELECT 1 FROM chunks WHERE chunks.document_id = documents.document_id "
                    "AND chunks.content_hash = documents.content_hash)",
                    (key.document_id, key.content_hash),
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


_KEY_MATCH = "WHERE document_id = ? AND content_hash = ? AND fingerprint = ?"
_SELECT_CHUNKS = f"SELECT body FROM chunks {_KEY_MATCH}"
_HAS_CHUNKS = f"SELECT 1 FROM chunks {_KEY_MATCH}"


def _document(conn: sqlite3.Connection, document_id: str, content_hash: str) -> Document | None:
    row = conn.execute(
        "SELECT body FROM documents WHERE document_id = ? AND content_hash = ?", (document_id, content_hash)
    ).fetchone()
    return None if row is None else Document.model_validate_json(zlib.decompress(row[0]))
