"""What a sharded run's parent and its shard runs tell each other, through the pipeline's records.

The manifest (each shard's documents), the shards' beats and their summaries travel here, never through
Prefect: a listing as flow parameters would be stored and shown by Prefect's UI, a re-listing per shard would
disagree with the parent's (which decides deletions), a dead worker leaves its runs Running for ever, and
Prefect's result storage is per machine. Attempts are fenced: a run the parent retried cannot overwrite its
successor's summary. docs/design.md ("Shard records") and docs/operations.md ("One run split across workers")
say how.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text

from unichunk.chunking.errors import UnichunkError
from unichunk.chunking.sources import SourceItem
from unichunk.index.process_identity import ProcessIdentity
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_database

# A manifest left by a parent that crashed is dropped by the next sharded run once this old.
ORPHAN_SECONDS = 24 * 3600.0
_INSERT_ROWS = 1000  # manifest rows per executemany


def _schema(database: Database) -> list[str]:
    real = "DOUBLE PRECISION" if database.dialect == "postgresql" else "REAL"
    return [
        "CREATE TABLE IF NOT EXISTS shard_items (run_key TEXT NOT NULL, shard INTEGER NOT NULL, "
        "position INTEGER NOT NULL, item TEXT NOT NULL, PRIMARY KEY (run_key, shard, position))",
        f"CREATE TABLE IF NOT EXISTS shard_runs (run_key TEXT NOT NULL, shard INTEGER NOT NULL, "
        f"documents INTEGER NOT NULL, created_at {real} NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, "
        "flow_run TEXT, machine TEXT, pid INTEGER, pid_started TEXT, beats INTEGER NOT NULL DEFAULT 0, "
        "done INTEGER NOT NULL DEFAULT 0, summary TEXT, PRIMARY KEY (run_key, shard))",
    ]


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


class SupersededAttempt(UnichunkError, RuntimeError):
    """A shard run whose attempt is no longer the current one (the parent retried it elsewhere)."""


class ShardRecords:
    """A sharded run's manifest and its shards' records (`unichunk.sinks.database`: a SQLite file or the server's
    schema). Cheap to construct; safe to use from several threads (a shard's flow and its heartbeat)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        database.ensure(_schema(database))

    @classmethod
    def of(cls, settings: SinkSettings) -> ShardRecords:
        return cls(open_database(settings, settings.data_dir / "shards.sqlite3"))

    # --- the parent ----------------------------------------------------------------------------------

    def write_manifest(self, run_key: str, parts: Sequence[Sequence[SourceItem]]) -> None:
        """Record which documents each shard processes (replacing any earlier manifest of `run_key`); also
        sweeps the manifests of parents that ended long ago without dropping theirs."""
        now = time.time()
        with self.database.write() as conn:
            self._delete(conn, run_key)
            stale = conn.execute(
                text("SELECT DISTINCT run_key FROM shard_runs WHERE created_at < :stale"),
                {"stale": now - ORPHAN_SECONDS},
            ).fetchall()
            for (old,) in stale:
                self._delete(conn, old)
            for shard, items in enumerate(parts):
                conn.execute(
                    text(
                        "INSERT INTO shard_runs (run_key, shard, documents, created_at) "
                        "VALUES (:key, :shard, :documents, :now)"
                    ),
                    {"key": run_key, "shard": shard, "documents": len(items), "now": now},
                )
                rows = [
                    {"key": run_key, "shard": shard, "position": position, "item": _dump(item)}
                    for position, item in enumerate(items)
                ]
                for start in range(0, len(rows), _INSERT_ROWS):
                    conn.execute(
                        text(
                            "INSERT INTO shard_items (run_key, shard, position, item) "
                            "VALUES (:key, :shard, :position, :item)"
                        ),
                        rows[start : start + _INSERT_ROWS],
                    )

    def records(self, run_key: str) -> dict[int, ShardRecord]:
        """Every shard of `run_key`, by number."""
        with self.database.read() as conn:
            rows = conn.execute(
                text(
                    "SELECT shard, documents, attempt, flow_run, machine, pid, pid_started, beats, done, "
                    "summary FROM shard_runs WHERE run_key = :key ORDER BY shard"
                ),
                {"key": run_key},
            ).fetchall()
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

    def run_keys(self) -> list[str]:
        """The parents whose records are here (a parent drops its own when it ends)."""
        with self.database.read() as conn:
            return [row[0] for row in conn.execute(text("SELECT DISTINCT run_key FROM shard_runs"))]

    def drop(self, run_key: str) -> None:
        """Forget `run_key`'s manifest and records (the parent is done with them)."""
        with self.database.write() as conn:
            self._delete(conn, run_key)

    # --- a shard run ---------------------------------------------------------------------------------

    def begin(self, run_key: str, shard: int, attempt: int, flow_run: str) -> list[SourceItem]:
        """Take the shard over for `attempt` (run by this process) and return its documents; raises
        `SupersededAttempt` if a later attempt has begun, and `LookupError` if the parent's manifest is
        gone (the parent ended)."""
        process = ProcessIdentity.current()
        key = {"key": run_key, "shard": shard}
        with self.database.write() as conn:
            taken = conn.execute(
                text(
                    "UPDATE shard_runs SET attempt = :attempt, flow_run = :flow_run, machine = :machine, "
                    "pid = :pid, pid_started = :started, beats = 0, done = 0, summary = NULL "
                    "WHERE run_key = :key AND shard = :shard AND attempt <= :attempt"
                ),
                {
                    **key,
                    "attempt": attempt,
                    "flow_run": flow_run,
                    "machine": process.machine,
                    "pid": process.pid,
                    "started": process.started,
                },
            ).rowcount
            if not taken:
                known = conn.execute(
                    text("SELECT attempt FROM shard_runs WHERE run_key = :key AND shard = :shard"), key
                ).scalar()
                if known is None:
                    raise LookupError(
                        f"no manifest for shard {shard} of run {run_key}: the parent run has ended"
                    )
                raise SupersededAttempt(
                    f"shard {shard} of run {run_key}: attempt {known} has begun, this is attempt {attempt}"
                )
            rows = conn.execute(
                text(
                    "SELECT item FROM shard_items WHERE run_key = :key AND shard = :shard ORDER BY position"
                ),
                key,
            ).fetchall()
        return [_load(row[0]) for row in rows]

    def beat(self, run_key: str, shard: int, attempt: int, done: int) -> bool:
        """Say the attempt is alive, with `done` documents accounted for; False once it is superseded."""
        return self._update("beats = beats + 1, done = :done", run_key, shard, attempt, {"done": done})

    def finish(self, run_key: str, shard: int, attempt: int, summary: str) -> bool:
        """Store the attempt's summary (JSON); False if it was superseded (the summary is not stored)."""
        return self._update(
            "summary = :summary, beats = beats + 1", run_key, shard, attempt, {"summary": summary}
        )

    def _update(self, assignments: str, run_key: str, shard: int, attempt: int, values: dict) -> bool:
        """Update the shard's row if `attempt` is still the current one."""
        with self.database.write() as conn:
            updated = conn.execute(
                text(
                    f"UPDATE shard_runs SET {assignments} "
                    "WHERE run_key = :key AND shard = :shard AND attempt = :attempt"
                ),
                {"key": run_key, "shard": shard, "attempt": attempt, **values},
            ).rowcount
        return updated > 0

    @staticmethod
    def _delete(conn: Connection, run_key: str) -> None:
        conn.execute(text("DELETE FROM shard_items WHERE run_key = :key"), {"key": run_key})
        conn.execute(text("DELETE FROM shard_runs WHERE run_key = :key"), {"key": run_key})


def _dump(item: SourceItem) -> str:
    """An item as ASCII JSON: any file name travels, undecodable bytes (lone surrogates) included."""
    return json.dumps([item.source_system, item.source_id, item.path, item.size, item.mtime_ns, item.labels])


def _load(text: str) -> SourceItem:
    source_system, source_id, path, size, mtime_ns, *labels = json.loads(text)  # labels: since issue 26
    return SourceItem(source_system, source_id, path, size, mtime_ns, tuple(labels[0]) if labels else ())
