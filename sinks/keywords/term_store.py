"""The keyword store's tables: analysed chunks, a revision counter and a removal log, on SQLite or PostgreSQL.

The source of truth of the BM25 sink (`bm25.py`); the scoring index each query-serving process keeps in
memory is a cache that catches up by reading what changed since its revision. One implementation serves both
backends of `unichunk.sinks.database`, the differences (column types, a few spellings, how content is stored)
kept in `_Dialect`; on PostgreSQL the store has its own schema, so its `chunks` table never meets the
records'.

The rule it keeps: revisions become visible in commit order, so a reader never skips one. A writer takes the
counter's row lock before anything else and publishes its revision with its rows in one transaction; readers
take no lock and read the changes in one snapshot. Content is stored exactly (BYTEA of its UTF-8 on
PostgreSQL, whose text cannot hold NUL). docs/design.md ("The keyword index") says why and how.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError

from unichunk.sinks.database import Database

T = TypeVar("T")

# Removals older than this many revisions are pruned; an index older than that reloads in full.
REMOVAL_LOG_REVISIONS = 10_000
# Rows per page when a reader loads changed rows (a full load of millions of rows never sits in memory
# as Python rows at once).
LOAD_PAGE = 20_000
HASH_PAGE = 1000  # rows per statement for content hashes, so writers are not held off for long

COLUMNS = (
    "chunk_id",
    "document_id",
    "chunk_index",
    "start_char",
    "end_char",
    "content",
    "heading_chain",
    "terms",
    "tfs",
    "doc_len",
)
# What a row read back for a caller holds (no terms): chunk_id, document_id, chunk_index, start, end,
# content, heading_chain.
STORED = "chunk_id, document_id, chunk_index, start_char, end_char, content, heading_chain"
# Stores written before the write counter was called a revision (SQLite only): renamed on open.
_RENAMED_COLUMNS = (("state", "generation", "revision"), ("chunks", "gen", "rev"), ("removed", "gen", "rev"))


@dataclass(frozen=True)
class _Dialect:
    """Everything the two backends spell differently."""

    integer: str  # revisions and offsets
    text_bytes: str  # the type of `content`
    blob: str  # the type of `tfs`
    differs: str  # null-safe "not equal": `{a} ... {b}`
    id_list: str  # a subquery of the values of the JSON array bound to :ids
    lock_counter: str  # read the revision counter, holding its lock until commit
    placeholder: str  # the driver's own parameter marker, for the bulk upsert (no SQLAlchemy per row)
    encode: Callable[[str], Any]
    decode: Callable[[Any], str | None]

    def schema(self) -> list[str]:
        return [
            f"""CREATE TABLE IF NOT EXISTS state (
                id INTEGER PRIMARY KEY CHECK (id = 0),
                revision {self.integer} NOT NULL,
                log_floor {self.integer} NOT NULL DEFAULT 0,  -- `removed` holds every removal after it
                analyzer TEXT NOT NULL
            )""",
            f"""CREATE TABLE IF NOT EXISTS chunks (
                chunk_id TEXT PRIMARY KEY,
                document_id TEXT NOT NULL,
                chunk_index INTEGER NOT NULL,
                start_char {self.integer} NOT NULL,
                end_char {self.integer} NOT NULL,
                content {self.text_bytes} NOT NULL,
                heading_chain TEXT NOT NULL,   -- JSON array of headings
                terms TEXT NOT NULL,           -- distinct analysed terms, space-separated (terms hold none)
                tfs {self.blob} NOT NULL,      -- their frequencies in the chunk, little-endian uint32
                doc_len INTEGER NOT NULL,      -- number of analysed terms, with repeats
                rev {self.integer} NOT NULL    -- revision of the write that last changed the row
            )""",
            "CREATE INDEX IF NOT EXISTS chunks_document ON chunks (document_id)",
            "CREATE INDEX IF NOT EXISTS chunks_rev ON chunks (rev)",
            f"""CREATE TABLE IF NOT EXISTS removed (  -- removal log: a refresh need not list live IDs
                chunk_id TEXT NOT NULL,
                rev {self.integer} NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS removed_rev ON removed (rev)",
            # Access labels, per document (every chunk of a document carries its labels): outside the
            # scored rows, so a relabel touches no postings and needs no index refresh. A store made
            # before labels gets the table on open; its documents have none until relabelled or written.
            """CREATE TABLE IF NOT EXISTS labels (
                document_id TEXT NOT NULL,
                label TEXT NOT NULL,
                PRIMARY KEY (document_id, label)
            )""",
            "CREATE INDEX IF NOT EXISTS labels_label ON labels (label)",
        ]


def _decode_utf8(value: Any) -> str | None:
    try:
        return bytes(value).decode("utf-8")
    except (TypeError, UnicodeDecodeError):
        return None  # not what this store writes: reported as unreadable, never guessed at


_SQLITE = _Dialect(
    integer="INTEGER",
    text_bytes="TEXT",
    blob="BLOB",
    differs="{a} IS NOT {b}",
    id_list="(SELECT value FROM json_each(:ids))",
    lock_counter="SELECT revision FROM state WHERE id = 0",  # BEGIN IMMEDIATE holds the write lock
    placeholder="?",
    encode=lambda content: content,
    decode=lambda value: value if isinstance(value, str) else None,  # a BLOB written behind our back
)
_POSTGRESQL = _Dialect(
    integer="BIGINT",
    text_bytes="BYTEA",
    blob="BYTEA",
    differs="{a} IS DISTINCT FROM {b}",
    id_list="(SELECT value FROM json_array_elements_text(CAST(:ids AS json)))",
    lock_counter="SELECT revision FROM state WHERE id = 0 FOR UPDATE",
    placeholder="%s",
    encode=lambda content: content.encode("utf-8"),
    decode=_decode_utf8,
)


# A forked child must not use its parent's query connections (their sockets are shared): it opens its own.
_STORES: weakref.WeakSet[TermStore] = weakref.WeakSet()


def _forget_query_connections_after_fork() -> None:
    for store in list(_STORES):
        if store._queries is not None:
            store._queries.dispose(close=False)
            store._queries = None
        store._query_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_query_connections_after_fork)


@dataclass
class Changes:
    """What a reader at revision `since` must apply to be at `revision` (read in one snapshot)."""

    revision: int
    full: bool  # the reader was too far behind (or new): `pages` are every row, `removed` is empty
    removed: list[str]
    pages: Iterator[Sequence[tuple[str, str, str, bytes, int]]]  # (chunk_id, document_id, terms, tfs, len)


class TermStore:
    """The keyword store's SQL. Every method is one transaction (the per-query reads: one statement)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._queries: Engine | None = None  # PostgreSQL: the per-query reads' own pool, see `_query`
        self._query_lock = threading.Lock()
        _STORES.add(self)
        self.dialect = _POSTGRESQL if db.dialect == "postgresql" else _SQLITE
        d = self.dialect
        changed = " OR ".join(d.differs.format(a=f"chunks.{c}", b=f"excluded.{c}") for c in COLUMNS[1:-1])
        # Re-writing an unchanged chunk leaves its row (and its `rev`) alone, so an idempotent re-ingest
        # does not force an index refresh. Run through the driver's executemany: SQLAlchemy's handling
        # of each row's parameters cost more than SQLite's insert itself.
        marks = ", ".join([d.placeholder] * (len(COLUMNS) + 1))
        self._upsert = (
            f"INSERT INTO chunks ({', '.join(COLUMNS)}, rev) VALUES ({marks}) "
            f"ON CONFLICT (chunk_id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in (*COLUMNS[1:], "rev"))
            + f" WHERE {changed}"
        )
        self._stale = f" AND chunk_id NOT IN {d.id_list}"
        self._docs = d.id_list.replace(":ids", ":docs")
        # The documents carrying at least one of the labels bound to :labels (a JSON array).
        self._labelled = (
            f"(SELECT document_id FROM labels WHERE label IN {d.id_list.replace(':ids', ':labels')})"
        )

    # -- schema ----------------------------------------------------------------------------------------

    def open(self, analyzer_signature: str) -> str:
        """Create what is missing; returns the analyzer signature the stored terms were made with."""
        if self.db.dialect == "sqlite" and self.db.has_table("state"):
            self._rename_old_columns()
        self.db.ensure(self.dialect.schema())
        with self.db.write() as conn:
            conn.execute(
                text(
                    "INSERT INTO state (id, revision, log_floor, analyzer) VALUES (0, 0, 0, :a) "
                    "ON CONFLICT (id) DO NOTHING"
                ),
                {"a": analyzer_signature},
            )
            return str(conn.execute(text("SELECT analyzer FROM state WHERE id = 0")).scalar_one())

    def _rename_old_columns(self) -> None:
        """Bring a store written by an earlier release (write counter named `generation`/`gen`) up to date."""
        with self.db.write() as conn:
            for table, old, new in _RENAMED_COLUMNS:
                columns = {row[1] for row in conn.exec_driver_sql(f"PRAGMA table_info({table})")}
                if old in columns and new not in columns:
                    conn.exec_driver_sql(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")
            conn.exec_driver_sql("DROP INDEX IF EXISTS chunks_gen")
            conn.exec_driver_sql("DROP INDEX IF EXISTS removed_gen")

    def reanalyze(
        self, signature: str, analyze: Callable[[list[tuple[str, str]]], list[tuple[str, bytes, int]]]
    ) -> None:
        """Re-derive every row's terms another way (one transaction, one revision): `analyze` gets each
        row's (content, heading chain JSON)."""
        with self.db.write() as conn:
            revision = self._lock(conn) + 1
            rows = conn.execute(text("SELECT chunk_id, content, heading_chain FROM chunks")).fetchall()
            for start in range(0, len(rows), LOAD_PAGE):
                page = rows[start : start + LOAD_PAGE]
                stored = analyze([(self.dialect.decode(r[1]) or "", r[2] or "[]") for r in page])
                conn.execute(
                    text(
                        "UPDATE chunks SET terms = :terms, tfs = :tfs, doc_len = :doc_len, rev = :rev "
                        "WHERE chunk_id = :chunk_id"
                    ),
                    [
                        {"terms": t, "tfs": f, "doc_len": n, "rev": revision, "chunk_id": r[0]}
                        for r, (t, f, n) in zip(page, stored, strict=True)
                    ],
                )
            self._publish(conn, revision)
            conn.execute(text("UPDATE state SET analyzer = :a WHERE id = 0"), {"a": signature})

    def drop(self) -> None:
        """PostgreSQL: drop the store's schema with its tables. SQLite: nothing (the caller deletes the file)."""
        self.db.drop_schema()

    # -- writes ----------------------------------------------------------------------------------------

    def _lock(self, conn: Connection) -> int:
        """The current revision, with the counter locked until this transaction ends (module docstring)."""
        return int(conn.execute(text(self.dialect.lock_counter)).scalar_one())

    def _publish(self, conn: Connection, revision: int) -> None:
        """Publish `revision` and prune the removal log behind it."""
        conn.execute(text("UPDATE state SET revision = :r WHERE id = 0"), {"r": revision})
        floor = revision - REMOVAL_LOG_REVISIONS
        if floor > 0:
            conn.execute(text("DELETE FROM removed WHERE rev <= :f"), {"f": floor})
            conn.execute(text("UPDATE state SET log_floor = :f WHERE id = 0"), {"f": floor})

    def replace(
        self,
        rows: Sequence[tuple[Any, ...]],
        keep: dict[str, list[str]],
        labels: Mapping[str, Sequence[str]] | None = None,
    ) -> bool:
        """Upsert `rows` (values in `COLUMNS` order, content as a str) and remove each document's chunks
        not in `keep[document_id]`, and set the documents' `labels` (document_id -> labels), in one
        transaction; True if any scored row changed (then a new revision)."""
        encode = self.dialect.encode
        at = COLUMNS.index("content")
        with self.db.write() as conn:
            revision = self._lock(conn) + 1
            params = [(*row[:at], encode(row[at]), *row[at + 1 :], revision) for row in rows]
            changed = conn.exec_driver_sql(self._upsert, params).rowcount if params else 0
            if keep and self._may_hold_stale(conn, rows, keep):
                # One statement for all the batch's documents: a chunk ID names one document (it was
                # just upserted under it), so "not kept by any of them" is "not kept by its own".
                bind = {
                    "r": revision,
                    "docs": json.dumps(list(keep)),
                    "ids": json.dumps([c for chunk_ids in keep.values() for c in chunk_ids]),
                }
                where = f"WHERE document_id IN {self._docs}{self._stale}"
                conn.execute(
                    text(f"INSERT INTO removed (chunk_id, rev) SELECT chunk_id, :r FROM chunks {where}"), bind
                )
                changed += conn.execute(text(f"DELETE FROM chunks {where}"), bind).rowcount
            if labels:
                self._set_labels(conn, labels)
            if changed:
                self._publish(conn, revision)
        return bool(changed)

    def _may_hold_stale(
        self, conn: Connection, rows: Sequence[tuple[Any, ...]], keep: dict[str, list[str]]
    ) -> bool:
        """False when the documents of `keep` hold no row besides the kept chunks, known from one count,
        so the two stale-row statements (each matching every stored row of the batch's documents against
        the list of kept IDs, a large share of a build) are skipped. The count decides only when every
        kept chunk was just upserted under one of those documents (then they all are among its rows);
        otherwise this says True and those statements decide."""
        written = {row[0]: row[1] for row in rows}  # the last row of an ID wins, as in the upsert
        kept = {c for chunk_ids in keep.values() for c in chunk_ids}
        if any(written.get(c) not in keep for c in kept):
            return True
        stored = conn.execute(
            text(f"SELECT COUNT(*) FROM chunks WHERE document_id IN {self._docs}"),
            {"docs": json.dumps(list(keep))},
        ).scalar_one()
        return int(stored) != len(kept)

    def _set_labels(self, conn: Connection, labels: Mapping[str, Sequence[str]]) -> None:
        """Replace the labels of these documents (within the caller's transaction)."""
        conn.execute(
            text(f"DELETE FROM labels WHERE document_id IN {self._docs}"), {"docs": json.dumps(list(labels))}
        )
        pairs = [{"d": d, "l": label} for d, found in labels.items() for label in found]
        if pairs:
            conn.execute(text("INSERT INTO labels (document_id, label) VALUES (:d, :l)"), pairs)

    def relabel(self, labels: Mapping[str, Sequence[str]]) -> int:
        """Set documents' labels (document_id -> sorted labels), in one transaction; how many of their
        chunks changed (a document already so, or without chunks, changes none)."""
        if not labels:
            return 0
        with self.db.write() as conn:
            self._lock(conn)  # one writer at a time, as for every write of this store
            bind = {"docs": json.dumps(list(labels))}
            counts = dict(
                conn.execute(
                    text(
                        f"SELECT document_id, COUNT(*) FROM chunks WHERE document_id IN {self._docs} GROUP BY document_id"
                    ),
                    bind,
                ).all()
            )
            held: dict[str, list[str]] = {}
            for document_id, label in conn.execute(
                text(f"SELECT document_id, label FROM labels WHERE document_id IN {self._docs}"), bind
            ):
                held.setdefault(document_id, []).append(label)
            changed = {
                document_id: found
                for document_id, found in labels.items()
                if counts.get(document_id) and sorted(held.get(document_id, ())) != sorted(found)
            }
            if changed:
                self._set_labels(conn, changed)
        return sum(int(counts[document_id]) for document_id in changed)

    _log_removals = (
        "INSERT INTO removed (chunk_id, rev) SELECT chunk_id, :r FROM chunks WHERE document_id = :d"
    )

    def delete(self, document_id: str) -> int:
        with self.db.write() as conn:
            revision = self._lock(conn) + 1
            conn.execute(text(self._log_removals), {"r": revision, "d": document_id})
            removed = conn.execute(
                text("DELETE FROM chunks WHERE document_id = :d"), {"d": document_id}
            ).rowcount
            conn.execute(text("DELETE FROM labels WHERE document_id = :d"), {"d": document_id})
            if removed:
                self._publish(conn, revision)
        return int(removed)

    # -- reads -----------------------------------------------------------------------------------------

    @contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """One read transaction whose statements all see the same committed state."""
        with self.db.read() as conn:
            if self.db.dialect == "postgresql":  # before any query of the transaction
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield conn

    def _query(self, read: Callable[[Connection], T]) -> T:
        """`read` on a connection for the per-query reads (the revision check, the hits' rows): one
        statement each, so no transaction is needed. On PostgreSQL these use a small pool of this store's
        own, in autocommit with the search_path set once per connection and no ping: a transaction from
        the shared pool costs a ping, BEGIN, SET LOCAL and COMMIT around each statement, round trips that
        would take most of a search's time. A connection the server dropped is replaced once. SQLite (in
        process) uses the shared pool."""
        if self.db.dialect != "postgresql":
            with self.db.read() as conn:
                return read(conn)
        for attempt in (0, 1):
            try:
                with self._query_engine().connect() as conn:
                    return read(conn)
            except DBAPIError as exc:
                if attempt or not exc.connection_invalidated:
                    raise
        raise AssertionError("unreachable")

    def _query_engine(self) -> Engine:
        with self._query_lock:
            if self._queries is None:
                schema = self.db.schema
                engine = create_engine(
                    self.db.engine.url, isolation_level="AUTOCOMMIT", pool_size=2, max_overflow=8
                )

                def set_schema(dbapi_connection: Any, _record: Any) -> None:
                    with dbapi_connection.cursor() as cursor:
                        cursor.execute(f'SET search_path TO "{schema}"')

                event.listen(engine, "connect", set_schema)
                self._queries = engine
            return self._queries

    def close(self) -> None:
        """Close this store's own query connections (PostgreSQL)."""
        with self._query_lock:
            engine, self._queries = self._queries, None
        if engine is not None:
            engine.dispose()

    def revision(self) -> int:
        return self._query(
            lambda c: int(c.execute(text("SELECT revision FROM state WHERE id = 0")).scalar_one())
        )

    @contextmanager
    def changes(self, since: int | None) -> Iterator[Changes]:
        """The changes after revision `since` (None: everything), valid inside the block."""
        with self._snapshot() as conn:
            revision, floor = conn.execute(text("SELECT revision, log_floor FROM state WHERE id = 0")).one()
            # A reader ahead of the store (an index saved beside a store since replaced) starts over too.
            full = since is None or since < floor or since > revision
            after = -1 if full else since
            removed = (
                []
                if full
                else list(
                    conn.execute(text("SELECT chunk_id FROM removed WHERE rev > :s"), {"s": after}).scalars()
                )
            )
            result = conn.execution_options(yield_per=LOAD_PAGE).execute(
                text("SELECT chunk_id, document_id, terms, tfs, doc_len FROM chunks WHERE rev > :s"),
                {"s": after},
            )
            yield Changes(int(revision), full, removed, result.partitions(LOAD_PAGE))

    def _where_filter(self, filters: Mapping[str, Sequence[str]]) -> tuple[str, dict[str, str]]:
        """The SQL condition (with its binds) of a search filter: `document_id` any of, `labels` any of."""
        sql, bind = "", {}
        if "document_id" in filters:
            sql += f" AND document_id IN {self._docs}"
            bind["docs"] = json.dumps(list(filters["document_id"]))
        if "labels" in filters:
            sql += f" AND document_id IN {self._labelled}"
            bind["labels"] = json.dumps(list(filters["labels"]))
        return sql, bind

    def rows(
        self, chunk_ids: Iterable[str], filters: Mapping[str, Sequence[str]] | None = None
    ) -> list[tuple[Any, ...]]:
        """Stored rows (`STORED` columns, content decoded) of these chunks that `filters` lets through, in
        no particular order."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return []
        where, bind = self._where_filter(filters or {})
        statement = text(f"SELECT {STORED} FROM chunks WHERE chunk_id IN {self.dialect.id_list}{where}")
        found = self._query(lambda c: c.execute(statement, {"ids": json.dumps(ids), **bind}).fetchall())
        return [self._decoded(r) for r in found]

    def rows_at(
        self, document_id: str, indexes: list[int], filters: Mapping[str, Sequence[str]] | None = None
    ) -> list[tuple[Any, ...]]:
        where, bind = self._where_filter(filters or {})
        statement = text(
            f"SELECT {STORED} FROM chunks WHERE document_id = :d "
            f"AND CAST(chunk_index AS TEXT) IN {self.dialect.id_list}{where} ORDER BY chunk_index"
        )
        bind |= {"d": document_id, "ids": json.dumps([str(i) for i in indexes])}
        found = self._query(lambda c: c.execute(statement, bind).fetchall())
        return [self._decoded(r) for r in found]

    def labelled_documents(self, labels: Sequence[str]) -> list[str]:
        """The documents carrying at least one of `labels` (the keyword search's candidates)."""
        statement = text(f"SELECT DISTINCT document_id FROM labels WHERE label IN {self.dialect.id_list}")
        return list(self._query(lambda c: c.execute(statement, {"ids": json.dumps(list(labels))}).scalars()))

    def document_labels(self, document_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """document_id -> its labels (sorted), for the documents that have any."""
        ids = list(dict.fromkeys(document_ids))
        if not ids:
            return {}
        statement = text(f"SELECT document_id, label FROM labels WHERE document_id IN {self.dialect.id_list}")
        found: dict[str, list[str]] = {}
        for document_id, label in self._query(
            lambda c: c.execute(statement, {"ids": json.dumps(ids)}).fetchall()
        ):
            found.setdefault(document_id, []).append(label)
        return {d: tuple(sorted(labels)) for d, labels in found.items()}

    def chunk_labels(self, document_id: str | None = None) -> dict[str, tuple[str, ...]]:
        """chunk_id -> its document's labels (sorted; () for none), for every chunk or one document's."""
        where = "" if document_id is None else " WHERE c.document_id = :d"
        statement = text(
            f"SELECT c.chunk_id, l.label FROM chunks c LEFT JOIN labels l ON l.document_id = c.document_id{where}"
        )
        found: dict[str, list[str]] = {}
        with self.db.read() as conn:
            for chunk_id, label in conn.execute(statement, {"d": document_id}):
                held = found.setdefault(chunk_id, [])
                if label is not None:
                    held.append(label)
        return {c: tuple(sorted(labels)) for c, labels in found.items()}

    def _decoded(self, row: Sequence[Any]) -> tuple[Any, ...]:
        content = self.dialect.decode(row[5])
        if content is None:  # written behind the store's back: shown, but never hashed as ours
            content = (
                bytes(row[5]).decode("utf-8", "replace") if isinstance(row[5], bytes | memoryview) else ""
            )
        return (*row[:5], content, row[6])

    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        with self.db.read() as conn:
            if document_id is None:
                return set(conn.execute(text("SELECT chunk_id FROM chunks")).scalars())
            return set(
                conn.execute(
                    text("SELECT chunk_id FROM chunks WHERE document_id = :d"), {"d": document_id}
                ).scalars()
            )

    def contents(self, document_id: str | None = None) -> Iterator[tuple[str, str | None]]:
        """(chunk_id, content or None where unreadable) of every row, a page per statement (keyset
        pagination on the primary key, so each page is an index range, however large the table)."""
        where = "" if document_id is None else "AND document_id = :d "
        after = ""
        while True:
            with self.db.read() as conn:
                page = conn.execute(
                    text(
                        f"SELECT chunk_id, content FROM chunks WHERE chunk_id > :after {where}ORDER BY chunk_id LIMIT :n"
                    ),
                    {"after": after, "d": document_id, "n": HASH_PAGE},
                ).fetchall()
            for chunk_id, content in page:
                yield chunk_id, self.dialect.decode(content)
            if len(page) < HASH_PAGE:
                return
            after = page[-1][0]

    def counts(self) -> tuple[int, int, int]:
        """(chunks, documents, total analysed terms)."""
        with self.db.read() as conn:
            chunks, documents, total = conn.execute(
                text("SELECT COUNT(*), COUNT(DISTINCT document_id), COALESCE(SUM(doc_len), 0) FROM chunks")
            ).one()
        return int(chunks), int(documents), int(total)

    def totals(self) -> tuple[int, int]:
        """(chunks, total analysed terms): what an index claiming to be this store's must also hold."""
        with self.db.read() as conn:
            chunks, total = conn.execute(text("SELECT COUNT(*), COALESCE(SUM(doc_len), 0) FROM chunks")).one()
        return int(chunks), int(total)
