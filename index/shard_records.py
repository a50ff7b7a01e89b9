"""What a sharded run's parent and its shard runs tell each other, through the pipeline's records.

A run split across workers (`flows.shards`) lists its source once. Each shard run must get the documents of
its shard, say that it is alive, and hand back what it did; the parent must learn all three wherever the
shard runs. Nothing of that travels through Prefect:

- **The manifest** (which documents each shard processes) is written here by the parent, keyed by the
  parent's flow run ID, and each shard reads its own part. Flow parameters would not do: Prefect stores
  a run's parameters in its database and shows them in the UI, and a million-document listing is
  100-200 MB. A shard's parameters are the parent run's ID, the shard's number and the settings
  fingerprint (a few hundred bytes, whatever the source). Re-listing the source in every shard would not
  do either: N listings of a large tree, and listings made at different moments disagree (a file added
  in between would be in one shard's view and not in the parent's, which decides deletions).
- **Liveness.** A shard run records the process it runs in (`ProcessIdentity`) and bumps a beat counter
  every few seconds. A Prefect worker that dies (SIGKILL, a lost machine) leaves its runs Running for
  ever: Prefect 3.8.8 marks a run Crashed only when its worker sees its process fail. The parent declares
  a shard dead when its process is gone (on this machine, at once) or its counter stops moving (any
  machine; compared on the parent's own clock, so clock skew between machines does not matter).
- **The summary** a shard returns is stored here as JSON, not read from Prefect's result storage,
  which is per worker machine unless configured otherwise.
- **Fencing.** Each attempt of a shard has a number (the parent passes it). A shard run takes the record
  over only if no later attempt has begun, and its beats and summary count only while it is the current
  attempt: a run the parent gave up on for dead and retried cannot overwrite its successor's summary.
  (Two attempts never write one document at once either: both hold document leases.)

Storage: one SQLite file under the data dir (`<data_dir>/shards.sqlite3`, beside the leases), WAL, one
short transaction per call. Rows are dropped when the parent ends; manifests older than a day (a parent
that crashed) are swept by the next sharded run. The tables map one to one to PostgreSQL
(`shard_items` is a plain insert, COPY-able; the fenced updates are the same `UPDATE ... WHERE attempt`),
which is what a shared database gives workers on many machines.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from chunking.sources import SourceItem
from index.document_leases import ProcessIdentity

# A manifest left by a parent that crashed is dropped by the next sharded run once this old.
ORPHAN_SECONDS = 24 * 3600.0
_INSERT_ROWS = 500  # manifest rows per INSERT

_SCHEMA = """
CREATE TABLE IF NOT EXISTS shard_items (
    run_key TEXT NOT NULL,
    shard INTEGER NOT NULL,
    position INTEGER NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (run_key, shard, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shard_runs (
    run_key TEXT NOT NULL,
    shard INTEGER NOT NULL,
    documents INTEGER NOT NULL,
    created_at REAL NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    flow_run TEXT,
    machine TEXT,
    pid INTEGER,
    pid_started TEXT,
    beats INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0,
    summary TEXT,
    PRIMARY KEY (run_key, shard)
);
"""


@dataclass(frozen=True)
class ShardRecord:
    """One shard of a sharded run as the parent sees it. `attempt` 0: no attempt has begun yet."""

    shard: int
    documents: int
    attempt: int
    flow_run: str | None
    process: ProcessIdentity | None
    beats: int
    done: int
    summary: str | None


class SupersededAttempt(RuntimeError):
    """A shard run whose attempt is no longer the current one (the parent retried it elsewhere)."""


class ShardRecords:
    """`<data_dir>/shards.sqlite3`. Cheap to construct; each call opens its own connection, so one instance
    serves a shard's flow and its heartbeat thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
        finally:
            conn.close()

    @classmethod
    def in_data_dir(cls, data_dir: str | Path) -> ShardRecords:
        return cls(Path(data_dir) / "shards.sqlite3")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
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

    # --- the parent ----------------------------------------------------------------------------------

    def write_manifest(self, run_key: str, parts: Sequence[Sequence[SourceItem]]) -> None:
        """Record which documents each shard processes (replacing any earlier manifest of `run_key`); also
        sweeps the manifests of parents that ended long ago without dropping theirs."""
        with self._transaction() as conn:
            self._delete(conn, run_key)
            stale = time.time() - ORPHAN_SECONDS
            for (old,) in conn.execute(
                "SELECT DISTINCT run_key FROM shard_runs WHERE created_at < ?", (stale,)
            ).fetchall():
                self._delete(conn, old)
            now = time.time()
            for shard, items in enumerate(parts):
                conn.execute(
                    "INSERT INTO shard_runs (run_key, shard, documents, created_at) VALUES (?, ?, ?, ?)",
                    (run_key, shard, len(items), now),
                )
                rows = [(run_key, shard, position, _dump(item)) for position, item in enumerate(items)]
                for start in range(0, len(rows), _INSERT_ROWS):
                    conn.executemany(
                        "INSERT INTO shard_items (run_key, shard, position, item) VALUES (?, ?, ?, ?)",
                        rows[start : start + _INSERT_ROWS],
                    )

    def records(self, run_key: str) -> dict[int, ShardRecord]:
        """Every shard of `run_key`, by number."""
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            rows = conn.execute(
                "SELECT shard, documents, attempt, flow_run, machine, pid, pid_started, beats, done, summary "
                "FROM shard_runs WHERE run_key = ? ORDER BY shard",
                (run_key,),
            ).fetchall()
        finally:
            conn.close()
        return {
            shard: ShardRecord(
                shard,
                documents,
                attempt,
                flow_run,
                ProcessIdentity(machine, pid, started) if machine is not None else None,
                beats,
                done,
                summary,
            )
            for shard, documents, attempt, flow_run, machine, pid, started, beats, done, summary in rows
        }

    def drop(self, run_key: str) -> None:
        """Forget `run_key`'s manifest and records (the parent is done with them)."""
        with self._transaction() as conn:
            self._delete(conn, run_key)

    # --- a shard run ---------------------------------------------------------------------------------

    def begin(self, run_key: str, shard: int, attempt: int, flow_run: str) -> list[SourceItem]:
        """Take the shard over for `attempt` (run by this process) and return its documents; raises
        `SupersededAttempt` if a later attempt has begun, and `LookupError` if the parent's manifest is
        gone (the parent ended)."""
        process = ProcessIdentity.current()
        with self._transaction() as conn:
            taken = conn.execute(
                "UPDATE shard_runs SET attempt = ?, flow_run = ?, machine = ?, pid = ?, pid_started = ?, "
                "beats = 0, done = 0, summary = NULL WHERE run_key = ? AND shard = ? AND attempt <= ?",
                (attempt, flow_run, process.machine, process.pid, process.started, run_key, shard, attempt),
            ).rowcount
            if not taken:
                known = conn.execute(
                    "SELECT attempt FROM shard_runs WHERE run_key = ? AND shard = ?", (run_key, shard)
                ).fetchone()
                if known is None:
                    raise LookupError(
                        f"no manifest for shard {shard} of run {run_key}: the parent run has ended"
                    )
                raise SupersededAttempt(
                    f"shard {shard} of run {run_key}: attempt {known[0]} has begun, this is attempt {attempt}"
                )
            rows = conn.execute(
                "SELECT item FROM shard_items WHERE run_key = ? AND shard = ? ORDER BY position",
                (run_key, shard),
            ).fetchall()
        return [_load(row[0]) for row in rows]

    def beat(self, run_key: str, shard: int, attempt: int, done: int) -> bool:
        """Say the attempt is alive, with `done` documents accounted for; False once it is superseded."""
        with self._transaction() as conn:
            return (
                conn.execute(
                    "UPDATE shard_runs SET beats = beats + 1, done = ? "
                    "WHERE run_key = ? AND shard = ? AND attempt = ?",
                    (done, run_key, shard, attempt),
                ).rowcount
                > 0
            )

    def finish(self, run_key: str, shard: int, attempt: int, summary: str) -> bool:
        """Store the attempt's summary (JSON); False if it was superseded (the summary is not stored)."""
        with self._transaction() as conn:
            return (
                conn.execute(
                    "UPDATE shard_runs SET summary = ?, beats = beats + 1 "
                    "WHERE run_key = ? AND shard = ? AND attempt = ?",
                    (summary, run_key, shard, attempt),
                ).rowcount
                > 0
            )

    @staticmethod
    def _delete(conn: sqlite3.Connection, run_key: str) -> None:
        conn.execute("DELETE FROM shard_items WHERE run_key = ?", (run_key,))
        conn.execute("DELETE FROM shard_runs WHERE run_key = ?", (run_key,))


def _dump(item: SourceItem) -> str:
    """An item as ASCII JSON: any file name travels, undecodable bytes (lone surrogates) included."""
    return json.dumps([item.source_system, item.source_id, item.path, item.size, item.mtime_ns])


def _load(text: str) -> SourceItem:
    source_system, source_id, path, size, mtime_ns = json.loads(text)
    return SourceItem(source_system, source_id, path, size, mtime_ns)
