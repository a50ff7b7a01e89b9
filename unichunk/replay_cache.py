"""The webhook receiver's replay cache: signatures and delivery ids accepted recently, until they expire.

A record of the service, not of the index, kept in the data dir's database (`unichunk.sinks.database`), so
it sits in the application layer: the receiver (`unichunk.deployments.service.webhook`) opens it here and
never touches the database itself.
"""

from __future__ import annotations

import threading

from sqlalchemy import text

from unichunk.settings import SinkSettings
from unichunk.sinks.database import Database, open_database


def open_replay_cache(records: SinkSettings) -> ReplayCache:
    """The cache of the data dir these settings name: `webhook/replay.db` under it, or the `unichunk` schema
    of the server-mode database (UNICHUNK_DATABASE_URL)."""
    return ReplayCache(open_database(records, records.data_dir / "webhook" / "replay.db"))


class ReplayCache:
    """Remembers recently accepted signatures and delivery ids until they expire.

    An in-memory map answers fast; a table (`unichunk.sinks.database`: `webhook/replay.db` under the data dir, or
    the `unichunk` schema of the server-mode database) makes a restarted receiver, or a second one on the
    same volume or the same database, still refuse what was accepted moments before. `reserve` is atomic:
    one `INSERT ... ON CONFLICT DO UPDATE ... WHERE <expired> RETURNING` claims every key that is new or
    expired, and the transaction is rolled back unless it claimed them all, so two receivers reserving one
    key at once never both succeed (on PostgreSQL the second waits for the first's row and re-checks it).
    `release` undoes a reservation when the event could not be emitted, so the sender's retry is accepted.
    Times are the receiver's clock (the one its timestamp tolerance is judged by).
    """

    def __init__(self, database: Database | None) -> None:
        self._memory: dict[str, float] = {}
        self._lock = threading.Lock()
        self._db = database
        if database is not None:
            database.ensure(_REPLAY_SCHEMA[database.dialect])

    def reserve(self, keys: dict[str, float], now: float) -> bool:
        """Record every key with its expiry; False (and nothing recorded) if any is already known."""
        with self._lock:
            self._memory = {k: exp for k, exp in self._memory.items() if exp > now}
            if any(k in self._memory for k in keys):
                return False
            if self._db is not None:
                # Expired rows go in a transaction of their own, so no reservation waits on a sweep.
                with self._db.write() as conn:
                    conn.execute(text("DELETE FROM seen WHERE expires <= :now"), {"now": now})
                try:
                    with self._db.write() as conn:
                        claimed = conn.execute(
                            text(
                                "INSERT INTO seen (key, expires) VALUES "
                                + ", ".join(f"(:k{i}, :e{i})" for i in range(len(keys)))
                                + " ON CONFLICT (key) DO UPDATE SET expires = excluded.expires "
                                "WHERE seen.expires <= :now RETURNING key"
                            ),
                            {
                                "now": now,
                                **{f"k{i}": key for i, key in enumerate(sorted(keys))},
                                **{f"e{i}": keys[key] for i, key in enumerate(sorted(keys))},
                            },
                        ).all()
                        if len(claimed) < len(keys):
                            raise _AlreadySeen  # rolls the claimed ones back
                except _AlreadySeen:
                    return False
            self._memory.update(keys)
            return True

    def release(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._memory.pop(key, None)
            if self._db is not None and keys:
                with self._db.write() as conn:
                    conn.execute(
                        text("DELETE FROM seen WHERE key = :key"), [{"key": k} for k in sorted(keys)]
                    )

    def close(self) -> None:
        """Nothing stays open between calls (each is a transaction of its own); kept for the receiver's
        lifespan, which closes what it opened."""
        self._db = None


class _AlreadySeen(Exception):
    """A key of a reservation is known: its transaction is rolled back."""


# Keys are `sig:<hex>` and `dlv:<id>` (`check_delivery_id` allows [A-Za-z0-9._:-] only): TEXT on both.
_REPLAY_SCHEMA = {
    "sqlite": ["CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, expires REAL NOT NULL)"],
    "postgresql": [
        "CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, expires DOUBLE PRECISION NOT NULL)"
    ],
}
