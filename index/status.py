"""Durable per-document status, so re-runs skip what is done and reindex knows which chunks should exist.

One SQLite file under the data dir, in WAL mode with one short transaction per call, so concurrent flow
runs (a cron reindex and a webhook ingest) never block each other for long. `chunk_ids` is the set of IDs
the sinks should hold for the document (those of its last successful write): `verify_alignment` compares
the stores against their union.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sinks.config import SinkSettings

State = Literal["pending", "processing", "processed", "failed"]
STATES: tuple[State, ...] = ("pending", "processing", "processed", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    document_id TEXT PRIMARY KEY,
    source_system TEXT,
    source_id TEXT,
    path TEXT,
    state TEXT NOT NULL,
    error TEXT,
    chunk_count INTEGER NOT NULL DEFAULT 0,
    chunk_ids TEXT NOT NULL DEFAULT '[]',
    content_hash TEXT,
    fingerprint TEXT,
    chunk_fingerprint TEXT,
    strategy TEXT,
    size INTEGER,
    mtime_ns INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_success_at TEXT
);
CREATE INDEX IF NOT EXISTS documents_source ON documents (source_system, source_id);
CREATE INDEX IF NOT EXISTS documents_state ON documents (state);
"""

_COLUMNS = [
    "document_id",
    "source_system",
    "source_id",
    "path",
    "state",
    "error",
    "chunk_count",
    "chunk_ids",
    "content_hash",
    "fingerprint",
    "chunk_fingerprint",
    "strategy",
    "size",
    "mtime_ns",
    "created_at",
    "updated_at",
    "last_success_at",
]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class DocumentStatus:
    """One row of the status table. `strategy` is the ChunkStrategy JSON, so repair can re-chunk."""

    document_id: str
    state: State
    source_system: str | None = None
    source_id: str | None = None
    path: str | None = None
    error: str | None = None
    chunk_count: int = 0
    chunk_ids: list[str] = field(default_factory=list)
    content_hash: str | None = None
    fingerprint: str | None = None
    chunk_fingerprint: str | None = None
    strategy: str | None = None
    size: int | None = None
    mtime_ns: int | None = None
    created_at: str = ""
    updated_at: str = ""
    last_success_at: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> DocumentStatus:
        data = dict(row)
        data["chunk_ids"] = json.loads(data["chunk_ids"] or "[]")
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _COLUMNS}


class StatusStore:
    """Document states of one index generation, in `<data_dir>/generations/<id>/status.sqlite3`.

    Each generation has its own table, so a rebuild's progress never touches the live generation's rows
    (webhook runs keep updating those while the rebuild runs). Cheap to construct; each call opens a
    connection. A read-only store of a table not created yet reads as empty.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        if not readonly:
            self._ensure_schema()

    @classmethod
    def of(cls, settings: SinkSettings, *, readonly: bool = False) -> StatusStore:
        """The status table of the generation `settings` is pinned to (see `index.generations`)."""
        return cls(settings.status_path, readonly=readonly)

    def _ensure_schema(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
        finally:
            conn.close()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        else:
            conn = sqlite3.connect(self.path, timeout=30)
            # WAL + NORMAL cannot corrupt; a power loss may only undo the last commits, which the next
            # run redoes (every sink write is idempotent). It saves an fsync per transaction.
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.row_factory = sqlite3.Row
        try:
            with conn:  # one transaction: commit on success, roll back on error
                yield conn
        finally:
            conn.close()

    def _exists(self) -> bool:
        """Whether there is a table to read. A read-only reader may look while the first run of a
        generation is creating it: the file can exist a moment before its table does (seen as `no such
        table` from a status poll during a first ingest), so the table itself is looked for; once created
        it is never dropped, so the check cannot go stale."""
        if not self.readonly:
            return True
        if not self.path.exists():
            return False
        with self._connect() as conn:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'documents'")
            return found.fetchone() is not None

    # --- reads ---------------------------------------------------------------------------------------

    def get(self, document_id: str) -> DocumentStatus | None:
        return self.get_many([document_id]).get(document_id)

    def get_many(self, document_ids: Iterable[str]) -> dict[str, DocumentStatus]:
        ids = list(dict.fromkeys(document_ids))
        found: dict[str, DocumentStatus] = {}
        if not ids or not self._exists():
            return found
        with self._connect() as conn:
            for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
                part = ids[start : start + 500]
                marks = ",".join("?" * len(part))
                for row in conn.execute(f"SELECT * FROM documents WHERE document_id IN ({marks})", part):
                    found[row["document_id"]] = DocumentStatus.from_row(row)
        return found

    def rows(self, *, source_system: str | None = None, state: State | None = None) -> list[DocumentStatus]:
        if not self._exists():
            return []
        clauses, args = [], []
        if source_system is not None:
            clauses.append("source_system = ?")
            args.append(source_system)
        if state is not None:
            clauses.append("state = ?")
            args.append(state)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._connect() as conn:
            cursor = conn.execute(f"SELECT * FROM documents {where} ORDER BY source_system, source_id", args)
            return [DocumentStatus.from_row(row) for row in cursor]

    def counts(self) -> dict[str, int]:
        """Documents per state (every state present, zero when none)."""
        result = dict.fromkeys(STATES, 0)
        if not self._exists():
            return result
        with self._connect() as conn:
            for row in conn.execute("SELECT state, COUNT(*) AS n FROM documents GROUP BY state"):
                result[row["state"]] = row["n"]
        return result

    def expected_chunk_ids(self) -> set[str]:
        """Every chunk ID the sinks should hold: the last successfully written chunks of each document."""
        expected: set[str] = set()
        if not self._exists():
            return expected
        with self._connect() as conn:
            for row in conn.execute("SELECT chunk_ids FROM documents"):
                expected.update(json.loads(row["chunk_ids"] or "[]"))
        return expected

    @staticmethod
    def is_current(row: DocumentStatus | None, content_hash: str, fingerprint: str) -> bool:
        """The incremental rule: processed, with the same content and the same settings."""
        return (
            row is not None
            and row.state == "processed"
            and row.content_hash == content_hash
            and row.fingerprint == fingerprint
        )

    # --- writes --------------------------------------------------------------------------------------

    def upsert(self, document_id: str, **fields: Any) -> None:
        """Insert or update one row; only the given columns change (created_at is kept)."""
        self.upsert_many([(document_id, fields)])

    def upsert_many(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """`upsert` for several rows in one transaction (a batch costs one commit, not one per document)."""
        statements = [_upsert_statement(document_id, dict(fields)) for document_id, fields in rows]
        if not statements:
            return
        with self._connect() as conn:
            for sql, values in statements:
                conn.execute(sql, values)

    def mark_processing(self, document_id: str, **fields: Any) -> None:
        self.upsert(document_id, **processing_fields(**fields))

    def mark_processed(self, document_id: str, *, chunk_ids: list[str], **fields: Any) -> None:
        self.upsert(document_id, **processed_fields(chunk_ids, **fields))

    def mark_failed(self, document_id: str, error: str, **fields: Any) -> None:
        """Record the error; `chunk_ids` of the last success stay, as the sinks still hold those chunks."""
        self.upsert(document_id, **failed_fields(error, **fields))

    def delete(self, document_id: str) -> bool:
        with self._connect() as conn:
            return conn.execute("DELETE FROM documents WHERE document_id = ?", (document_id,)).rowcount > 0


def processing_fields(**fields: Any) -> dict[str, Any]:
    """The columns of a row whose document is being written (for `upsert_many`)."""
    return {"state": "processing", **fields}


def processed_fields(chunk_ids: list[str], **fields: Any) -> dict[str, Any]:
    """The columns of a row whose document every sink now holds as `chunk_ids`."""
    return {"state": "processed", "error": None, "chunk_ids": chunk_ids, "last_success_at": _now(), **fields}


def failed_fields(error: str, **fields: Any) -> dict[str, Any]:
    """The columns of a failed row; `chunk_ids` of the last success are left as they are."""
    return {"state": "failed", "error": error, **fields}


def _upsert_statement(document_id: str, fields: dict[str, Any]) -> tuple[str, list[Any]]:
    """INSERT ... ON CONFLICT DO UPDATE of the given columns only (created_at is kept)."""
    unknown = set(fields) - set(_COLUMNS)
    if unknown:
        raise ValueError(f"unknown status columns: {sorted(unknown)}")
    if "chunk_ids" in fields:
        chunk_ids = list(fields["chunk_ids"])
        fields["chunk_ids"] = json.dumps(chunk_ids)
        fields.setdefault("chunk_count", len(chunk_ids))
    now = _now()
    fields["updated_at"] = now
    insert = {"document_id": document_id, "created_at": now, "state": "pending", **fields}
    names = ", ".join(insert)
    marks = ", ".join("?" * len(insert))
    updates = ", ".join(f"{name} = excluded.{name}" for name in fields)
    sql = f"INSERT INTO documents ({names}) VALUES ({marks}) ON CONFLICT(document_id) DO UPDATE SET {updates}"
    return sql, list(insert.values())
