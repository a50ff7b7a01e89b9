"""Document leases: which run may write a document now, so two runs never write one document at once.

Runs that proceed in parallel (server stores, or runs that write no vectors; embedded vector runs take
`unichunk.engine.store_access`'s file lock instead) lease each document before reading, chunking and writing
it. A document another run holds is deferred and retried later, read as it is then, so the later update wins
whichever run finishes first. Leases are keyed by (generation, document_id): a rebuild never conflicts with
the runs keeping the live generation current.

`acquire` never waits (so no two runs wait for each other); expiry is per holder and renewed from a heartbeat
(the ttl is a safety net); a holder whose process is gone on this machine is taken over at once.
docs/design.md ("Document leases") gives each rule's reason, docs/operations.md (server mode) the
PostgreSQL side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, text

from unichunk.index.process_identity import ProcessIdentity
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_database

# How long a lease outlives its holder's last renewal: what a holder the machine cannot check (another
# host) blocks a document for after it died. Live holders renew well within it.
DEFAULT_TTL_SECONDS = 600.0

# The embedded tables, exactly as data dirs made before server mode have them.
_SQLITE_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS holders (
    holder TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    machine TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_started TEXT NOT NULL,
    expires_at REAL NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS leases (
    generation TEXT NOT NULL,
    document_id TEXT NOT NULL,
    holder TEXT NOT NULL,
    PRIMARY KEY (generation, document_id)
) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS leases_by_holder ON leases (holder)",
]
_POSTGRES_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS holders (
    holder TEXT PRIMARY KEY,
    label BYTEA NOT NULL,
    machine TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_started TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS leases (
    generation TEXT NOT NULL,
    document_id BYTEA NOT NULL,
    holder TEXT NOT NULL,
    PRIMARY KEY (generation, document_id)
)""",
    _SQLITE_SCHEMA[2],
]
# The lock every write transaction holds on PostgreSQL (see the module docstring).
_LOCK = "leases"

# A lease is free to take when its holder is this one, or is not a live holder row (expired or removed).
_TAKE = (
    "INSERT INTO leases (generation, document_id, holder) {rows} "
    "ON CONFLICT (generation, document_id) DO UPDATE SET holder = excluded.holder "
    "WHERE leases.holder = excluded.holder OR NOT EXISTS "
    "(SELECT 1 FROM holders h WHERE h.holder = leases.holder AND h.expires_at > {now}) "
    "RETURNING document_id"
)


class DocumentLeases:
    """Which holder may write which (generation, document) now (see the module docstring for where).

    A holder is an opaque string unique per run (the flows use a uuid4); the process that calls `acquire`
    is recorded as its process. Cheap to construct; each call is its own transaction, so one instance
    may be used from several threads (a run's heartbeat renews while its batches acquire and release).
    `clock` (seconds) replaces the time a test moves by hand; by default it is this machine's clock on
    SQLite and the database's on PostgreSQL.
    """

    def __init__(
        self,
        database: Database,
        *,
        process: ProcessIdentity | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.db = database
        self.process = process or ProcessIdentity.current()
        self.clock = clock
        database.ensure(_POSTGRES_SCHEMA if database.dialect == "postgresql" else _SQLITE_SCHEMA)
        # The time of a statement: a parameter on SQLite (this machine's clock), the server's on PostgreSQL
        # unless a test clock gives one.
        self._now = (
            "COALESCE(CAST(:now AS DOUBLE PRECISION), EXTRACT(EPOCH FROM statement_timestamp()))"
            if database.dialect == "postgresql"
            else ":now"
        )

    @classmethod
    def of(cls, settings: SinkSettings, **options: Any) -> DocumentLeases:
        return cls(open_database(settings, settings.data_dir / "leases.sqlite3"), **options)

    def _time(self) -> float | None:
        """The `:now` parameter: the test clock, else this machine's clock on SQLite, else None (the
        database's clock, see `_now`)."""
        if self.clock is not None:
            return self.clock()
        return time.time() if self.db.dialect == "sqlite" else None

    # --- writes --------------------------------------------------------------------------------------

    def acquire(
        self,
        holder: str,
        generation: str,
        document_ids: Iterable[str],
        ttl: float = DEFAULT_TTL_SECONDS,
        *,
        label: str = "",
    ) -> set[str]:
        """Take every lease of `document_ids` that is free, expired, already `holder`'s or held by a dead
        process, all in one transaction; returns the IDs taken. Also renews all of `holder`'s leases.

        `label` says who the holder is in other runs' logs ("flow run 'x' (pid 12)")."""
        wanted = list(dict.fromkeys(document_ids))
        now = self._time()
        with self.db.write(lock=_LOCK) as conn:
            self._register(conn, holder, label, now, ttl)
            got = self._take(conn, holder, generation, wanted, now)
            refused = [d for d in wanted if d not in got]
            if refused and self._bury_dead(conn, generation, refused, now):
                got |= self._take(conn, holder, generation, refused, now)
        return got

    def renew(
        self, holder: str, generation: str, document_ids: Iterable[str], ttl: float = DEFAULT_TTL_SECONDS
    ) -> set[str]:
        """Push `holder`'s expiry `ttl` seconds ahead (all its leases: expiry is per holder); returns which
        of `document_ids` it still holds. One missing means the holder was silent past its ttl and another
        run took the document over."""
        wanted = list(dict.fromkeys(document_ids))
        with self.db.write(lock=_LOCK) as conn:
            conn.execute(
                text(f"UPDATE holders SET expires_at = {self._now} + :ttl WHERE holder = :holder"),
                {"now": self._time(), "ttl": ttl, "holder": holder},
            )
            return self._held(conn, holder, generation, wanted)

    def release(self, holder: str, generation: str, document_ids: Iterable[str]) -> None:
        """Give up `holder`'s leases of `document_ids` (another holder's are left alone)."""
        ids = [self.db.pack(d) for d in dict.fromkeys(document_ids)]
        if not ids:
            return
        statement = self.db.statement(
            "DELETE FROM leases WHERE holder = :holder AND generation = :g AND "
            + self.db.any_of("document_id", "ids"),
            "ids",
        )
        with self.db.write(lock=_LOCK) as conn:
            for part in self.db.parts(ids):
                conn.execute(statement, {"holder": holder, "g": generation, "ids": list(part)})

    def release_all(self, holder: str) -> None:
        """End `holder`: its leases in every generation and its row go. Also sweeps what expired holders
        left behind (their leases are free already; this only keeps the table small)."""
        params = {"holder": holder, "now": self._time()}
        with self.db.write(lock=_LOCK) as conn:
            conn.execute(text("DELETE FROM leases WHERE holder = :holder"), params)
            conn.execute(text("DELETE FROM holders WHERE holder = :holder"), params)
            conn.execute(
                text(
                    "DELETE FROM leases WHERE holder IN "
                    f"(SELECT holder FROM holders WHERE expires_at <= {self._now})"
                ),
                params,
            )
            conn.execute(text(f"DELETE FROM holders WHERE expires_at <= {self._now}"), params)

    # --- reads ---------------------------------------------------------------------------------------

    def held_by_others(self, holder: str, generation: str, document_ids: Iterable[str]) -> dict[str, str]:
        """Which of `document_ids` another live holder has now: document ID -> that holder's label.

        Read only: what a waiting run polls. A lease whose holder expired or whose process is gone is not
        listed (the next `acquire` takes it over)."""
        ids = [self.db.pack(d) for d in dict.fromkeys(document_ids)]
        statement = self.db.statement(
            "SELECT l.document_id, h.holder, h.label, h.machine, h.pid, h.pid_started "
            "FROM leases l JOIN holders h ON h.holder = l.holder "
            f"WHERE l.generation = :g AND {self.db.any_of('l.document_id', 'ids')} AND h.holder != :holder "
            f"AND h.expires_at > {self._now}",
            "ids",
        )
        found: dict[str, str] = {}
        alive: dict[str, bool] = {}
        with self.db.read() as conn:
            for part in self.db.parts(ids):
                params = {"g": generation, "ids": list(part), "holder": holder, "now": self._time()}
                for document_id, other, label, machine, pid, started in conn.execute(statement, params):
                    if other not in alive:
                        alive[other] = not ProcessIdentity(machine, pid, started).is_gone()
                    if alive[other]:
                        found[str(self.db.unpack(document_id))] = self.db.unpack(label) or other
        return found

    def held(self, holder: str, generation: str) -> set[str]:
        """Every document of `generation` that `holder` holds (expired or not)."""
        with self.db.read() as conn:
            rows = conn.execute(
                text("SELECT document_id FROM leases WHERE holder = :holder AND generation = :g"),
                {"holder": holder, "g": generation},
            )
            return {str(self.db.unpack(row[0])) for row in rows}

    # --- inside a transaction ------------------------------------------------------------------------

    def _register(self, conn: Connection, holder: str, label: str, now: float | None, ttl: float) -> None:
        process = self.process
        conn.execute(
            text(
                "INSERT INTO holders (holder, label, machine, pid, pid_started, expires_at) "
                f"VALUES (:holder, :label, :machine, :pid, :started, {self._now} + :ttl) ON CONFLICT (holder) "
                "DO UPDATE SET expires_at = excluded.expires_at, label = excluded.label"
            ),
            {
                "holder": holder,
                "label": self.db.pack(label),
                "machine": process.machine,
                "pid": process.pid,
                "started": process.started,
                "now": now,
                "ttl": ttl,
            },
        )

    def _take(
        self, conn: Connection, holder: str, generation: str, ids: list[str], now: float | None
    ) -> set[str]:
        got: set[str] = set()
        for part in self.db.parts(ids):
            params: dict[str, Any] = {"g": generation, "holder": holder, "now": now}
            if self.db.dialect == "postgresql":
                rows = "SELECT :g, d, :holder FROM unnest(CAST(:ids AS bytea[])) AS d"
                params["ids"] = [self.db.pack(d) for d in part]
            else:
                rows = "VALUES " + ", ".join(f"(:g, :d{i}, :holder)" for i in range(len(part)))
                params.update({f"d{i}": d for i, d in enumerate(part)})
            statement = text(_TAKE.format(rows=rows, now=self._now))
            got.update(str(self.db.unpack(row[0])) for row in conn.execute(statement, params))
        return got

    def _held(self, conn: Connection, holder: str, generation: str, ids: list[str]) -> set[str]:
        statement = self.db.statement(
            "SELECT document_id FROM leases WHERE holder = :holder AND generation = :g AND "
            + self.db.any_of("document_id", "ids"),
            "ids",
        )
        held: set[str] = set()
        for part in self.db.parts([self.db.pack(d) for d in ids]):
            rows = conn.execute(statement, {"holder": holder, "g": generation, "ids": list(part)})
            held.update(str(self.db.unpack(row[0])) for row in rows)
        return held

    def _bury_dead(self, conn: Connection, generation: str, ids: list[str], now: float | None) -> bool:
        """Remove the holders of `ids` whose process is gone (with all their leases); True if any was."""
        statement = self.db.statement(
            "SELECT DISTINCT h.holder, h.machine, h.pid, h.pid_started "
            "FROM leases l JOIN holders h ON h.holder = l.holder "
            f"WHERE l.generation = :g AND {self.db.any_of('l.document_id', 'ids')} AND h.expires_at > {self._now}",
            "ids",
        )
        holders: dict[str, ProcessIdentity] = {}
        for part in self.db.parts([self.db.pack(d) for d in ids]):
            for holder, machine, pid, started in conn.execute(
                statement, {"g": generation, "ids": list(part), "now": now}
            ):
                holders[holder] = ProcessIdentity(machine, pid, started)
        dead = [{"holder": holder} for holder, process in holders.items() if process.is_gone()]
        if dead:
            conn.execute(text("DELETE FROM leases WHERE holder = :holder"), dead)
            conn.execute(text("DELETE FROM holders WHERE holder = :holder"), dead)
        return bool(dead)
