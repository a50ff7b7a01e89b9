"""The generation registry: the table of index generations and their states (plain storage, no policy).

Chunk IDs and vectors depend on the chunking settings, the embedder and the extractor; change any of them
and every stored chunk is stale although no document changed. So each such fingerprint gets its own
generation of stores (a Qdrant collection `<collection>__<id>`, a BM25 index and status table under
`generations/<id>/` or the generation's PostgreSQL schema, a graph `<graph>__<id>`), built beside the live
one. This registry (one SQLite file under the data dir, or a table of the server-mode database) says which
generation is live; switching is one transaction, so a reader that resolves
the registry once gets all three stores from the same generation. The Qdrant alias (`<collection>` ->
live collection) is kept in step for readers outside unichunk.

Which generation a reader or a run uses is decided in one place, `unichunk.index.generations`; nothing else asks
this table for the live generation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, text

from unichunk.index.errors import GenerationError
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_database

# building -> (failed | ready) -> live -> retired -> dropped (row deleted); failed and ready can be resumed.
GenerationState = Literal["building", "failed", "ready", "live", "retired"]

# The embedded table, exactly as data dirs made before server mode have it.
_SQLITE_SCHEMA = [
    """
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
)"""
]
# The same on PostgreSQL, where the database itself also refuses a second live generation. `description`
# is JSON with every non-ASCII character escaped (`json.dumps`), so TEXT holds it; an error is BYTEA.
_POSTGRES_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS generations (
    generation_id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    live_since TEXT,
    retired_at TEXT,
    drop_after TEXT,
    listed BIGINT,
    last_error BYTEA
)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS generations_one_live ON generations (state) WHERE state = 'live'",
]
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
# Every registry write takes this lock on PostgreSQL (SQLite's BEGIN IMMEDIATE does the same): a bootstrap
# and a switch read the table, then write it, and two of them at once must not both decide.
_LOCK = "generations"


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


class GenerationRegistry:
    """The data dir's registry: `<data_dir>/generations.sqlite3`, or the table `generations` of the
    `unichunk` schema in server mode. Reads of a registry that does not exist yet create nothing.

    Every write is one transaction holding the registry's lock (`_LOCK`), so concurrent bootstraps agree
    on one live generation and a switch is atomic: a reader sees the old live generation or the new one,
    never none or two (on PostgreSQL a unique index on the live state enforces it besides)."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self._path = settings.data_dir / "generations.sqlite3"
        self._reader = open_database(settings, self._path, readonly=True)

    @classmethod
    def of(cls, settings: SinkSettings) -> GenerationRegistry:
        return cls(settings)

    def create(self) -> Database:
        """The registry's database with its table created (the only place that may create the file or the
        table: reads never do)."""
        writer = open_database(self.settings, self._path)
        writer.ensure(_POSTGRES_SCHEMA if writer.dialect == "postgresql" else _SQLITE_SCHEMA)
        return writer

    def _write(self) -> Any:
        """A locked write transaction on the registry, its table created first."""
        return self.create().write(lock=_LOCK)

    def _select(self, where: str = "", params: dict[str, Any] | None = None) -> list[Generation]:
        statement = text(
            f"SELECT {', '.join(_COLUMNS)} FROM generations {where} ORDER BY created_at, generation_id"
        )
        try:
            with self._reader.read() as conn:
                rows = conn.execute(statement, params or {}).all()
        except Exception as exc:
            if self._reader.missing(exc):  # no registry yet: nothing was ever ingested
                return []
            raise
        return [_generation(row) for row in rows]

    def all(self) -> list[Generation]:
        return self._select()

    def get(self, generation_id: str) -> Generation | None:
        found = self._select("WHERE generation_id = :g", {"g": generation_id})
        return found[0] if found else None

    def live(self) -> Generation | None:
        found = self._select("WHERE state = 'live'")
        return found[0] if found else None

    def in_progress(self) -> list[Generation]:
        return self._select("WHERE state IN ('building', 'failed', 'ready')")

    def bootstrap(self, generation_id: str, fingerprint: str, description: dict[str, Any]) -> Generation:
        """The live generation, making `generation_id` live first if there is none (a first ingest)."""
        with self._write() as conn:
            if conn.execute(text("SELECT 1 FROM generations WHERE state = 'live'")).first() is None:
                now = _stamp(_now())
                conn.execute(
                    text(
                        "INSERT INTO generations (generation_id, fingerprint, state, description, created_at, "
                        "live_since) VALUES (:g, :f, 'live', :d, :now, :now) ON CONFLICT (generation_id) DO "
                        "UPDATE SET state = 'live', live_since = excluded.live_since, retired_at = NULL, "
                        "drop_after = NULL"
                    ),
                    {"g": generation_id, "f": fingerprint, "d": json.dumps(description), "now": now},
                )
        live = self.live()
        assert live is not None
        return live

    def begin_build(
        self, generation_id: str, fingerprint: str, description: dict[str, Any], listed: int
    ) -> Generation:
        """Register (or resume) a generation being built; its stores may already hold a partial build."""
        with self._write() as conn:
            if _state(conn, generation_id) == "live":
                raise GenerationError(f"generation {generation_id} is already live")
            conn.execute(
                text(
                    "INSERT INTO generations (generation_id, fingerprint, state, description, created_at, listed) "
                    "VALUES (:g, :f, 'building', :d, :now, :listed) ON CONFLICT (generation_id) DO UPDATE SET "
                    "state = 'building', listed = excluded.listed, last_error = NULL, retired_at = NULL, "
                    "drop_after = NULL"
                ),
                {
                    "g": generation_id,
                    "f": fingerprint,
                    "d": json.dumps(description),
                    "now": _stamp(_now()),
                    "listed": listed,
                },
            )
        found = self.get(generation_id)
        assert found is not None
        return found

    def mark_failed(self, generation_id: str, error: str) -> None:
        """A build that must not go live as it is; its stores stay, so a re-run resumes."""
        with self._write() as conn:
            conn.execute(
                text(
                    "UPDATE generations SET state = 'failed', last_error = :error "
                    "WHERE generation_id = :g AND state = 'building'"
                ),
                {"error": self._reader.pack(error), "g": generation_id},
            )

    def mark_ready(self, generation_id: str) -> None:
        """Built and verified but not switched to (a rebuild run with switch off)."""
        with self._write() as conn:
            conn.execute(
                text(
                    "UPDATE generations SET state = 'ready' WHERE generation_id = :g AND state = 'building'"
                ),
                {"g": generation_id},
            )

    def switch_live(self, generation_id: str, retention: timedelta) -> Generation | None:
        """Make `generation_id` live in one transaction; the previous live one is retired, kept for
        `retention`, and returned."""
        now = _now()
        with self._write() as conn:
            state = _state(conn, generation_id)
            if state is None:
                raise GenerationError(f"no generation {generation_id}")
            if state == "live":
                return None
            live_row = conn.execute(
                text(f"SELECT {', '.join(_COLUMNS)} FROM generations WHERE state = 'live'")
            ).first()
            previous = None if live_row is None else _generation(live_row)
            conn.execute(
                text(
                    "UPDATE generations SET state = 'retired', retired_at = :now, drop_after = :drop "
                    "WHERE state = 'live'"
                ),
                {"now": _stamp(now), "drop": _stamp(now + retention)},
            )
            conn.execute(
                text(
                    "UPDATE generations SET state = 'live', live_since = :now, retired_at = NULL, "
                    "drop_after = NULL, last_error = NULL WHERE generation_id = :g"
                ),
                {"now": _stamp(now), "g": generation_id},
            )
        return previous

    def expired(self, now: datetime | None = None) -> list[Generation]:
        """Retired generations whose retention has run out."""
        moment = _stamp(now or _now())
        return self._select("WHERE state = 'retired' AND drop_after <= :moment", {"moment": moment})

    def forget(self, generation_id: str) -> None:
        """Remove a dropped generation's row (never the live one)."""
        with self._write() as conn:
            conn.execute(
                text("DELETE FROM generations WHERE generation_id = :g AND state != 'live'"),
                {"g": generation_id},
            )


def _state(conn: Connection, generation_id: str) -> str | None:
    return conn.execute(
        text("SELECT state FROM generations WHERE generation_id = :g"), {"g": generation_id}
    ).scalar()


def _generation(row: Any) -> Generation:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["description"] = json.loads(values["description"] or "{}")
    values["last_error"] = Database.unpack(values["last_error"])
    return Generation(**values)
