"""Durable per-document status, so re-runs skip what is done and reindex knows which chunks should exist.

One table per index generation (`unichunk.sinks.database`): embedded, `status.sqlite3` in the generation's directory,
in WAL mode with one short transaction per call, so concurrent flow runs (a cron reindex and a webhook
ingest) never block each other for long; in server mode, the table `documents` of the generation's
PostgreSQL schema, which every worker shares. `chunk_ids` is the set of IDs the sinks should hold for the
document (those of its last successful write): `verify_alignment` compares the stores against their union.

Writes are single statements (`INSERT ... ON CONFLICT DO UPDATE` of the given columns), a batch's rows in
one transaction; no read-modify-write, so concurrent runs need no lock here (two runs never write one
document at once: `unichunk.index.document_leases`). On PostgreSQL the user's text (document IDs, source names and
IDs, paths, errors) is BYTEA, so a NUL or a lone surrogate round-trips (`Database.pack`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from sqlalchemy import Connection, TextClause, text

from unichunk.index.document_states import STATES, State
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_database

# Why a failed document failed, as data the rules read (never parsed out of `error`, which is for people):
# `unreadable` and `too_large` are load failures, which an unchanged file would repeat (`too_large` not
# once the limit is raised above it); anything else is None.
Failure = Literal["unreadable", "too_large"]

# The embedded table, exactly as data dirs made before server mode have it.
_SQLITE_SCHEMA = [
    """
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
    last_success_at TEXT,
    failure TEXT,
    labels TEXT
)""",
    "CREATE INDEX IF NOT EXISTS documents_source ON documents (source_system, source_id)",
    "CREATE INDEX IF NOT EXISTS documents_state ON documents (state)",
]
# The same on PostgreSQL: user text as BYTEA (see the module docstring), sizes and mtimes 64-bit.
_POSTGRES_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS documents (
    document_id BYTEA PRIMARY KEY,
    source_system BYTEA,
    source_id BYTEA,
    path BYTEA,
    state TEXT NOT NULL,
    error BYTEA,
    chunk_count INTEGER NOT NULL DEFAULT 0,
    chunk_ids TEXT NOT NULL DEFAULT '[]',
    content_hash TEXT,
    fingerprint TEXT,
    chunk_fingerprint TEXT,
    strategy TEXT,
    size BIGINT,
    mtime_ns BIGINT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_success_at TEXT,
    failure TEXT,
    labels TEXT
)""",
    *_SQLITE_SCHEMA[1:],
]
# Columns added since the first schema, with their type: tables made before get them when a writer opens
# them; a reader of such a table reads them as NULL.
# `labels`: the document's access labels as a JSON array (NULL in a row written before labels: none).
_ADDED_COLUMNS = {"failure": "TEXT", "labels": "TEXT"}

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
    "failure",
    "labels",
]
# Columns that hold the user's text: BYTEA on PostgreSQL.
_USER_TEXT = frozenset({"document_id", "source_system", "source_id", "path", "error"})


# What a listing reads of a row (`StatusStore.page`): not the chunk IDs, the chunking JSON or `failure`.
_LISTED = [name for name in _COLUMNS if name not in ("chunk_ids", "strategy", "failure")]
# One order for every listing. NULLS FIRST: SQLite's order, which PostgreSQL reverses unless told; the
# document ID (the key) breaks ties, so pages of one listing neither repeat nor skip a row.
_ORDER = "ORDER BY source_system NULLS FIRST, source_id NULLS FIRST, document_id"


_TOTAL = "listing_total"  # a listing's window count, read beside each row of its page


def _select(missing: frozenset[str] = frozenset(), columns: list[str] = _COLUMNS) -> str:
    """The row query; columns a table made before lacks read as NULL."""
    names = [f"NULL AS {name}" if name in missing else name for name in columns]
    return f"SELECT {', '.join(names)} FROM documents"


T = TypeVar("T")


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
    failure: Failure | None = None
    labels: tuple[str, ...] = ()  # the access labels every store holds for its chunks (sorted)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DocumentStatus:
        data = {name: Database.unpack(value) if name in _USER_TEXT else value for name, value in row.items()}
        data["chunk_ids"] = json.loads(data.get("chunk_ids") or "[]")
        data["labels"] = tuple(json.loads(data.get("labels") or "[]"))
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _COLUMNS}


class StatusStore:
    """Document states of one index generation (`generations/<id>/status.sqlite3`, or its schema).

    Each generation has its own table, so a rebuild's progress never touches the live generation's rows
    (webhook runs keep updating those while the rebuild runs). Cheap to construct; each call is one
    transaction. A read-only store of a table not created yet reads as empty and creates nothing.
    """

    def __init__(self, database: Database, *, readonly: bool = False) -> None:
        self.db = database
        self.readonly = readonly
        if not readonly:
            database.ensure(_POSTGRES_SCHEMA if database.dialect == "postgresql" else _SQLITE_SCHEMA)
            database.add_missing_columns("documents", _ADDED_COLUMNS)
            self._missing: frozenset[str] = frozenset()
        else:
            self._missing = frozenset(_ADDED_COLUMNS) - database.columns("documents")
        self._select = _select(self._missing)

    @classmethod
    def of(cls, settings: SinkSettings, *, readonly: bool = False) -> StatusStore:
        """The status table of the generation `settings` is pinned to (see `unichunk.index.generations`)."""
        database = open_database(
            settings, settings.status_path, generation=settings.generation, readonly=readonly
        )
        return cls(database, readonly=readonly)

    def _read(self, query: Callable[[Connection], T], empty: T) -> T:
        """`query` in one read transaction; `empty` while there is no table yet. A reader may look while
        the first run of a generation is creating it (the SQLite file can exist a moment before its
        table), so the table's absence itself is what counts; once created it is dropped only with its
        generation."""
        try:
            with self.db.read() as conn:
                return query(conn)
        except Exception as exc:
            if self.db.missing(exc):
                return empty
            raise

    # --- reads ---------------------------------------------------------------------------------------

    def get(self, document_id: str) -> DocumentStatus | None:
        return self.get_many([document_id]).get(document_id)

    def get_many(self, document_ids: Iterable[str]) -> dict[str, DocumentStatus]:
        """The rows of `document_ids` that exist, in one statement per few hundred IDs."""
        ids = [self.db.pack(d) for d in dict.fromkeys(document_ids)]
        if not ids:
            return {}
        statement = self.db.statement(f"{self._select} WHERE {self.db.any_of('document_id', 'ids')}", "ids")

        def query(conn: Connection) -> dict[str, DocumentStatus]:
            found: dict[str, DocumentStatus] = {}
            for part in self.db.parts(ids):
                for row in conn.execute(statement, {"ids": list(part)}).mappings():
                    status = DocumentStatus.from_row(row)
                    found[status.document_id] = status
            return found

        return self._read(query, {})

    def rows(self, *, source_system: str | None = None, state: State | None = None) -> list[DocumentStatus]:
        where, args = self._where(source_system, state)
        statement = text(f"{self._select} {where} {_ORDER}")
        return self._read(lambda conn: _fetch(conn, statement, args), [])

    def page(
        self,
        *,
        source_system: str | None = None,
        state: State | None = None,
        readable: Sequence[str] | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[int, list[DocumentStatus]]:
        """How many rows match, and `limit` of them (None: all) from `offset`, in `rows`' order, cut by the
        database. `readable`: only rows holding one of these labels (none: nothing); None: every row (an
        admin). Only what a listing shows is read: the rows lack `chunk_ids`, `strategy` and `failure`."""
        listed, count, args = self._listing(source_system, state, readable, offset, limit)

        def read(conn: Connection) -> tuple[int, list[DocumentStatus]]:
            # The total rides on the page's rows (a window count, taken before LIMIT), so both come from
            # one statement's snapshot: under PostgreSQL's READ COMMITTED a second COUNT could see writes
            # the page did not. Only a page past the end asks apart, and returns no rows to disagree with.
            rows = [dict(row) for row in conn.execute(listed, args).mappings()]
            if not rows:
                return (conn.execute(count, args).scalar_one() if offset else 0), []
            total = int(rows[0][_TOTAL])
            return total, [DocumentStatus.from_row({k: v for k, v in r.items() if k != _TOTAL}) for r in rows]

        return self._read(read, (0, []))

    def _listing(
        self,
        source_system: str | None,
        state: State | None,
        readable: Sequence[str] | None,
        offset: int,
        limit: int | None,
    ) -> tuple[TextClause, TextClause, dict[str, Any]]:
        """A listing's page query, its count query and their parameters."""
        where, args = self._where(source_system, state, readable)
        unlimited = -1 if self.db.dialect == "sqlite" else None  # SQLite has no OFFSET without a LIMIT
        args |= {"limit": unlimited if limit is None else limit, "offset": offset}
        counted = _select(self._missing, [*_LISTED, f"COUNT(*) OVER () AS {_TOTAL}"])
        listed = f"{counted} {where} {_ORDER} LIMIT :limit OFFSET :offset"
        return text(listed), text(f"SELECT COUNT(*) FROM documents {where}"), args

    def _where(
        self, source_system: str | None, state: State | None, readable: Sequence[str] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The WHERE clause (empty for none) and its parameters of a listing. `readable`: the row's labels
        (a JSON array of normalised labels, NULL for none) share one with it; compared as JSON elements,
        never as text, so one label never matches inside another."""
        clauses, args = [], {}
        if source_system is not None:
            clauses.append("source_system = :source_system")
            args["source_system"] = self.db.pack(source_system)
        if state is not None:
            clauses.append("state = :state")
            args["state"] = state
        if readable is not None and "labels" in self._missing:
            clauses.append("1 = 0")  # a table made before labels: its documents have none, admins only
        elif readable is not None and self.db.dialect == "postgresql":
            clauses.append("CAST(labels AS jsonb) ?| CAST(:readable AS text[])")
            args["readable"] = list(readable)
        elif readable is not None:
            clauses.append(
                "EXISTS (SELECT 1 FROM json_each(documents.labels) AS held"
                " JOIN json_each(:readable) AS asked ON held.value = asked.value)"
            )
            args["readable"] = json.dumps(list(readable))
        return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), args

    def counts(self) -> dict[str, int]:
        """Documents per state (every state present, zero when none)."""
        statement = text("SELECT state, COUNT(*) AS n FROM documents GROUP BY state")
        found = self._read(lambda conn: {r.state: r.n for r in conn.execute(statement)}, {})
        return {**dict.fromkeys(STATES, 0), **found}

    def expected_chunk_ids(self) -> set[str]:
        """Every chunk ID the sinks should hold: the last successfully written chunks of each document."""

        def query(conn: Connection) -> set[str]:
            expected: set[str] = set()
            for (chunk_ids,) in conn.execute(text("SELECT chunk_ids FROM documents")):
                expected.update(json.loads(chunk_ids or "[]"))
            return expected

        return self._read(query, set())

    def expected_labels(self) -> dict[str, tuple[str, ...]]:
        """chunk_id -> the access labels every sink should hold for it: its document's (for `verify`)."""
        labelled = "labels" in self.db.columns("documents")
        statement = text(f"SELECT chunk_ids, {'labels' if labelled else 'NULL'} FROM documents")

        def query(conn: Connection) -> dict[str, tuple[str, ...]]:
            expected: dict[str, tuple[str, ...]] = {}
            for chunk_ids, labels in conn.execute(statement):
                found = tuple(json.loads(labels or "[]"))
                expected.update((chunk_id, found) for chunk_id in json.loads(chunk_ids or "[]"))
            return expected

        return self._read(query, {})

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
        """`upsert` for several rows in one transaction (a batch costs one commit, not one per document).

        Rows that set the same columns share one statement, executed for all of them at once (one round
        trip to a server); in document order, so two transactions meeting on rows lock them in one order."""
        merged: dict[str, dict[str, Any]] = {}
        for document_id, fields in rows:  # a document given twice: as if upserted twice, in order
            merged.setdefault(document_id, {}).update(fields)
        groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[dict[str, Any]]] = {}
        for document_id, fields in sorted(merged.items()):
            values, updated = self._row_values(document_id, fields)
            groups.setdefault((tuple(values), updated), []).append(values)
        if not groups:
            return
        with self.db.write() as conn:
            for (names, updated), params in groups.items():
                conn.execute(text(_upsert_statement(names, updated)), params)

    def mark_processing(self, document_id: str, **fields: Any) -> None:
        self.upsert(document_id, **processing_fields(**fields))

    def mark_processed(self, document_id: str, *, chunk_ids: list[str], **fields: Any) -> None:
        self.upsert(document_id, **processed_fields(chunk_ids, **fields))

    def mark_failed(
        self, document_id: str, error: str, failure: Failure | None = None, **fields: Any
    ) -> None:
        """Record the error; `chunk_ids` of the last success stay, as the sinks still hold those chunks."""
        self.upsert(document_id, **failed_fields(error, failure, **fields))

    def delete(self, document_id: str) -> bool:
        return self.delete_many([document_id]) > 0

    def delete_many(self, document_ids: Iterable[str]) -> int:
        """Forget the rows of `document_ids` in one transaction; how many there were."""
        ids = [self.db.pack(d) for d in dict.fromkeys(document_ids)]
        if not ids:
            return 0
        statement = self.db.statement(
            f"DELETE FROM documents WHERE {self.db.any_of('document_id', 'ids')}", "ids"
        )
        removed = 0
        with self.db.write() as conn:
            for part in self.db.parts(ids):
                removed += conn.execute(statement, {"ids": list(part)}).rowcount
        return removed

    def _row_values(self, document_id: str, fields: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The parameters of one row's upsert (the given columns, stamped, user text packed) and the
        columns an existing row takes from them (the given ones: a new row's defaults change nothing)."""
        unknown = set(fields) - set(_COLUMNS)
        if unknown:
            raise ValueError(f"unknown status columns: {sorted(unknown)}")
        if "chunk_ids" in fields:
            chunk_ids = list(fields["chunk_ids"])
            fields["chunk_ids"] = json.dumps(chunk_ids)
            fields.setdefault("chunk_count", len(chunk_ids))
        if "labels" in fields:
            fields["labels"] = json.dumps(sorted(fields["labels"]))
        now = _now()
        fields["updated_at"] = now
        values = {"document_id": document_id, "created_at": now, "state": "pending", **fields}
        packed = {
            name: self.db.pack(value) if name in _USER_TEXT else value for name, value in values.items()
        }
        return packed, tuple(fields)


def _fetch(conn: Connection, statement: TextClause, args: Mapping[str, Any]) -> list[DocumentStatus]:
    return [DocumentStatus.from_row(row) for row in conn.execute(statement, args).mappings()]


def processing_fields(**fields: Any) -> dict[str, Any]:
    """The columns of a row whose document is being written (for `upsert_many`)."""
    return {"state": "processing", **fields}


def pending_fields(reason: str, **fields: Any) -> dict[str, Any]:
    """The columns of a row whose document was chunked but not written, because the run stopped (`reason`):
    the next run does it; `chunk_ids` of the last success stay, as the sinks still hold those chunks."""
    return {"state": "pending", "error": reason, "failure": None, **fields}


def processed_fields(chunk_ids: list[str], **fields: Any) -> dict[str, Any]:
    """The columns of a row whose document every sink now holds as `chunk_ids`."""
    return {
        "state": "processed",
        "error": None,
        "failure": None,
        "chunk_ids": chunk_ids,
        "last_success_at": _now(),
        **fields,
    }


def failed_fields(error: str, failure: Failure | None = None, **fields: Any) -> dict[str, Any]:
    """The columns of a failed row (`failure`: why, for the rules); `chunk_ids` of the last success are
    left as they are."""
    return {"state": "failed", "error": error, "failure": failure, **fields}


def _upsert_statement(names: tuple[str, ...], updated: tuple[str, ...]) -> str:
    """INSERT ... ON CONFLICT DO UPDATE of the `updated` columns only (created_at is kept, and so is an
    existing row's state when none was given)."""
    updates = ", ".join(f"{name} = excluded.{name}" for name in updated)
    return (
        f"INSERT INTO documents ({', '.join(names)}) VALUES ({', '.join(f':{n}' for n in names)}) "
        f"ON CONFLICT (document_id) DO UPDATE SET {updates}"
    )
