"""The sources a data dir has ingested, by name, so a re-index with no source named re-scans all of them.

Each successful listing of a directory or path source records how to list it again (its kind, root,
patterns or paths). The nightly `reindex` with no source then keeps every source in step, and nothing
else: a service started without `UNICHUNK_SOURCE_ROOT` scans no folder nobody asked for. One
SQLite file under the data dir, beside the generation registry (sources do not depend on the generation),
or the table `sources` of the `unichunk` schema in server mode (`unichunk.sinks.database`). Recording is one
atomic upsert; the name and root are BYTEA on PostgreSQL, patterns and paths JSON with every non-ASCII
character escaped, so any text round-trips.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, Literal

from sqlalchemy import text

from unichunk.chunking.access_labels import normalise_labels
from unichunk.chunking.label_rules import effective_labels, parse_rules
from unichunk.chunking.sources import SourceItem
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_database

# The embedded table, exactly as data dirs made before server mode have it.
_SQLITE_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS sources (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    root TEXT,
    patterns TEXT NOT NULL DEFAULT '[]',
    paths TEXT NOT NULL DEFAULT '[]',
    follow_symlinks INTEGER NOT NULL DEFAULT 0,
    first_seen TEXT NOT NULL,
    last_listed TEXT NOT NULL,
    labels TEXT,
    label_rules TEXT,
    document_labels TEXT
)"""
]
# Added since the first schema (NULL in an earlier row: none): the source's access labels and label rules,
# JSON arrays.
# `document_labels`: documents' own labels (a webhook's, an in-memory document's, `Pipeline.relabel`), a
# JSON object source_id -> labels, which recording a listing never replaces.
_ADDED_COLUMNS = {"labels": "TEXT", "label_rules": "TEXT", "document_labels": "TEXT"}
_POSTGRES_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS sources (
    name BYTEA PRIMARY KEY,
    kind TEXT NOT NULL,
    root BYTEA,
    patterns TEXT NOT NULL DEFAULT '[]',
    paths TEXT NOT NULL DEFAULT '[]',
    follow_symlinks INTEGER NOT NULL DEFAULT 0,
    first_seen TEXT NOT NULL,
    last_listed TEXT NOT NULL,
    labels TEXT,
    label_rules TEXT,
    document_labels TEXT
)"""
]


@dataclass(frozen=True)
class SourceRecord:
    """How to list one source again. `name` is the `source_system` of its documents."""

    name: str
    kind: Literal["directory", "paths"]
    root: str | None
    patterns: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    follow_symlinks: bool = False
    labels: tuple[str, ...] = ()  # access labels of every document (`unichunk.chunking.access_labels`)
    label_rules: tuple[str, ...] = ()  # `PATTERN=LABEL[,LABEL...]` (`unichunk.chunking.label_rules`)
    # source_id -> the document's own labels; kept by the registry, never replaced by recording a listing
    document_labels: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)
    first_seen: str = field(default="", compare=False)
    last_listed: str = field(default="", compare=False)

    def labels_for(self, source_id: str) -> tuple[str, ...]:
        """The labels a document of this source listed as `source_id` carries."""
        own = self.document_labels.get(source_id, ())
        return effective_labels(source_id, self.labels, parse_rules(self.label_rules), own)


class SourceRegistry:
    """The sources of a data dir (see the module docstring for where). Reading a registry that does not
    exist yet creates nothing."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self._path = settings.data_dir / "sources.sqlite3"
        self._reader = open_database(settings, self._path, readonly=True)

    @classmethod
    def of(cls, settings: SinkSettings) -> SourceRegistry:
        return cls(settings)

    def create(self) -> Database:
        """The registry's database with its table created (reads never create it)."""
        writer = open_database(self.settings, self._path)
        writer.ensure(_POSTGRES_SCHEMA if writer.dialect == "postgresql" else _SQLITE_SCHEMA)
        writer.add_missing_columns("sources", _ADDED_COLUMNS)
        return writer

    def record(self, source: SourceRecord) -> None:
        """Remember (or refresh) how to list `source`; the latest listing's settings win."""
        self.claim(source, lambda _recorded: None)

    def claim(self, source: SourceRecord, check: Callable[[list[SourceRecord]], None]) -> None:
        """Record `source` unless `check`, given every recorded source, raises: one write transaction under
        the registry's lock (`BEGIN IMMEDIATE` on SQLite, an advisory lock on PostgreSQL), so two runs
        registering overlapping sources at once never both pass the check (`overlapping`)."""
        writer = self.create()
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with writer.write(lock="sources") as conn:
            check(_records(conn.execute(text(_select())).all()))
            conn.execute(
                text(_UPSERT),
                {
                    "name": writer.pack(source.name),
                    "kind": source.kind,
                    "root": writer.pack(source.root),
                    "patterns": json.dumps(list(source.patterns)),
                    "paths": json.dumps(list(source.paths)),
                    "follow": int(source.follow_symlinks),
                    "labels": json.dumps(list(source.labels)),
                    "rules": json.dumps(list(source.label_rules)),
                    "now": now,
                },
            )

    def forget(self, name: str) -> bool:
        """Stop re-scanning the source `name` (its documents are the caller's to delete first); whether
        it was recorded."""
        if name not in {record.name for record in self.all()}:
            return False
        writer = self.create()
        with writer.write(lock="sources") as conn:
            conn.execute(text("DELETE FROM sources WHERE name = :name"), {"name": writer.pack(name)})
        return True

    def set_document_labels(self, name: str, labels: Mapping[str, Sequence[str]]) -> bool:
        """Give documents of source `name` their own access labels (`labels`: source_id -> labels,
        normalised; none: drop them), kept beside the source so every later listing gives them too;
        False when the source is not recorded (then nothing is kept)."""
        wanted = {source_id: normalise_labels(found) for source_id, found in labels.items()}
        writer = self.create()
        with writer.write(lock="sources") as conn:
            record = next((r for r in _records(conn.execute(text(_select())).all()) if r.name == name), None)
            if record is None:
                return False
            kept = {**record.document_labels, **wanted}
            conn.execute(
                text("UPDATE sources SET document_labels = :kept WHERE name = :name"),
                {"kept": json.dumps({s: list(v) for s, v in kept.items() if v}), "name": writer.pack(name)},
            )
        return True

    def label_items(self, items: Sequence[SourceItem]) -> list[SourceItem]:
        """`items` (listed outside their source's scan: a webhook's file) with the labels their recorded
        source gives them, its labels and matching rules, as its scan would."""
        records = {record.name: record for record in self.all()}
        labelled = []
        for item in items:
            record = records.get(item.source_system)
            labels = () if record is None else record.labels_for(item.source_id)
            labelled.append(replace(item, labels=labels))
        return labelled

    def all(self) -> list[SourceRecord]:
        try:
            missing = frozenset(_ADDED_COLUMNS) - self._reader.columns("sources")
            with self._reader.read() as conn:
                rows = conn.execute(text(_select(missing))).all()
        except Exception as exc:
            if self._reader.missing(exc):
                return []
            raise
        return _records(rows)


def _select(missing: frozenset[str] = frozenset()) -> str:
    """The rows' query; the added columns a table made before lacks read as NULL."""
    added = ", ".join(f"NULL AS {name}" if name in missing else name for name in _ADDED_COLUMNS)
    return (
        f"SELECT name, kind, root, patterns, paths, follow_symlinks, first_seen, last_listed, {added} "
        "FROM sources ORDER BY name"
    )


_UPSERT = (
    "INSERT INTO sources (name, kind, root, patterns, paths, follow_symlinks, first_seen, "
    "last_listed, labels, label_rules) VALUES (:name, :kind, :root, :patterns, :paths, :follow, :now, :now, "
    ":labels, :rules) "
    "ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, root = excluded.root, "
    "patterns = excluded.patterns, paths = excluded.paths, "
    "follow_symlinks = excluded.follow_symlinks, last_listed = excluded.last_listed, "
    "labels = excluded.labels, label_rules = excluded.label_rules"
)


def _records(rows: Sequence[Any]) -> list[SourceRecord]:
    return [
        SourceRecord(
            str(Database.unpack(name)),
            kind,
            Database.unpack(root),
            tuple(json.loads(patterns)),
            tuple(json.loads(paths)),
            bool(follow),
            tuple(json.loads(labels or "[]")),
            tuple(json.loads(rules or "[]")),
            {source_id: tuple(found) for source_id, found in json.loads(own or "{}").items()},
            first,
            last,
        )
        for name, kind, root, patterns, paths, follow, first, last, labels, rules, own in rows
    ]


def covered_files(record: SourceRecord) -> tuple[list[PurePath], list[PurePath]]:
    """What a record reaches: (folders whose every file it may list, single files)."""
    if record.kind == "directory":
        return ([PurePath(record.root)] if record.root else []), []
    return [], [PurePath(p) for p in record.paths]


def overlapping(source: SourceRecord, recorded: Sequence[SourceRecord]) -> SourceRecord | None:
    """A recorded source under another name that reaches a file `source` reaches too (a folder inside the
    other's, the same folder, a file of the other's), or None. Two names over one file would give it two
    document IDs, so it would be stored twice."""
    folders, files = covered_files(source)
    for other in recorded:
        if other.name == source.name:
            continue
        other_folders, other_files = covered_files(other)
        if (
            any(a.is_relative_to(b) or b.is_relative_to(a) for a in folders for b in other_folders)
            or any(f.is_relative_to(d) for f in files for d in other_folders)
            or any(f.is_relative_to(d) for f in other_files for d in folders)
            or set(files) & set(other_files)
        ):
            return other
    return None
