"""Chunks stored, keyed by what produced them, in the spirit of LlamaIndex's ingestion cache.

The chunk task writes each document's chunks here and passes only a `ChunkKey` on; sink tasks, retries
and reindex repairs read them back. The key is (document_id, content_hash, strategy fingerprint): the
same text under the same settings always maps to the same chunks, so a re-run never chunks twice. The
document ID is part of the key because chunk IDs are scoped to their document (identical text in two
files gives different chunk IDs). The document itself is kept too, since sinks store its source fields.

Embedded, `<data_dir>/chunks.sqlite3`; in server mode the schema `unichunk_chunk_cache` of the database
(its own: its table names are those a generation's status and keyword tables use). Documents and chunk
lists are zlib-compressed JSON blobs, so any text (a NUL, any code point) round-trips on both. Every call is
one transaction of a few statements, whatever the number of keys (lists bound as arrays on PostgreSQL).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import Connection, text

from unichunk.chunking.access_labels import LABELS_KEY
from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_store_database

_CHUNKS = TypeAdapter(list[Chunk])

# The embedded tables, exactly as data dirs made before server mode have them.
_SQLITE_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS documents (
    document_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (document_id, content_hash)
)""",
    """
CREATE TABLE IF NOT EXISTS chunks (
    document_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    body BLOB NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (document_id, content_hash, fingerprint)
)""",
]
# The same on PostgreSQL: a document ID may be any text (BYTEA, see `Database.pack`); bodies are BYTEA.
_POSTGRES_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS documents (
    document_id BYTEA NOT NULL,
    content_hash TEXT NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (document_id, content_hash)
)""",
    """
CREATE TABLE IF NOT EXISTS chunks (
    document_id BYTEA NOT NULL,
    content_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    body BYTEA NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (document_id, content_hash, fingerprint)
)""",
]
CACHE_STORE = "chunk_cache"  # its PostgreSQL schema: `unichunk_chunk_cache` (`open_store_database`)
_KEY_COLUMNS = ("document_id", "content_hash", "fingerprint")
_KEY_TYPES = ("bytea", "text", "text")
# The orphaned documents: no chunk list of any fingerprint refers to them any more.
_ORPHANED = (
    "NOT EXISTS (SELECT 1 FROM chunks WHERE chunks.document_id = documents.document_id "
    "AND chunks.content_hash = documents.content_hash)"
)


@dataclass(frozen=True)
class ChunkKey:
    """Names one stored chunk list; this, not the chunks, is what tasks hand each other."""

    document_id: str
    content_hash: str
    fingerprint: str
    # The access labels the document is written with (None: as cached). Not part of the key: the same
    # content is chunked once whatever its labels; `load` hands the document back carrying these.
    labels: tuple[str, ...] | None = field(default=None, compare=False)


class ChunkCache:
    """zlib-compressed JSON of each document and its chunks (see the module docstring for where)."""

    def __init__(self, database: Database) -> None:
        self.db = database
        database.ensure(_POSTGRES_SCHEMA if database.dialect == "postgresql" else _SQLITE_SCHEMA)

    @classmethod
    def of(cls, settings: SinkSettings) -> ChunkCache:
        return cls(open_store_database(settings, settings.data_dir / "chunks.sqlite3", CACHE_STORE))

    # --- writes --------------------------------------------------------------------------------------

    def put(self, document: Document, fingerprint: str, chunks: list[Chunk]) -> ChunkKey:
        return self.put_many([(document, chunks)], fingerprint)[0]

    def put_many(self, entries: Sequence[tuple[Document, list[Chunk]]], fingerprint: str) -> list[ChunkKey]:
        """Store several documents' chunks in one transaction (one commit per batch, not per document)."""
        keys: list[ChunkKey] = []
        documents: dict[tuple[str, str], dict[str, Any]] = {}
        chunk_lists: dict[ChunkKey, dict[str, Any]] = {}
        now = datetime.now(UTC).isoformat()
        for document, chunks in entries:
            key = ChunkKey(document.document_id, document.content_hash, fingerprint)
            keys.append(key)
            body = zlib.compress(document.model_dump_json().encode())
            documents[(key.document_id, key.content_hash)] = {
                "d": self.db.pack(key.document_id),
                "h": key.content_hash,
                "body": body,
            }
            chunk_lists[key] = {
                **self._key_params(key),
                "n": len(chunks),
                "body": zlib.compress(_CHUNKS.dump_json(chunks)),
                "at": now,
            }
        if keys:
            with self._writing(sorted({k.document_id for k in keys})) as conn:
                # Sorted, so two transactions writing the same rows lock them in one order.
                conn.execute(
                    text(
                        "INSERT INTO documents (document_id, content_hash, body) VALUES (:d, :h, :body) "
                        "ON CONFLICT (document_id, content_hash) DO UPDATE SET body = excluded.body"
                    ),
                    [documents[k] for k in sorted(documents)],
                )
                conn.execute(
                    text(
                        "INSERT INTO chunks (document_id, content_hash, fingerprint, chunk_count, body, "
                        "created_at) VALUES (:d, :h, :f, :n, :body, :at) ON CONFLICT (document_id, "
                        "content_hash, fingerprint) DO UPDATE SET chunk_count = excluded.chunk_count, "
                        "body = excluded.body, created_at = excluded.created_at"
                    ),
                    [chunk_lists[k] for k in sorted(chunk_lists, key=_key_tuple)],
                )
        return keys

    def prune(self, document_id: str, keep_content_hash: str, fingerprint: str) -> int:
        return self.prune_many([ChunkKey(document_id, keep_content_hash, fingerprint)])

    def prune_many(self, keep: Iterable[ChunkKey]) -> int:
        """Drop older versions of documents chunked under a fingerprint once a newer one is stored everywhere.

        `keep` names the version to keep of each document. Scoped to its fingerprint: while a rebuild chunks
        under new settings, the live generation may still need its own older chunks (for repair and
        restore), and the other way round. One transaction for the lot."""
        keys = sorted(set(keep), key=_key_tuple)
        if not keys:
            return 0
        params = [self._key_params(key) for key in keys]
        with self._writing(sorted({k.document_id for k in keys})) as conn:
            removed = conn.execute(
                text("DELETE FROM chunks WHERE document_id = :d AND fingerprint = :f AND content_hash != :h"),
                params,
            ).rowcount
            conn.execute(
                text(f"DELETE FROM documents WHERE document_id = :d AND content_hash != :h AND {_ORPHANED}"),
                params,
            )
        return removed

    def delete_fingerprint(self, fingerprint: str) -> int:
        """Forget every chunk list made under `fingerprint` (a dropped generation's), and orphaned documents."""
        with self._writing(None) as conn:
            removed = conn.execute(
                text("DELETE FROM chunks WHERE fingerprint = :f"), {"f": fingerprint}
            ).rowcount
            conn.execute(text(f"DELETE FROM documents WHERE {_ORPHANED}"))
            return removed

    def delete_document(self, document_id: str) -> int:
        return self.delete_documents([document_id])

    def delete_documents(self, document_ids: Iterable[str]) -> int:
        """Forget every version of `document_ids` (deleted documents); chunk lists removed."""
        ids = sorted(dict.fromkeys(document_ids))
        if not ids:
            return 0
        packed = [self.db.pack(d) for d in ids]
        removed = 0
        with self._writing(ids) as conn:
            for table in ("documents", "chunks"):
                statement = self.db.statement(
                    f"DELETE FROM {table} WHERE {self.db.any_of('document_id', 'ids')}", "ids"
                )
                for part in self.db.parts(packed):
                    count = conn.execute(statement, {"ids": list(part)}).rowcount
                    removed += count if table == "chunks" else 0
        return removed

    # --- reads ---------------------------------------------------------------------------------------

    def has(self, key: ChunkKey) -> bool:
        return key in self.existing([key])

    def existing(self, keys: Iterable[ChunkKey]) -> set[ChunkKey]:
        """Which of `keys` are stored (one statement for the lot)."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return set()
        with self.db.read() as conn:
            return {key for key, _ in self._select(conn, "chunks", "1", wanted)}

    def get_chunks(self, key: ChunkKey) -> list[Chunk] | None:
        return self.get_chunks_many([key]).get(key)

    def get_chunks_many(self, keys: Iterable[ChunkKey]) -> dict[ChunkKey, list[Chunk]]:
        """The stored chunk lists of `keys` (absent keys are left out)."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        with self.db.read() as conn:
            return {key: _chunks(body) for key, body in self._select(conn, "chunks", "body", wanted)}

    def get_document(self, document_id: str, content_hash: str) -> Document | None:
        with self.db.read() as conn:
            return self._documents(conn, [(document_id, content_hash)]).get((document_id, content_hash))

    def load(self, key: ChunkKey) -> tuple[Document, list[Chunk]]:
        """The document and its chunks; KeyError if either is absent (the store was cleared)."""
        return self.load_many([key])[0]

    def load_many(self, keys: Sequence[ChunkKey]) -> list[tuple[Document, list[Chunk]]]:
        """`load` for a batch, in order, in one read transaction of two statements."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return []
        with self.db.read() as conn:
            chunk_lists = dict(self._select(conn, "chunks", "body", wanted))
            documents = self._documents(conn, [(k.document_id, k.content_hash) for k in wanted])
        loaded: list[tuple[Document, list[Chunk]]] = []
        for key in keys:
            document = documents.get((key.document_id, key.content_hash))
            body = chunk_lists.get(key)
            if document is None or body is None:
                raise KeyError(f"no stored chunks for {key}")
            if key.labels is not None:
                document = document.model_copy(
                    update={"metadata": {**document.metadata, LABELS_KEY: tuple(key.labels)}}
                )
            loaded.append((document, _chunks(body)))
        return loaded

    def document_ids(self) -> set[str]:
        """Every document with at least one stored chunk list (any version, any settings)."""
        with self.db.read() as conn:
            rows = conn.execute(text("SELECT DISTINCT document_id FROM chunks"))
            return {str(self.db.unpack(row[0])) for row in rows}

    # --- helpers -------------------------------------------------------------------------------------

    def _key_params(self, key: ChunkKey) -> dict[str, Any]:
        return {"d": self.db.pack(key.document_id), "h": key.content_hash, "f": key.fingerprint}

    def _select(
        self, conn: Connection, table: str, column: str, keys: Sequence[ChunkKey]
    ) -> Iterator[tuple[ChunkKey, Any]]:
        """(key, `column`) of each of `keys` found in `table` (chunks), a statement per part of the keys."""
        for part in self.db.parts(keys):
            packed = [(self.db.pack(k.document_id), k.content_hash, k.fingerprint) for k in part]
            condition, params = self.db.keys_in(_KEY_COLUMNS, packed, _KEY_TYPES)
            statement = (
                f"SELECT document_id, content_hash, fingerprint, {column} FROM {table} WHERE {condition}"
            )
            for document_id, content_hash, fingerprint, value in conn.execute(text(statement), params):
                yield ChunkKey(str(self.db.unpack(document_id)), content_hash, fingerprint), value

    def _documents(
        self, conn: Connection, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Document]:
        found: dict[tuple[str, str], Document] = {}
        for part in self.db.parts(list(dict.fromkeys(keys))):
            packed = [(self.db.pack(d), h) for d, h in part]
            condition, params = self.db.keys_in(_KEY_COLUMNS[:2], packed, _KEY_TYPES[:2])
            statement = text(f"SELECT document_id, content_hash, body FROM documents WHERE {condition}")
            for document_id, content_hash, body in conn.execute(statement, params):
                found[(str(self.db.unpack(document_id)), content_hash)] = _document(body)
        return found

    @contextmanager
    def _writing(self, document_ids: Sequence[str] | None) -> Iterator[Connection]:
        """A write transaction that, on PostgreSQL, first takes the locks keeping the two tables
        consistent: `documents` rows are deleted when no `chunks` row refers to them, and under READ
        COMMITTED that NOT EXISTS would not see another worker's uncommitted chunk list of the same
        document (a rebuild chunking it beside the live runs), deleting a document row just re-used.
        So writers of a document hold a transaction-level advisory lock on it (taken in one statement,
        in sorted order, so never a deadlock), and a whole-cache sweep (`document_ids` None) holds the
        cache's lock exclusively while the per-document writers hold it shared. Statements after the
        locks see every transaction that held them. SQLite's BEGIN IMMEDIATE already serialises writers."""
        with self.db.write() as conn:
            if self.db.dialect == "postgresql":
                if document_ids is None:
                    conn.execute(
                        text("SELECT pg_advisory_xact_lock(hashtext(:cache))"),
                        {"cache": CACHE_STORE},
                    )
                else:
                    conn.execute(
                        text("SELECT pg_advisory_xact_lock_shared(hashtext(:cache))"),
                        {"cache": CACHE_STORE},
                    )
                    conn.execute(
                        text(
                            "SELECT pg_advisory_xact_lock(hashtext(:cache), k) FROM (SELECT DISTINCT "
                            "hashtext(encode(d, 'hex')) AS k FROM unnest(CAST(:ids AS bytea[])) AS d ORDER BY k) "
                            "AS locks"
                        ),
                        {"cache": CACHE_STORE, "ids": [self.db.pack(d) for d in document_ids]},
                    )
            yield conn


def _key_tuple(key: ChunkKey) -> tuple[str, str, str]:
    return key.document_id, key.content_hash, key.fingerprint


def _chunks(body: bytes) -> list[Chunk]:
    return _CHUNKS.validate_json(zlib.decompress(body))


def _document(body: bytes) -> Document:
    return Document.model_validate_json(zlib.decompress(body))
