"""The SQL database behind the pipeline's records and the keyword store: SQLite files, or one PostgreSQL.

Embedded, each kind of record keeps its SQLite file under the data dir; with `UNICHUNK_DATABASE_URL` they all
live in one PostgreSQL database, a file becoming a schema, so workers on any machines share them and keep
nothing on their own disks. One implementation of each store serves both: SQLAlchemy Core `text()`
statements with unqualified table names (each PostgreSQL transaction sets `search_path`), and the few
differences asked of `Database` (DDL per dialect, `BEGIN IMMEDIATE`, lists as parameters, `pack`/`unpack`
for text PostgreSQL cannot hold). No ORM.

Connections are pooled per process (dropped in a forked child). A SQLite file keeps one connection open,
because closing the last one checkpoints its WAL on every transaction; one whose file was deleted (a dropped
generation) is replaced at checkout. A server that does not answer or refuses raises `DatabaseUnavailable`:
one line naming UNICHUNK_DATABASE_URL (its password hidden), which the CLI exits 3 on.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from sqlalchemy import (
    Connection,
    Engine,
    TextClause,
    bindparam,
    create_engine,
    event,
    inspect,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, NoSuchTableError, OperationalError
from sqlalchemy.pool import QueuePool

from unichunk.chunking.errors import UnichunkError
from unichunk.sinks.config import SinkSettings, physical_name
from unichunk.sinks.disk_space import is_sqlite_full, sqlite_full_error

Dialect = Literal["sqlite", "postgresql"]

# The schema of the data dir's own records on PostgreSQL; a generation's is `<this>__<generation>`.
SCHEMA = "unichunk"

# Rows per statement where SQLite binds one parameter per value (its limit is 32766 parameters, older
# builds 999); PostgreSQL gets a whole list as one array parameter.
SQLITE_LIST_ROWS = 300

# SQLite files whose engine (and kept connection) a process holds at most: the most recently used.
SQLITE_ENGINES_KEPT = 32

_engines: dict[str, Engine] = {}  # PostgreSQL, per URL
_sqlite_engines: OrderedDict[tuple[Path, bool], Engine] = OrderedDict()  # least recently used first
_engines_lock = threading.Lock()
# (URL, schema, DDL) already run by this process on PostgreSQL: `ensure` is called each time a store is
# made, and re-running CREATE INDEX IF NOT EXISTS there takes a lock that queues behind every writer.
_ensured: set[tuple[str, str | None, tuple[str, ...]]] = set()


class DatabaseUnavailable(UnichunkError):
    """The server-mode database does not answer or refuses (authentication, permissions, shutting down)."""


def server_url(settings: SinkSettings) -> str | None:
    """The PostgreSQL URL of server mode, with psycopg 3 as its driver; None on the embedded default."""
    if settings.database_url is None:
        return None
    raw = settings.database_url.get_secret_value()
    url = make_url(raw)
    if url.get_backend_name() != "postgresql":
        raise ValueError(
            f"UNICHUNK_DATABASE_URL must be a postgresql:// URL, not {url.get_backend_name()}://"
        )
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def open_database(
    settings: SinkSettings,
    sqlite_path: Path,
    *,
    generation: str | None = None,
    readonly: bool = False,
) -> Database:
    """The database of one kind of record: `sqlite_path` embedded, else the server's schema for it
    (`generation` None: the data dir's records; a generation ID: that generation's)."""
    url = server_url(settings)
    if url is None:
        return Database.sqlite(sqlite_path, readonly=readonly)
    return Database(_engine(url), physical_name(SCHEMA, generation))


def open_store_database(
    settings: SinkSettings, sqlite_path: Path, store: str, *, generation: str | None = None
) -> Database:
    """Like `open_database`, for a store whose tables live apart from the records' on PostgreSQL: schema
    `unichunk_<store>[__<generation>]` (the chunk cache's `documents` and `chunks` must not meet a
    generation's status or keyword tables), so the store can drop its schema alone. Embedded, the same
    SQLite file `sqlite_path`."""
    url = server_url(settings)
    if url is None:
        return Database.sqlite(sqlite_path)
    return Database(_engine(url), physical_name(f"{SCHEMA}_{store}", generation))


class Database:
    """A connection pool plus where this store's tables live. Cheap to construct: engines are shared per
    URL (or SQLite file) in the process, so stores made per call reuse one pool."""

    def __init__(self, engine: Engine, schema: str | None = None, path: Path | None = None) -> None:
        self.engine = engine
        self.schema = schema if engine.dialect.name == "postgresql" else None
        self.path = path  # the SQLite file, named by errors

    @classmethod
    def sqlite(cls, path: Path, *, readonly: bool = False) -> Database:
        """A SQLite file (created on first write unless `readonly`; a read-only one is never created)."""
        path = Path(path).absolute()
        if not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
        return cls(_sqlite_engine(path, readonly), path=path)

    @property
    def dialect(self) -> Dialect:
        return "postgresql" if self.engine.dialect.name == "postgresql" else "sqlite"

    # --- transactions --------------------------------------------------------------------------------

    @contextmanager
    def write(self, lock: str | None = None) -> Iterator[Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises. On SQLite it
        takes the write lock at BEGIN (`BEGIN IMMEDIATE`), so two writers queue instead of one failing
        with "database is locked" when it upgrades a read lock mid-transaction.

        `lock` names a lock that serialises this store's transactions that ask for it on PostgreSQL too
        (a transaction-level advisory lock on `<schema>.<lock>`): for the read-modify-writes no single
        statement can do (see each store). Statements after it see every transaction that held it."""
        with self._reachable(), self.engine.connect() as conn:
            conn = conn.execution_options(immediate=True)
            with conn.begin():
                self._enter_schema(conn)
                if lock is not None and self.schema is not None:
                    conn.execute(
                        text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"{self.schema}.{lock}"}
                    )
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """One read transaction: every statement in the block sees the same snapshot (SQLite; PostgreSQL's
        READ COMMITTED gives each statement its own)."""
        with self._reachable(), self.engine.connect() as conn, conn.begin():
            self._enter_schema(conn)
            yield conn

    def _enter_schema(self, conn: Connection) -> None:
        if self.schema is not None:  # for this transaction only: pooled connections serve every schema
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{self.schema}"')

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        """A server that does not answer or refuses becomes `DatabaseUnavailable`, one line naming the
        variable; a full disk under a SQLite file `DiskFull`, one line naming the file; any other database error (a bug, a constraint) stays what it is."""
        try:
            yield
        except DBAPIError as exc:
            if self.dialect == "postgresql" and _unavailable(exc):
                raise DatabaseUnavailable(_describe(self.engine, exc)) from exc
            if self.dialect == "sqlite" and is_sqlite_full(exc):
                raise sqlite_full_error(exc, self.path or Path(self.engine.url.database or "")) from exc
            if self.schema is not None and self.missing(exc):
                self._forget_ensured()  # another process dropped the schema: the next store re-creates it
            raise

    # --- schema --------------------------------------------------------------------------------------

    def has_table(self, name: str) -> bool:
        """Whether `name` exists (a reader may look before the first writer created anything)."""
        try:
            with self._reachable(), self.engine.connect() as conn:
                return inspect(conn).has_table(name, schema=self.schema)
        except DBAPIError:
            if self.dialect == "sqlite":
                return False  # a read-only file that does not exist yet
            raise

    def ensure(self, statements: Iterable[str]) -> None:
        """Create this store's schema (PostgreSQL) and run its idempotent DDL, in one transaction; on
        PostgreSQL once per process and schema (`drop_schema` forgets it)."""
        statements = tuple(statements)
        done = (str(self.engine.url), self.schema, statements)
        if self.schema is not None:
            if done in _ensured:
                return
            with self._reachable(), self.engine.connect() as conn, conn.begin():
                # Two processes creating one schema at once race even with IF NOT EXISTS: serialise them.
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": self.schema})
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'))
        with self.write() as conn:
            if self.schema is not None:
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": self.schema})
            for statement in statements:
                conn.execute(text(statement))
        if self.schema is not None:
            _ensured.add(done)

    def columns(self, table: str) -> set[str]:
        """The column names of `table` (none while it does not exist)."""
        try:
            with self._reachable(), self.engine.connect() as conn:
                return {column["name"] for column in inspect(conn).get_columns(table, schema=self.schema)}
        except NoSuchTableError:
            return set()
        except DBAPIError:
            if self.dialect == "sqlite":
                return set()  # a read-only file that does not exist yet
            raise

    def add_missing_columns(self, table: str, columns: Mapping[str, str]) -> None:
        """Add the `columns` (name -> SQL type) that `table`, made by an earlier version, lacks: a schema
        grows by nullable columns only, so every earlier row stays valid."""
        if set(columns) <= self.columns(table):
            return
        with self.write(lock=f"columns.{table}") as conn:  # two writers adding at once: one adds, one sees
            present = {column["name"] for column in inspect(conn).get_columns(table, schema=self.schema)}
            for name, kind in columns.items():
                if name not in present:
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"))

    def drop_schema(self) -> None:
        """Drop this store's PostgreSQL schema and every table in it (a dropped generation); a no-op on
        SQLite, whose files go with the generation's directory."""
        if self.schema is not None:
            with self.write() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
            self._forget_ensured()

    def _forget_ensured(self) -> None:
        url = str(self.engine.url)
        _ensured.difference_update({e for e in _ensured if e[0] == url and e[1] == self.schema})

    def _binary_columns(self, table: str) -> set[str]:
        """The BYTEA columns of `table` (PostgreSQL; none on SQLite)."""
        if self.schema is None:
            return set()
        with self.read() as conn:
            rows = conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = :s "
                    "AND table_name = :t AND data_type = 'bytea'"
                ),
                {"s": self.schema, "t": table},
            )
            return {row[0] for row in rows}

    def missing(self, exc: BaseException) -> bool:
        """Whether `exc` says the table read does not exist yet (or, read-only, its SQLite file): what a
        reader sees before the first writer of a store, which reads as empty."""
        if not isinstance(exc, DBAPIError):
            return False
        if self.dialect == "postgresql":
            return getattr(exc.orig, "sqlstate", None) in ("42P01", "3F000")  # undefined table / schema
        message = str(exc.orig)
        return "no such table" in message or "unable to open database file" in message

    # --- dialect differences in statements -----------------------------------------------------------

    def any_of(self, column: str, name: str) -> str:
        """`column` is one of the list bound as `name`: one array parameter on PostgreSQL (`= ANY`), an
        expanding `IN` on SQLite (make the statement with `statement(sql, name)`, bind at most
        `SQLITE_LIST_ROWS` values: `parts`)."""
        return f"{column} = ANY(:{name})" if self.dialect == "postgresql" else f"{column} IN :{name}"

    def statement(self, sql: str, *lists: str) -> TextClause:
        """`text(sql)` whose `lists` parameters are lists (see `any_of`)."""
        clause = text(sql)
        if self.dialect == "sqlite" and lists:
            clause = clause.bindparams(*(bindparam(name, expanding=True) for name in lists))
        return clause

    def parts(self, values: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """`values` in pieces one statement may bind: all at once on PostgreSQL (an array), a few hundred
        on SQLite. Nothing for no values."""
        size = len(values) if self.dialect == "postgresql" else SQLITE_LIST_ROWS
        for start in range(0, len(values), max(size, 1)):
            yield values[start : start + size]

    def keys_in(
        self, columns: Sequence[str], keys: Sequence[Sequence[Any]], types: Sequence[str]
    ) -> tuple[str, dict[str, Any]]:
        """A condition "(columns) is one of `keys`" and its parameters, for composite keys: `unnest` of one
        array per column on PostgreSQL (`types` are their SQL types there), a VALUES list on SQLite (bind at
        most `SQLITE_LIST_ROWS` keys: `parts`)."""
        names = ", ".join(columns)
        if self.dialect == "postgresql":
            arrays = ", ".join(f"CAST(:k{i} AS {kind}[])" for i, kind in enumerate(types))
            params = {f"k{i}": [key[i] for key in keys] for i in range(len(columns))}
            return f"({names}) IN (SELECT * FROM unnest({arrays}))", params
        rows = ", ".join(
            "(" + ", ".join(f":k{n}_{i}" for i in range(len(columns))) + ")" for n in range(len(keys))
        )
        params = {f"k{n}_{i}": value for n, key in enumerate(keys) for i, value in enumerate(key)}
        return f"({names}) IN (VALUES {rows})", params

    def pack(self, value: str | None) -> str | bytes | None:
        """User text (a path, an error, a name) as stored: unchanged on SQLite; UTF-8 bytes (BYTEA) on
        PostgreSQL, whose TEXT cannot hold a NUL character. `surrogatepass` keeps a lone surrogate (a file
        name that is not UTF-8) too, so every str comes back exactly. Bytes compare as UTF-8 sorts, which
        is code point order: SQLite's order of TEXT, so ORDER BY agrees on both."""
        if value is None or self.dialect == "sqlite":
            return value
        return value.encode("utf-8", "surrogatepass")

    @staticmethod
    def unpack(value: str | bytes | memoryview | None) -> str | None:
        """The str `pack` stored."""
        if value is None or isinstance(value, str):
            return value
        return bytes(value).decode("utf-8", "surrogatepass")


def copy_rows(source: Database, target: Database, table: str, *, page: int = 500) -> int:
    """Every row of `table` from `source` into the same table of `target` (created already), columns by
    name, in pages; returns how many rows were read. A row whose key `target` holds already is left as it
    is, so a copy that stopped can simply run again. Text goes through `pack` where `target` keeps it as
    BYTEA (PostgreSQL's columns say which)."""
    binary = target._binary_columns(table)
    copied = 0
    with source.read() as src, target.write() as dst:
        result = src.execute(text(f"SELECT * FROM {table}"))
        columns = list(result.keys())
        insert = text(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(f':{c}' for c in columns)}) "
            "ON CONFLICT DO NOTHING"
        )
        while rows := result.fetchmany(page):
            dst.execute(
                insert,
                [
                    {
                        c: target.pack(v) if c in binary and isinstance(v, str) else v
                        for c, v in zip(columns, row, strict=True)
                    }
                    for row in rows
                ],
            )
            copied += len(rows)
    return copied


def _unavailable(exc: DBAPIError) -> bool:
    """The server is unreachable or refuses us, rather than one statement being wrong: no connection,
    authentication, no such database, too many connections, shutting down, or no permission."""
    if exc.connection_invalidated:
        return True
    state = getattr(exc.orig, "sqlstate", None)
    if state is None:
        return isinstance(exc, OperationalError | InterfaceError)  # psycopg's "connection failed"
    return state.startswith(("08", "28", "3D", "53", "57P")) or state == "42501"


def _describe(engine: Engine, exc: DBAPIError) -> str:
    shown = engine.url.set(drivername="postgresql").render_as_string(hide_password=True)
    cause = " ".join(str(exc.orig).split()) or type(exc.orig).__name__
    if len(cause) > 300:
        cause = cause[:297] + "..."
    state = getattr(exc.orig, "sqlstate", None)
    # The server answered and said no (authentication, no such database or role, permission), as a SQL
    # state or, when it refuses a connection, as a FATAL message; else nothing answered.
    refused = (state or "").startswith(("28", "3D", "42")) or "FATAL:" in cause
    verb = "refused" if refused else "is unreachable"
    return f"the database of UNICHUNK_DATABASE_URL ({shown}) {verb}: {cause}"


def _engine(url: str) -> Engine:
    """The process's engine (and pool) for a PostgreSQL URL."""
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = _create_postgres(url)
        return engine


def _sqlite_engine(path: Path, readonly: bool) -> Engine:
    """The process's engine for a SQLite file, read-only or not. The most recently used few are kept (a
    long-lived process, a test session, touches many files); an older one is disposed, closing its
    connections."""
    key = (path, readonly)
    with _engines_lock:
        engine = _sqlite_engines.pop(key, None) or _create_sqlite(path, readonly)
        _sqlite_engines[key] = engine  # now the most recently used
        while len(_sqlite_engines) > SQLITE_ENGINES_KEPT:
            _sqlite_engines.pop(next(iter(_sqlite_engines))).dispose()
        return engine


def _create_postgres(url: str) -> Engine:
    # pre_ping: a pooled connection that the server closed (restart, failover) is replaced, not reused.
    # connect_timeout: a server that drops packets fails in seconds, not after the OS's minutes.
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=5,
        max_overflow=10,
        connect_args={"connect_timeout": 10, "application_name": "unichunk"},
    )


def _create_sqlite(path: Path, readonly: bool) -> Engine:
    def connect() -> sqlite3.Connection:
        # check_same_thread off: the pool hands a connection to one thread at a time, whichever it is.
        if readonly:  # a URI, so that mode=ro applies; every byte of the path percent-encoded but '/'
            uri = f"file:{quote(os.fsencode(path), safe='/')}?mode=ro"
            return sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)
        return sqlite3.connect(path, timeout=30, check_same_thread=False)

    # Pooled: closing the last connection to a WAL file checkpoints it and restarts the log, an fsync or
    # two per transaction (benchmarks/README.md has the figure).
    # One connection is kept; more are opened while threads need them.
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool, pool_size=1, max_overflow=-1)
    event.listen(engine, "connect", functools.partial(_sqlite_connected, path))
    event.listen(engine, "checkout", functools.partial(_sqlite_same_file, path))
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_same_file(path: Path, _dbapi_connection, record, _proxy) -> None:  # type: ignore[no-untyped-def]
    """A kept connection whose file was deleted (a dropped generation's directory) or replaced would read
    and write a file nobody else sees: it is discarded, and the pool connects to the file there now."""
    try:
        st = os.stat(path)
        current = (st.st_dev, st.st_ino)
    except OSError:
        current = None
    if record.info.get("file") != current:
        raise DisconnectionError(f"{path} is not the file this connection opened")


def _sqlite_connected(path: Path, dbapi_connection, record) -> None:  # type: ignore[no-untyped-def]
    with suppress(OSError):
        st = os.stat(path)
        record.info["file"] = (st.st_dev, st.st_ino)
    # SQLAlchemy, not the sqlite3 module, decides where transactions begin (see `_sqlite_begin`).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode")
        if cursor.fetchone()[0] != "wal":
            # WAL lets readers and one writer proceed together (concurrent flow runs, a status poll). A
            # read-only connection cannot switch: it reads whatever mode the file has.
            with suppress(sqlite3.Error):
                cursor.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL cannot corrupt; a power loss may undo only the last commits, which the next run
        # redoes (every sink write is idempotent). It saves an fsync per transaction.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get("immediate", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def dispose_engines() -> None:
    """Close every pooled connection of this process (tests that drop a database; a forked child)."""
    with _engines_lock:
        for engine in (*_engines.values(), *_sqlite_engines.values()):
            engine.dispose()
        _engines.clear()
        _sqlite_engines.clear()
        _ensured.clear()


def _after_fork_in_child() -> None:
    """A forked child must not use its parent's pooled sockets (two processes on one connection corrupt
    both): drop them without closing what the parent still uses (SQLAlchemy's recipe)."""
    for engine in (*_engines.values(), *_sqlite_engines.values()):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_after_fork_in_child)
