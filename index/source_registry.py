"""The sources a data dir has ingested, by name, so a re-index with no source named re-scans all of them.

Each successful listing of a directory or path source records how to list it again (its kind, root,
patterns or paths). The nightly `reindex` with no source then keeps every source in step, and nothing
else: a service started without `UNICHUNK_SOURCE_ROOT` no longer scans a folder nobody asked for. One
SQLite file under the data dir, beside the generation registry (sources do not depend on the generation).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sources (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    root TEXT,
    patterns TEXT NOT NULL DEFAULT '[]',
    paths TEXT NOT NULL DEFAULT '[]',
    follow_symlinks INTEGER NOT NULL DEFAULT 0,
    first_seen TEXT NOT NULL,
    last_listed TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class SourceRecord:
    """How to list one source again. `name` is the `source_system` of its documents."""

    name: str
    kind: Literal["directory", "paths"]
    root: str | None
    patterns: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    follow_symlinks: bool = False
    first_seen: str = field(default="", compare=False)
    last_listed: str = field(default="", compare=False)


class SourceRegistry:
    """`<data_dir>/sources.sqlite3`. Reading a registry that does not exist yet creates nothing."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def in_data_dir(cls, data_dir: str | Path) -> SourceRegistry:
        return cls(Path(data_dir) / "sources.sqlite3")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.executescript(_SCHEMA)
            with conn:
                yield conn
        finally:
            conn.close()

    def record(self, source: SourceRecord) -> None:
        """Remember (or refresh) how to list `source`; the latest listing's settings win."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO sources (name, kind, root, patterns, paths, follow_symlinks, first_seen, last_listed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, "
                "root = excluded.root, patterns = excluded.patterns, paths = excluded.paths, "
                "follow_symlinks = excluded.follow_symlinks, last_listed = excluded.last_listed",
                (
                    source.name,
                    source.kind,
                    source.root,
                    json.dumps(list(source.patterns)),
                    json.dumps(list(source.paths)),
                    int(source.follow_symlinks),
                    now,
                    now,
                ),
            )

    def all(self) -> list[SourceRecord]:
        if not self.path.exists():
            return []
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT name, kind, root, patterns, paths, follow_symlinks, first_seen, last_listed "
                "FROM sources ORDER BY name"
            ).fetchall()
        return [
            SourceRecord(
                name,
                kind,
                root,
                tuple(json.loads(patterns)),
                tuple(json.loads(paths)),
                bool(follow),
                first,
                last,
            )
            for name, kind, root, patterns, paths, follow, first, last in rows
        ]
