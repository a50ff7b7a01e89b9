"""Model results kept by what produced them: (model fingerprint, SHA-256 of the exact input text) -> bytes.

The vector sink keeps each embedding here and the graph sink each chunk's extraction, so an edited document
re-embeds only the chunks whose text changed, a rebuild that keeps the embedder reuses every vector, and a
passage two documents share is embedded once.

Why a table of its own and not the vector store: each index generation has its own store (a rebuild starts
from an empty collection), and deleting a document deletes its points, yet both vectors stay valid for
the next generation or for the same text elsewhere. So the cache lives beside the data dir's other records
(`<data_dir>/result_cache.sqlite3`, or the schema `unichunk_result_cache` of UNICHUNK_DATABASE_URL),
outlives generations and deletes, and is bounded on its own: each table keeps at most `result_cache_entries`
rows, the least recently used going first (0 turns caching off). A hit is exact by construction (same
model, same text), so the bound only costs recomputation, never a wrong result.

The cache is an optimisation: when it cannot be read or written (a locked or unreachable database), the
caller computes as if it were empty and a warning says why, and the batch goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

from sqlalchemy import text

from unichunk.chunking.ids import sha256_hex
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_store_database

logger = logging.getLogger(__name__)

CACHE_STORE = "result_cache"  # its PostgreSQL schema: `unichunk_result_cache`
CACHE_FILE = "result_cache.sqlite3"
TABLES = ("vectors", "extractions")


def _schema(table: str, blob: str, real: str) -> list[str]:
    return [
        f"""
CREATE TABLE IF NOT EXISTS {table} (
    fingerprint TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    value {blob} NOT NULL,
    used_at {real} NOT NULL,
    PRIMARY KEY (fingerprint, text_hash)
)""",
        f"CREATE INDEX IF NOT EXISTS {table}_used_at ON {table} (used_at)",
    ]


def text_key(text_: str) -> str:
    """The key of an input text: the SHA-256 of its UTF-8 encoding."""
    return sha256_hex(text_)


class ResultCache:
    """One table of model results (`vectors` or `extractions`) under one model fingerprint.

    `get` answers text hash -> stored bytes for the hashes it holds (and marks them used); `put` stores new
    ones and then trims the table to `max_entries`, least recently used first."""

    def __init__(self, database: Database | None, table: str, fingerprint: str, max_entries: int) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown result cache table {table!r}")
        self.table = table
        self.fingerprint = fingerprint
        self._key = sha256_hex(fingerprint)[:32]  # the fingerprint may be long (a URL): rows keep its hash
        self.max_entries = max_entries
        self._db = database if max_entries > 0 else None
        self._ready = False
        self._lock = threading.Lock()
        self._warned = False

    @classmethod
    def open(cls, settings: SinkSettings, table: str, fingerprint: str) -> ResultCache:
        """The cache of the data dir (or server database) `settings` name; off when `result_cache_entries`
        is 0. Nothing is created until the first `get` or `put`."""
        database = None
        if settings.result_cache_entries > 0:
            database = open_store_database(settings, settings.data_dir / CACHE_FILE, CACHE_STORE)
        return cls(database, table, fingerprint, settings.result_cache_entries)

    @property
    def enabled(self) -> bool:
        return self._db is not None

    def get(self, hashes: Sequence[str]) -> dict[str, bytes]:
        """text hash -> stored value, for the `hashes` held; marks them used (they are kept longest)."""
        wanted = list(dict.fromkeys(hashes))
        if self._db is None or not wanted:
            return {}
        try:
            db = self._ensure()
            found: dict[str, bytes] = {}
            select = db.statement(
                f"SELECT text_hash, value FROM {self.table} WHERE fingerprint = :fp AND "
                + db.any_of("text_hash", "hashes"),
                "hashes",
            )
            touch = db.statement(
                f"UPDATE {self.table} SET used_at = :now WHERE fingerprint = :fp AND "
                + db.any_of("text_hash", "hashes"),
                "hashes",
            )
            with db.write() as conn:
                for part in db.parts(wanted):
                    rows = conn.execute(select, {"fp": self._key, "hashes": list(part)})
                    found.update((row[0], bytes(row[1])) for row in rows)
                held = [h for h in wanted if h in found]
                now = time.time()
                for part in db.parts(held):
                    conn.execute(touch, {"fp": self._key, "now": now, "hashes": list(part)})
            return found
        except Exception as exc:
            self._warn("read", exc)
            return {}

    def put(self, values: Mapping[str, bytes]) -> None:
        """Store text hash -> value (a held one is only marked used), then trim to `max_entries`."""
        if self._db is None or not values:
            return
        try:
            db = self._ensure()
            now = time.time()
            rows = [{"fp": self._key, "h": h, "v": v, "now": now} for h, v in values.items()]
            insert = text(
                f"INSERT INTO {self.table} (fingerprint, text_hash, value, used_at) VALUES (:fp, :h, :v, :now) "
                "ON CONFLICT (fingerprint, text_hash) DO UPDATE SET used_at = excluded.used_at"
            )
            with db.write() as conn:
                for start in range(0, len(rows), 500):
                    conn.execute(insert, rows[start : start + 500])
                held = conn.execute(text(f"SELECT COUNT(*) FROM {self.table}")).scalar_one()
                excess = int(held) - self.max_entries
                if excess > 0:
                    conn.execute(
                        text(
                            f"DELETE FROM {self.table} WHERE (fingerprint, text_hash) IN (SELECT fingerprint, "
                            f"text_hash FROM {self.table} ORDER BY used_at LIMIT :excess)"
                        ),
                        {"excess": excess},
                    )
        except Exception as exc:
            self._warn("write", exc)

    def count(self) -> int:
        """Rows held in this table (every fingerprint)."""
        if self._db is None:
            return 0
        db = self._ensure()
        with db.read() as conn:
            return int(conn.execute(text(f"SELECT COUNT(*) FROM {self.table}")).scalar_one())

    def _ensure(self) -> Database:
        assert self._db is not None
        with self._lock:
            if not self._ready:
                if self._db.dialect == "postgresql":
                    self._db.ensure(_schema(self.table, "BYTEA", "DOUBLE PRECISION"))
                else:
                    self._db.ensure(_schema(self.table, "BLOB", "REAL"))
                self._ready = True
        return self._db

    def _warn(self, what: str, exc: Exception) -> None:
        if not self._warned:  # once per cache: a broken cache must not bury the log
            self._warned = True
            logger.warning(
                "the %s cache could not be %s, computing without it: %s: %s",
                self.table,
                "read" if what == "read" else "written",
                type(exc).__name__,
                exc,
            )
