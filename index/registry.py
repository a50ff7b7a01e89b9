"""The generation registry: the table of index generations and their states (plain storage, no policy).

Chunk IDs and vectors depend on the chunking settings, the embedder and the extractor; change any of them
and every stored chunk is stale although no document changed. So each such fingerprint gets its own
generation of stores (a Qdrant collection `<collection>__<id>`, a BM25 index and status table under
`generations/<id>/`, a graph `<graph>__<id>`), built beside the live one. This registry, one SQLite file
under the data dir, says which generation is live; switching is one transaction, so a reader that resolves
the registry once gets all three stores from the same generation. The Qdrant alias (`<collection>` ->
live collection) is kept in step for readers outside unichunk.

Which generation a reader or a run uses is decided in one place, `index.generations`; nothing else asks
this table for the live generation.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from chunking.errors import UnichunkError

# building -> (failed | ready) -> live -> retired -> dropped (row deleted); failed and ready can be resumed.
GenerationState = Literal["building", "failed", "ready", "live", "retired"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    generation_id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    live_since TEXT,
    retired_at TEXT,
    drop_after TEXT,
    listed INTEGER,
    last_error TEXT
);
"""
_COLUMNS = (
    "generation_id",
    "fingerprint",
    "state",
    "description",
    "created_at",
    "live_since",
    "retired_at",
    "drop_after",
    "listed",
    "last_error",
)


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


@dataclass(frozen=True)
class Generation:
    """One row of the registry. `listed` is the source size when its build began (progress denominator)."""

    generation_id: str
    fingerprint: str
    state: GenerationState
    description: dict[str, Any]
    created_at: str
    live_since: str | None = None
    retired_at: str | None = None
    drop_after: str | None = None
    listed: int | None = None
    last_error: str | None = None


class GenerationError(UnichunkError):
    """A generation operation that must not happen (switching to a missing one, rebuilding the live one)."""


class GenerationMismatch(GenerationError):
    """A run's settings are not the live generation's: only `rebuild` may write them."""


class GenerationRegistry:
    """`<data_dir>/generations.sqlite3`. Reads of a registry that does not exist yet create nothing."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def in_data_dir(cls, data_dir: str | Path) -> GenerationRegistry:
        return cls(Path(data_dir) / "generations.sqlite3")

    @contextmanager
    def _connect(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            if write:
                conn.executescript(_SCHEMA)
                conn.execute("BEGIN IMMEDIATE")  # one writer decides; concurrent bootstraps agree
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if conn.in_transaction:
                conn.execute("COMMIT")
        finally:
            conn.close()

    def _select(self, where: str = "", params: tuple[Any, ...] = ()) -> list[Generation]:
        if not self.path.exists():
            return []
        with self._connect(write=False) as conn:
            try:
                rows = conn.execute(
                    f"SELECT {', '.join(_COLUMNS)} FROM generations {where} ORDER BY created_at, generation_id",
                    params,
                ).fetchall()
            except sqlite3.OperationalError as exc:  # created but never written
                if "no such table" in str(exc):
                    return []
                raise
        return [_generation(row) for row in rows]

    def all(self) -> list[Generation]:
        return self._select()

    def get(self, generation_id: str) -> Generation | None:
        found = self._select("WHERE generation_id = ?", (generation_id,))
        return found[0] if found else None

    def live(self) -> Generation | None:
        found = self._select("WHERE state = 'live'")
        return found[0] if found else None

    def in_progress(self) -> list[Generation]:
        return self._select("WHERE state IN ('building', 'failed', 'ready')")

    def bootstrap(self, generation_id: str, fingerprint: str, description: dict[str, Any]) -> Generation:
        """The live generation, making `generation_id` live first if there is none (a first ingest)."""
        with self._connect(write=True) as conn:
            if conn.execute("SELECT 1 FROM generations WHERE state = 'live'").fetchone() is None:
                now = _stamp(_now())
                conn.execute(
                    "INSERT INTO generations (generation_id, fingerprint, state, description, created_at, "
                    "live_since) VALUES (?, ?, 'live', ?, ?, ?) ON CONFLICT (generation_id) DO UPDATE SET "
                    "state = 'live', live_since = excluded.live_since, retired_at = NULL, drop_after = NULL",
                    (generation_id, fingerprint, json.dumps(description), now, now),
                )
        live = self.live()
        assert live is not None
        return live

    def begin_build(
        self, generation_id: str, fingerprint: str, description: dict[str, Any], listed: int
    ) -> Generation:
        """Register (or resume) a generation being built; its stores may already hold a partial build."""
        with self._connect(write=True) as conn:
            row = conn.execute(
                "SELECT state FROM generations WHERE generation_id = ?", (generation_id,)
            ).fetchone()
            if row is not None and row[0] == "live":
                raise GenerationError(f"generation {generation_id} is already live")
            conn.execute(
                "INSERT INTO generations (generation_id, fingerprint, state, description, created_at, listed) "
                "VALUES (?, ?, 'building', ?, ?, ?) ON CONFLICT (generation_id) DO UPDATE SET "
                "state = 'building', listed = excluded.listed, last_error = NULL, retired_at = NULL, "
                "drop_after = NULL",
                (generation_id, fingerprint, json.dumps(description), _stamp(_now()), listed),
            )
        found = self.get(generation_id)
        assert found is not None
        return found

    def mark_failed(self, generation_id: str, error: str) -> None:
        """A build that must not go live as it is; its stores stay, so a re-run resumes."""
        with self._connect(write=True) as conn:
            conn.execute(
                "UPDATE generations SET state = 'failed', last_error = ? "
                "WHERE generation_id = ? AND state = 'building'",
                (error, generation_id),
            )

    def mark_ready(self, generation_id: str) -> None:
        """Built and verified but not switched to (a rebuild run with switch off)."""
        with self._connect(write=True) as conn:
            conn.execute(
                "UPDATE generations SET state = 'ready' WHERE generation_id = ? AND state = 'building'",
                (generation_id,),
            )

    def switch_live(self, generation_id: str, retention: timedelta) -> Generation | None:
        """Make `generation_id` live in one transaction; the previous live one is retired, kept for
        `retention`, and returned."""
        now = _now()
        with self._connect(write=True) as conn:
            row = conn.execute(
                "SELECT state FROM generations WHERE generation_id = ?", (generation_id,)
            ).fetchone()
            if row is None:
                raise GenerationError(f"no generation {generation_id}")
            if row[0] == "live":
                return None
            live_row = conn.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM generations WHERE state = 'live'"
            ).fetchone()
            previous = None if live_row is None else _generation(live_row)
            conn.execute(
                "UPDATE generations SET state = 'retired', retired_at = ?, drop_after = ? WHERE state = 'live'",
                (_stamp(now), _stamp(now + retention)),
            )
            conn.execute(
                "UPDATE generations SET state = 'live', live_since = ?, retired_at = NULL, drop_after = NULL, "
                "last_error = NULL WHERE generation_id = ?",
                (_stamp(now), generation_id),
            )
        return previous

    def expired(self, now: datetime | None = None) -> list[Generation]:
        """Retired generations whose retention has run out."""
        moment = _stamp(now or _now())
        return self._select("WHERE state = 'retired' AND drop_after <= ?", (moment,))

    def forget(self, generation_id: str) -> None:
        """Remove a dropped generation's row (never the live one)."""
        with self._connect(write=True) as conn:
            conn.execute(
                "DELETE FROM generations WHERE generation_id = ? AND state != 'live'", (generation_id,)
            )


def _generation(row: tuple[Any, ...]) -> Generation:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["description"] = json.loads(values["description"] or "{}")
    return Generation(**values)
