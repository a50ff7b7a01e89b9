"""The SQL database behind the pipeline's records and the keyword store: SQLite files, or one PostgreSQL.

Embedded (`UNICHUNK_DATABASE_URL` unset), each kind of record keeps the SQLite file it always had under the
data dir (`sources.sqlite3`, `generations/<id>/status.sqlite3`, ...), so nothing changes for a data dir made
before. Server mode (`UNICHUNK_DATABASE_URL=postgresql://...`) puts every one of them in one PostgreSQL
database, so a worker keeps nothing on its own disk and any number of workers on any machines share them:
what is a file on SQLite is a schema there (`unichunk` for the data dir's records, `unichunk__<generation>`
for a generation's), so the same statements run on both and dropping a generation drops its schema.

One implementation of each store serves both backends: statements are SQLAlchemy `text()` with named
parameters and unqualified table names (on PostgreSQL every transaction starts with `SET LOCAL search_path`
to the store's schema), and the few dialect differences (column types, `BEGIN IMMEDIATE`) are asked of
`Database.dialect`. SQLAlchemy Core is used for its engines, pools and parameter styles only; no ORM.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url

from sinks.config import SinkSettings, physical_name

Dialect = Literal["sqlite", "postgresql"]

# The schema of the data dir's own records on PostgreSQL; a generation's is `<this>__<generation>`.
SCHEMA = "unichunk"

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


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


class Database:
    """A connection pool plus where this store's tables live. Cheap to construct: engines are shared per
    URL (or SQLite file) in the process, so stores made per call reuse one pool."""

    def __init__(self, engine: Engine, schema: str | None = None) -> None:
        self.engine = engine
        self.schema = schema if engine.dialect.name == "postgresql" else None

    @classmethod
    def sqlite(cls, path: Path, *, readonly: bool = False) -> Database:
        """A SQLite file (created on first write unless `readonly`; a read-only one is never created)."""
        path = Path(path).absolute()
        if readonly:
            return cls(_engine(f"sqlite:///file:{path}?mode=ro&uri=true"))
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(_engine(f"sqlite:///{path}"))

    @property
    def dialect(self) -> Dialect:
        return "postgresql" if self.engine.dialect.name == "postgresql" else "sqlite"

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises. On SQLite it
        takes the write lock at BEGIN (`BEGIN IMMEDIATE`), so two writers queue instead of one failing
        with "database is locked" when it upgrades a read lock mid-transaction."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(immediate=True)
            with conn.begin():
                self._enter_schema(conn)
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """One read transaction: every statement in the block sees the same snapshot."""
        with self.engine.connect() as conn, conn.begin():
            self._enter_schema(conn)
            yield conn

    def _enter_schema(self, conn: Connection) -> None:
        if self.schema is not None:  # for this transaction only: pooled connections serve every schema
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{self.schema}"')

    def has_table(self, name: str) -> bool:
        """Whether `name` exists (a reader may look before the first writer created anything)."""
        try:
            with self.engine.connect() as conn:
                return inspect(conn).has_table(name, schema=self.schema)
        except Exception:
            if self.dialect == "sqlite":
                return False  # a read-only file that does not exist yet
            raise

    def ensure(self, statements: Iterable[str]) -> None:
        """Create this store's schema (PostgreSQL) and run its idempotent DDL, in one transaction."""
        if self.schema is not None:
            with self.engine.connect() as conn, conn.begin():
                # Two processes creating one schema at once race even with IF NOT EXISTS: serialise them.
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": self.schema})
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'))
        with self.write() as conn:
            if self.schema is not None:
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": self.schema})
            for statement in statements:
                conn.execute(text(statement))

    def drop_schema(self) -> None:
        """Drop this store's PostgreSQL schema and every table in it (a dropped generation); a no-op on
        SQLite, whose files go with the generation's directory."""
        if self.schema is not None:
            with self.write() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))


def _engine(url: str) -> Engine:
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = _create(url)
        return engine


def _create(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_connected)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    # pre_ping: a pooled connection that the server closed (restart, failover) is replaced, not reused.
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def _sqlite_connected(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
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
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def open_store_database(
    settings: SinkSettings, sqlite_path: Path, store: str, *, generation: str | None = None
) -> Database:
    """Like `open_database`, for a store whose tables live apart from the records' on PostgreSQL: schema
    `unichunk_<store>[__<generation>]` (the keyword store's `chunks` must not meet the chunk cache's), so
    the store can drop its schema alone. Embedded, the same SQLite file `sqlite_path`."""
    url = server_url(settings)
    if url is None:
        return Database.sqlite(sqlite_path)
    return Database(_engine(url), physical_name(f"{SCHEMA}_{store}", generation))
