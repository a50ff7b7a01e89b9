"""The queue of document updates webhooks reported and no run has applied yet, so one run applies many.

On the embedded defaults one run writes at a time (`unichunk.engine.store_access`), and each run pays a
whole start-up (a process, the models, the stores opened and optimised). So the receiver records each
accepted `updated` webhook here (`enqueue`) before it fires the event that starts its run; the run that
next takes the store lock claims every entry pending for its source (`claim`), applies them in one go
(reading each file as it is then), and records each entry's outcome (`finish`). The runs whose entries a
run applied find them settled and end at once, saying which run applied them (`outcome`).

Why a table and not Prefect's debouncing (a trigger's `within` plus `schedule_after`): an automation
passes a run only the one event that fired it, and the events it swallows during its window are gone, so
the run would have to rediscover what changed; here every accepted update is a row until a run has
applied it, which keeps the receiver's promise that an accepted update is never lost. A table, not the
status table: an entry is a request (what a webhook asked for), not a document's stored state.

States: `pending` (enqueued; a retried webhook sets its entry pending again), `claimed` (a run is applying
it), `done` / `failed` (applied, or failed with `error`, by the run `holder` names). Entries are claimed
only by a run holding the store lock, so an entry still `claimed` when a run takes the lock was left by a
run that died: it is claimed again. Settled entries are swept after `KEEP_SETTLED_SECONDS`. Lives in the
data dir's records (`webhook/updates.db`, beside the receiver's replay cache, or the `unichunk` schema of
the server-mode database).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Connection, text

from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_database

# How long a settled entry stays readable (for the run that was started for it, which may wait for a slot
# behind a long run): a run that finds no entry applies its own update again, so a sweep costs no update.
KEEP_SETTLED_SECONDS = 7 * 24 * 3600.0

EntryState = Literal["pending", "claimed", "done", "failed"]

_COLUMNS = "entry, source_system, source_id, path, queued_at, state, holder, error, settled_at"


def _schema(user_text: str, real: str) -> list[str]:
    return [
        f"""
CREATE TABLE IF NOT EXISTS queued_updates (
    entry TEXT PRIMARY KEY,
    source_system {user_text} NOT NULL,
    source_id {user_text} NOT NULL,
    path {user_text} NOT NULL,
    queued_at {real} NOT NULL,
    state TEXT NOT NULL,
    holder TEXT,
    error {user_text},
    settled_at {real}
)""",
        "CREATE INDEX IF NOT EXISTS queued_updates_by_state ON queued_updates (source_system, state)",
    ]


# User text (names, paths, errors) is kept as its UTF-8 bytes, surrogate escapes included (`_pack`): a file
# name that is not UTF-8 is still a file name, and a PostgreSQL TEXT cannot hold NUL.
_SCHEMA = {"sqlite": _schema("BLOB", "REAL"), "postgresql": _schema("BYTEA", "DOUBLE PRECISION")}


def _pack(value: str | None) -> bytes | None:
    return None if value is None else value.encode("utf-8", "surrogatepass")


def _unpack(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", "surrogatepass")  # type: ignore[call-overload]


@dataclass(frozen=True)
class QueuedUpdate:
    """One accepted webhook: which file of which source, and what became of it."""

    entry: str
    source_system: str
    source_id: str
    path: str
    queued_at: float
    state: EntryState
    holder: str | None = None
    error: str | None = None

    @property
    def settled(self) -> bool:
        return self.state in ("done", "failed")


class UpdateQueue:
    """The `queued_updates` table (see the module docstring). Each call is one transaction, so one instance
    serves several threads; `clock` replaces the time in tests."""

    def __init__(self, database: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = database
        self.clock = clock
        database.ensure(_SCHEMA[database.dialect])

    @classmethod
    def of(cls, settings: SinkSettings) -> UpdateQueue:
        return cls(open_database(settings, settings.data_dir / "webhook" / "updates.db"))

    def enqueue(self, entry: str, source_system: str, source_id: str, path: str) -> None:
        """Record an accepted update as pending; the same `entry` again (a sender's retry after the event
        could not be sent) makes it pending again, whatever became of it."""
        with self.db.write() as conn:
            conn.execute(
                text(
                    f"INSERT INTO queued_updates ({_COLUMNS}) VALUES (:entry, :system, :source_id, :path, "
                    ":now, 'pending', NULL, NULL, NULL) ON CONFLICT (entry) DO UPDATE SET "
                    "source_system = excluded.source_system, source_id = excluded.source_id, "
                    "path = excluded.path, queued_at = excluded.queued_at, state = 'pending', "
                    "holder = NULL, error = NULL, settled_at = NULL"
                ),
                {
                    "entry": entry,
                    "system": _pack(source_system),
                    "source_id": _pack(source_id),
                    "path": _pack(path),
                    "now": self.clock(),
                },
            )

    def withdraw(self, entry: str) -> bool:
        """Remove an entry no run has claimed yet (its webhook was refused after all: the event could not
        be sent); True if it was removed. A claimed or settled one stays: a run read the file after it."""
        with self.db.write() as conn:
            removed = conn.execute(
                text("DELETE FROM queued_updates WHERE entry = :entry AND state = 'pending' RETURNING entry"),
                {"entry": entry},
            ).all()
        return bool(removed)

    def claim(
        self, holder: str, source_system: str | None, *, also: Sequence[str] = ()
    ) -> list[QueuedUpdate]:
        """Claim for `holder` every unsettled entry of `source_system` (None: none), and the unsettled
        entries `also` names; oldest first. Call it only holding the store lock (see the module docstring:
        a `claimed` entry is then one a dead run left)."""
        now = self.clock()
        which = self.db.any_of("entry", "also")
        if source_system is not None:
            which = f"(source_system = :system OR {which})"
        with self.db.write() as conn:
            self._sweep(conn, now)
            claimed = conn.execute(
                self.db.statement(
                    "UPDATE queued_updates SET state = 'claimed', holder = :holder "
                    f"WHERE state IN ('pending', 'claimed') AND {which} RETURNING {_COLUMNS}",
                    "also",
                ),
                {"holder": holder, "system": _pack(source_system), "also": list(also) or [""]},
            ).all()
        return sorted((self._entry(row) for row in claimed), key=lambda e: (e.queued_at, e.entry))

    def finish(self, holder: str, outcomes: Mapping[str, str | None]) -> int:
        """Settle `holder`'s claimed entries: entry -> None (done) or the error it failed with. An entry set
        pending again meanwhile (a retried webhook) stays pending: its update may be newer than what
        `holder` read. Returns how many were settled."""
        now = self.clock()
        settled = 0
        with self.db.write() as conn:
            for entry, error in outcomes.items():
                settled += conn.execute(
                    text(
                        "UPDATE queued_updates SET state = :state, error = :error, settled_at = :now "
                        "WHERE entry = :entry AND holder = :holder AND state = 'claimed'"
                    ),
                    {
                        "state": "done" if error is None else "failed",
                        "error": _pack(error),
                        "now": now,
                        "entry": entry,
                        "holder": holder,
                    },
                ).rowcount
        return settled

    def release(self, holder: str, entries: Iterable[str]) -> None:
        """Hand `holder`'s claimed `entries` back (pending), for the next run: this one stopped before
        applying them."""
        with self.db.write() as conn:
            conn.execute(
                text(
                    "UPDATE queued_updates SET state = 'pending', holder = NULL "
                    "WHERE entry = :entry AND holder = :holder AND state = 'claimed'"
                ),
                [{"entry": entry, "holder": holder} for entry in entries] or [{"entry": "", "holder": ""}],
            )

    def get(self, entry: str) -> QueuedUpdate | None:
        with self.db.read() as conn:
            row = conn.execute(
                text(f"SELECT {_COLUMNS} FROM queued_updates WHERE entry = :entry"), {"entry": entry}
            ).first()
        return self._entry(row) if row is not None else None

    def entries(self, source_system: str | None = None) -> list[QueuedUpdate]:
        """Every entry (of one source), oldest first: for tests, benchmarks and an operator's look."""
        where = "" if source_system is None else " WHERE source_system = :system"
        with self.db.read() as conn:
            rows = conn.execute(
                text(f"SELECT {_COLUMNS} FROM queued_updates{where} ORDER BY queued_at, entry"),
                {"system": _pack(source_system)},
            ).all()
        return [self._entry(row) for row in rows]

    def _sweep(self, conn: Connection, now: float) -> None:
        conn.execute(
            text("DELETE FROM queued_updates WHERE settled_at IS NOT NULL AND settled_at <= :before"),
            {"before": now - KEEP_SETTLED_SECONDS},
        )

    def _entry(self, row: Sequence[object]) -> QueuedUpdate:
        entry, system, source_id, path, queued_at, state, holder, error, _settled = row
        return QueuedUpdate(
            entry=str(entry),
            source_system=_unpack(system) or "",
            source_id=_unpack(source_id) or "",
            path=_unpack(path) or "",
            queued_at=float(queued_at),  # type: ignore[arg-type]
            state=state,  # type: ignore[arg-type]
            holder=holder,  # type: ignore[arg-type]
            error=_unpack(error),
        )
