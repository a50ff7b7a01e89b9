"""Document leases: which run may write a document now, so two runs never write one document at once.

On the embedded defaults runs that write vectors are serialised by a file lock (`flows.store_access`). With
server stores (`UNICHUNK_QDRANT_URL`, Neo4j), or for runs that do not write vectors, runs proceed in
parallel; a run then leases each document before it reads, chunks and writes it, and releases the lease
once the document's outcome is recorded. A document another run holds is not touched: the caller defers it
and retries later, reading the file as it is then, so the run that writes a document last has read it last
(the later update wins, whichever run finishes first).

A lease is keyed by (generation, document_id): a rebuild writes another generation's stores and status
table, so it never conflicts with the runs keeping the live generation current.

The rules, each for a reason:
- `acquire` never waits. It takes, in one transaction, every requested lease that is free, already the
  holder's, expired, or held by a holder whose process is gone, and returns the IDs it got. Waiting is the
  caller's business, and the pipeline waits only while it holds nothing, so two runs can never wait for
  each other (no deadlock, whatever order their documents come in).
- Expiry is per holder, not per lease: `holders` has one row per holder with `expires_at`, and `acquire`
  and `renew` push it forward. Renewing costs one row however many leases a run holds, and a batch's
  acquisition renews the rest of the run's leases in the same transaction.
- A holder whose process has exited is dead at once: its leases are taken over without waiting for the
  ttl (a run killed with SIGKILL, an OOM kill, a crashed worker). That check is possible only for holders
  on this machine (same host name, boot and PID namespace; the process start time guards against a reused
  PID); the ttl covers the rest (a holder on another machine, once the table is shared, see below).
- The ttl is a safety net, not a clock a live run races against: the flows renew from a heartbeat thread,
  so a slow batch (LLM extraction) never loses its leases while its process lives.

Storage: one SQLite file under the data dir (`<data_dir>/leases.sqlite3`, beside `sources.sqlite3` and the
generation registry), WAL, one short `BEGIN IMMEDIATE` transaction per call, so concurrent runs queue for
microseconds, never for a whole batch. Times are wall-clock seconds (`time.time()`): every process on the
machine reads the same clock.

Moving it to PostgreSQL (issue 14) keeps this interface (`acquire`, `renew`, `release`, `release_all`,
`held_by_others`, `held`), which is all the flows use: the two tables map one to one; `acquire` is the same
`INSERT ... ON CONFLICT DO UPDATE ... WHERE <the lease is free> RETURNING document_id` in one transaction;
expiry compares against the database's `now()` instead of each client's clock; and the dead-process
takeover still applies only to holders recorded with this machine's identity, the ttl covering holders on
other workers (a session-scoped advisory lock per holder, freed with its connection, could replace both).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# How long a lease outlives its holder's last renewal: what a holder the machine cannot check (another
# host) blocks a document for after it died. Live holders renew well within it.
DEFAULT_TTL_SECONDS = 600.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS holders (
    holder TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    machine TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_started TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    generation TEXT NOT NULL,
    document_id TEXT NOT NULL,
    holder TEXT NOT NULL,
    PRIMARY KEY (generation, document_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS leases_by_holder ON leases (holder);
"""

# Rows per multi-row statement: 3 parameters each, well under SQLite's bound-parameter limit.
_CHUNK = 300

# A lease is free to take when its holder is this one, or is not a live holder row (expired or removed).
_TAKE = (
    "INSERT INTO leases (generation, document_id, holder) VALUES {values} "
    "ON CONFLICT (generation, document_id) DO UPDATE SET holder = excluded.holder "
    "WHERE leases.holder = excluded.holder OR NOT EXISTS "
    "(SELECT 1 FROM holders h WHERE h.holder = leases.holder AND h.expires_at > ?) "
    "RETURNING document_id"
)


@dataclass(frozen=True)
class ProcessIdentity:
    """Which process holds a lease, precisely enough to tell later that it has exited.

    `machine` is the host name plus, where Linux exposes them, the boot ID and the PID namespace: a PID
    means the same process only within one boot of one namespace (two containers may share a host name
    with `network_mode: host`). `started` is the process start time, so a PID reused after the holder
    exited is not mistaken for it. Empty where the platform does not say.
    """

    machine: str
    pid: int
    started: str

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(_machine(), pid, _start_time(pid))

    def is_gone(self) -> bool:
        """True only when this machine can tell that the process has exited; False when unsure."""
        if self.machine != _machine():
            return False  # another machine's process: only its ttl can free its leases
        if self.pid == os.getpid():
            return self.started != _start_time(self.pid)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # exists, owned by another user
        stat = _proc_stat(self.pid)
        if stat is None:
            return False  # alive as far as this platform can tell
        state, started = stat
        return state == "Z" or (bool(self.started) and started != self.started)  # zombie, or PID reused


@cache
def _machine() -> str:
    parts = [socket.gethostname()]
    with suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "|".join(parts)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) from /proc/<pid>/stat, or None where there is no such file."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name, in parentheses, may hold spaces
    return fields[0], fields[19]  # fields 3 (state) and 22 (starttime) of proc(5)


def _start_time(pid: int) -> str:
    stat = _proc_stat(pid)
    return stat[1] if stat is not None else ""


class DocumentLeases:
    """`<data_dir>/leases.sqlite3`: which holder may write which (generation, document) now.

    A holder is an opaque string unique per run (the flows use a uuid4); the process that calls `acquire`
    is recorded as its process. Cheap to construct; each call opens its own connection, so one instance
    may be used from several threads (a run's heartbeat renews while its batches acquire and release).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        process: ProcessIdentity | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.process = process or ProcessIdentity.current()
        self.clock = clock  # wall-clock seconds shared by every process on the machine (tests move it)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
        finally:
            conn.close()

    @classmethod
    def in_data_dir(cls, data_dir: str | Path) -> DocumentLeases:
        return cls(Path(data_dir) / "leases.sqlite3")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (`BEGIN IMMEDIATE`): a read that later upgrades to a write
        could fail with "database is locked" where waiting for the writer first never does."""
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            # WAL + NORMAL cannot corrupt; a power loss may undo the last commits, and it ends every
            # holder anyway.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

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
        now = self.clock()
        with self._transaction() as conn:
            self._register(conn, holder, label, now + ttl)
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
        with self._transaction() as conn:
            conn.execute("UPDATE holders SET expires_at = ? WHERE holder = ?", (self.clock() + ttl, holder))
            return self._held(conn, holder, generation, wanted)

    def release(self, holder: str, generation: str, document_ids: Iterable[str]) -> None:
        """Give up `holder`'s leases of `document_ids` (another holder's are left alone)."""
        ids = list(dict.fromkeys(document_ids))
        if not ids:
            return
        with self._transaction() as conn:
            for part in _parts(ids):
                marks = ",".join("?" * len(part))
                conn.execute(
                    f"DELETE FROM leases WHERE holder = ? AND generation = ? AND document_id IN ({marks})",
                    [holder, generation, *part],
                )

    def release_all(self, holder: str) -> None:
        """End `holder`: its leases in every generation and its row go. Also sweeps what expired holders
        left behind (their leases are free already; this only keeps the table small)."""
        now = self.clock()
        with self._transaction() as conn:
            conn.execute("DELETE FROM leases WHERE holder = ?", (holder,))
            conn.execute("DELETE FROM holders WHERE holder = ?", (holder,))
            conn.execute(
                "DELETE FROM leases WHERE holder IN (SELECT holder FROM holders WHERE expires_at <= ?)",
                (now,),
            )
            conn.execute("DELETE FROM holders WHERE expires_at <= ?", (now,))

    # --- reads ---------------------------------------------------------------------------------------

    def held_by_others(self, holder: str, generation: str, document_ids: Iterable[str]) -> dict[str, str]:
        """Which of `document_ids` another live holder has now: document ID -> that holder's label.

        Read only: what a waiting run polls. A lease whose holder expired or whose process is gone is not
        listed (the next `acquire` takes it over)."""
        ids = list(dict.fromkeys(document_ids))
        now = self.clock()
        found: dict[str, str] = {}
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            for part in _parts(ids):
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    "SELECT l.document_id, h.holder, h.label, h.machine, h.pid, h.pid_started "
                    "FROM leases l JOIN holders h ON h.holder = l.holder "
                    f"WHERE l.generation = ? AND l.document_id IN ({marks}) AND h.holder != ? "
                    "AND h.expires_at > ?",
                    [generation, *part, holder, now],
                ).fetchall()
                alive: dict[str, bool] = {}
                for document_id, other, label, machine, pid, started in rows:
                    if other not in alive:
                        alive[other] = not ProcessIdentity(machine, pid, started).is_gone()
                    if alive[other]:
                        found[document_id] = label or other
        finally:
            conn.close()
        return found

    def held(self, holder: str, generation: str) -> set[str]:
        """Every document of `generation` that `holder` holds (expired or not)."""
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            rows = conn.execute(
                "SELECT document_id FROM leases WHERE holder = ? AND generation = ?", (holder, generation)
            )
            return {row[0] for row in rows}
        finally:
            conn.close()

    # --- inside a transaction ------------------------------------------------------------------------

    def _register(self, conn: sqlite3.Connection, holder: str, label: str, expires_at: float) -> None:
        process = self.process
        conn.execute(
            "INSERT INTO holders (holder, label, machine, pid, pid_started, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (holder) DO UPDATE SET expires_at = excluded.expires_at, "
            "label = excluded.label",
            (holder, label, process.machine, process.pid, process.started, expires_at),
        )

    @staticmethod
    def _take(conn: sqlite3.Connection, holder: str, generation: str, ids: list[str], now: float) -> set[str]:
        got: set[str] = set()
        for part in _parts(ids):
            values = ",".join("(?, ?, ?)" for _ in part)
            params: list[object] = [v for d in part for v in (generation, d, holder)]
            got.update(row[0] for row in conn.execute(_TAKE.format(values=values), [*params, now]))
        return got

    @staticmethod
    def _held(conn: sqlite3.Connection, holder: str, generation: str, ids: list[str]) -> set[str]:
        held: set[str] = set()
        for part in _parts(ids):
            marks = ",".join("?" * len(part))
            rows = conn.execute(
                f"SELECT document_id FROM leases WHERE holder = ? AND generation = ? AND document_id IN ({marks})",
                [holder, generation, *part],
            )
            held.update(row[0] for row in rows)
        return held

    @staticmethod
    def _bury_dead(conn: sqlite3.Connection, generation: str, ids: list[str], now: float) -> bool:
        """Remove the holders of `ids` whose process is gone (with all their leases); True if any was."""
        holders: dict[str, ProcessIdentity] = {}
        for part in _parts(ids):
            marks = ",".join("?" * len(part))
            rows = conn.execute(
                "SELECT DISTINCT h.holder, h.machine, h.pid, h.pid_started "
                "FROM leases l JOIN holders h ON h.holder = l.holder "
                f"WHERE l.generation = ? AND l.document_id IN ({marks}) AND h.expires_at > ?",
                [generation, *part, now],
            )
            for holder, machine, pid, started in rows:
                holders[holder] = ProcessIdentity(machine, pid, started)
        dead = [holder for holder, process in holders.items() if process.is_gone()]
        for holder in dead:
            conn.execute("DELETE FROM leases WHERE holder = ?", (holder,))
            conn.execute("DELETE FROM holders WHERE holder = ?", (holder,))
        return bool(dead)


def _parts(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]
