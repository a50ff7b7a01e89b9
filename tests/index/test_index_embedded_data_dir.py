"""A data dir made before server mode opens unchanged: its SQLite files, created here with the raw DDL and
rows the earlier code wrote (copied from it, not imported), are read and written by today's stores, and the
files keep their schemas, so the earlier code could still read them. The changes allowed: the status
and the source registry's tables gain nullable columns without a default (`_ADDED_COLUMNS` of
`unichunk.index.status` and `unichunk.index.source_registry`), last, which the
earlier code's statements, naming their columns, never see."""

from __future__ import annotations

import json
import sqlite3
import zlib
from datetime import timedelta
from pathlib import Path

from pydantic import TypeAdapter

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.index.chunk_cache import ChunkCache, ChunkKey
from unichunk.index.document_leases import DocumentLeases
from unichunk.index.registry import GenerationRegistry
from unichunk.index.source_registry import _ADDED_COLUMNS as SOURCE_COLUMNS
from unichunk.index.source_registry import SourceRecord, SourceRegistry
from unichunk.index.status import _ADDED_COLUMNS as STATUS_COLUMNS
from unichunk.index.status import StatusStore
from unichunk.replay_cache import ReplayCache
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import open_database

# The DDL of each file as the code before `unichunk.sinks.database` created it.
EARLIER = {
    "generations/g1/status.sqlite3": """
CREATE TABLE IF NOT EXISTS documents (
    document_id TEXT PRIMARY KEY, source_system TEXT, source_id TEXT, path TEXT, state TEXT NOT NULL,
    error TEXT, chunk_count INTEGER NOT NULL DEFAULT 0, chunk_ids TEXT NOT NULL DEFAULT '[]',
    content_hash TEXT, fingerprint TEXT, chunk_fingerprint TEXT, strategy TEXT, size INTEGER,
    mtime_ns INTEGER, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_success_at TEXT
);
CREATE INDEX IF NOT EXISTS documents_source ON documents (source_system, source_id);
CREATE INDEX IF NOT EXISTS documents_state ON documents (state);
""",
    "chunks.sqlite3": """
CREATE TABLE IF NOT EXISTS documents (
    document_id TEXT NOT NULL, content_hash TEXT NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (document_id, content_hash)
);
CREATE TABLE IF NOT EXISTS chunks (
    document_id TEXT NOT NULL, content_hash TEXT NOT NULL, fingerprint TEXT NOT NULL,
    chunk_count INTEGER NOT NULL, body BLOB NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (document_id, content_hash, fingerprint)
);
""",
    "generations.sqlite3": """
CREATE TABLE IF NOT EXISTS generations (
    generation_id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, state TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '{}', created_at TEXT NOT NULL, live_since TEXT, retired_at TEXT,
    drop_after TEXT, listed INTEGER, last_error TEXT
);
""",
    "leases.sqlite3": """
CREATE TABLE IF NOT EXISTS holders (
    holder TEXT PRIMARY KEY, label TEXT NOT NULL, machine TEXT NOT NULL, pid INTEGER NOT NULL,
    pid_started TEXT NOT NULL, expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    generation TEXT NOT NULL, document_id TEXT NOT NULL, holder TEXT NOT NULL,
    PRIMARY KEY (generation, document_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS leases_by_holder ON leases (holder);
""",
    "sources.sqlite3": """
CREATE TABLE IF NOT EXISTS sources (
    name TEXT PRIMARY KEY, kind TEXT NOT NULL, root TEXT, patterns TEXT NOT NULL DEFAULT '[]',
    paths TEXT NOT NULL DEFAULT '[]', follow_symlinks INTEGER NOT NULL DEFAULT 0, first_seen TEXT NOT NULL,
    last_listed TEXT NOT NULL
);
""",
    "webhook/replay.db": "CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, expires REAL NOT NULL);",
}


def _earlier_data_dir(data_dir: Path, document: Document, chunk_json: bytes) -> None:
    """The files and rows as the earlier code left them after one ingest (one document, one generation)."""
    for name, ddl in EARLIER.items():
        path = data_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as conn:
            conn.executescript(ddl)
    stamp = "2025-01-01T00:00:00.000+00:00"
    with sqlite3.connect(data_dir / "generations/g1/status.sqlite3") as conn:
        conn.execute(
            "INSERT INTO documents (document_id, source_system, source_id, path, state, chunk_count, chunk_ids, "
            "content_hash, fingerprint, chunk_fingerprint, size, mtime_ns, created_at, updated_at, "
            "last_success_at) VALUES (?, 'docs', 'a.md', '/srv/docs/a.md', 'processed', 1, ?, ?, 'run-f', "
            "'fp', 11, 1700000000000000000, ?, ?, ?)",
            (document.document_id, json.dumps(["c1"]), document.content_hash, stamp, stamp, stamp),
        )
    with sqlite3.connect(data_dir / "chunks.sqlite3") as conn:
        conn.execute(
            "INSERT INTO documents VALUES (?, ?, ?)",
            (document.document_id, document.content_hash, zlib.compress(document.model_dump_json().encode())),
        )
        conn.execute(
            "INSERT INTO chunks VALUES (?, ?, 'fp', 1, ?, ?)",
            (document.document_id, document.content_hash, zlib.compress(chunk_json), stamp),
        )
    with sqlite3.connect(data_dir / "generations.sqlite3") as conn:
        conn.execute(
            "INSERT INTO generations (generation_id, fingerprint, state, description, created_at, live_since) "
            "VALUES ('g1', 'gen-f', 'live', ?, ?, ?)",
            (json.dumps({"chunking": {"name": "token_window"}}), stamp, stamp),
        )
    with sqlite3.connect(data_dir / "sources.sqlite3") as conn:
        conn.execute(
            "INSERT INTO sources VALUES ('docs', 'directory', '/srv/docs', ?, '[]', 0, ?, ?)",
            (json.dumps(["**/*.md"]), stamp, stamp),
        )
    with sqlite3.connect(data_dir / "leases.sqlite3") as conn:
        conn.execute("INSERT INTO holders VALUES ('old-run', 'flow run old', 'another-host', 1, '', 9e18)")
        conn.execute("INSERT INTO leases VALUES ('g1', 'doc_b', 'old-run')")
    with sqlite3.connect(data_dir / "webhook/replay.db") as conn:
        conn.execute("INSERT INTO seen VALUES ('dlv:abc', 9e18)")


def _schemas(data_dir: Path) -> dict[str, list[tuple[str, str]]]:
    found = {}
    for name in EARLIER:
        with sqlite3.connect(data_dir / name) as conn:
            found[name] = sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
    return found


def test_a_data_dir_made_before_server_mode_is_read_and_written_unchanged(tmp_path, monkeypatch):
    monkeypatch.delenv("UNICHUNK_DATABASE_URL", raising=False)
    data_dir = tmp_path / "data"
    document = Document(text="alpha beta", source_system="docs", source_id="a.md")
    chunks = chunks_from_spans(document, [Span(0, 10, 1, ())])
    _earlier_data_dir(data_dir, document, TypeAdapter(list[Chunk]).dump_json(chunks))
    before = _schemas(data_dir)
    grown_before = {name: _shape(data_dir / name) for name in GROWN}
    settings = SinkSettings(data_dir=data_dir)

    # Read through today's stores.
    registry = GenerationRegistry.of(settings)
    live = registry.live()
    assert (
        live is not None
        and live.generation_id == "g1"
        and live.description["chunking"]["name"] == "token_window"
    )
    status = StatusStore.of(settings.for_generation("g1"), readonly=True)
    row = status.get(document.document_id)
    assert row is not None and (row.state, row.chunk_ids, row.path, row.mtime_ns) == (
        "processed",
        ["c1"],
        "/srv/docs/a.md",
        1700000000000000000,
    )
    cache = ChunkCache.of(settings)
    assert cache.load(ChunkKey(document.document_id, document.content_hash, "fp")) == (document, chunks)
    assert SourceRegistry.of(settings).all() == [SourceRecord("docs", "directory", "/srv/docs", ("**/*.md",))]
    leases = DocumentLeases.of(settings)
    assert leases.held_by_others("me", "g1", ["doc_b"]) == {"doc_b": "flow run old"}
    replay = ReplayCache(open_database(settings, data_dir / "webhook" / "replay.db"))
    assert not replay.reserve({"dlv:abc": 10.0, "sig:new": 10.0}, now=1.0)  # known: refused

    # Write through them.
    StatusStore.of(settings.for_generation("g1")).mark_failed(document.document_id, "boom")
    registry.begin_build("g2", "gen-f2", {}, 1)
    registry.switch_live("g2", timedelta(hours=1))
    assert leases.acquire("me", "g1", ["doc_c"], 60) == {"doc_c"}
    SourceRegistry.of(settings).record(SourceRecord("more", "paths", None, paths=("/x",)))
    assert replay.reserve({"sig:new": 10.0}, now=1.0)

    # The files keep the schemas they had (the earlier code reads them as before), and hold the writes.
    assert {n: s for n, s in _schemas(data_dir).items() if n not in GROWN} == {
        n: s for n, s in before.items() if n not in GROWN
    }
    for name, shape_before in grown_before.items():  # only the added columns, which earlier code never names
        assert _earlier_columns_of(name, _shape(data_dir / name)) == shape_before, name
    with sqlite3.connect(data_dir / "generations/g1/status.sqlite3") as conn:
        assert conn.execute("SELECT state, error, chunk_ids FROM documents").fetchall() == [
            ("failed", "boom", '["c1"]')
        ]
    with sqlite3.connect(data_dir / "generations.sqlite3") as conn:
        assert dict(conn.execute("SELECT generation_id, state FROM generations")) == {
            "g1": "retired",
            "g2": "live",
        }
    with sqlite3.connect(data_dir / "leases.sqlite3") as conn:
        assert sorted(conn.execute("SELECT document_id, holder FROM leases")) == [
            ("doc_b", "old-run"),
            ("doc_c", "me"),
        ]
    with sqlite3.connect(data_dir / "sources.sqlite3") as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sources ORDER BY name")] == ["docs", "more"]
    with sqlite3.connect(data_dir / "webhook/replay.db") as conn:
        assert sorted(r[0] for r in conn.execute("SELECT key FROM seen")) == ["dlv:abc", "sig:new"]
    assert not any(data_dir.rglob("*.sqlite3-journal"))  # no leftovers of a half-done transaction


def _shape(path: Path) -> dict[str, object]:
    """Each table's columns (name, type, not null, default, key) and indexes, as SQLite reports them."""
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            table: (
                conn.execute(f"PRAGMA table_info({table})").fetchall(),
                sorted(conn.execute(f"PRAGMA index_list({table})").fetchall()),
            )
            for table in tables
        }


STATUS = "generations/g1/status.sqlite3"


SOURCES = "sources.sqlite3"
# The files whose table gained columns since: file -> (table, the columns added, in order).
GROWN = {STATUS: ("documents", STATUS_COLUMNS), SOURCES: ("sources", SOURCE_COLUMNS)}


def _earlier_columns_of(name: str, shape: dict[str, object]) -> dict[str, object]:
    """A file's shape without the columns added since (`GROWN`), after checking those are what the earlier
    code cannot trip on: last, nullable, no default, not part of the key."""
    if name not in GROWN:
        return shape
    table, added_columns = GROWN[name]
    columns, indexes = shape[table]  # type: ignore[misc]
    earlier = [c for c in columns if c[1] not in added_columns]
    added = columns[len(earlier) :]
    assert [(c[1], c[2], c[3], c[4], c[5]) for c in added] == [
        (column, kind, 0, None, 0) for column, kind in added_columns.items()
    ]
    return {**shape, table: (earlier, indexes)}


def test_a_new_data_dir_gets_the_files_and_tables_the_earlier_code_made(tmp_path, monkeypatch):
    monkeypatch.delenv("UNICHUNK_DATABASE_URL", raising=False)
    earlier, now = tmp_path / "earlier", tmp_path / "now"
    for name, ddl in EARLIER.items():
        (earlier / name).parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(earlier / name) as conn:
            conn.executescript(ddl)
    settings = SinkSettings(data_dir=now)
    StatusStore.of(settings.for_generation("g1"))
    ChunkCache.of(settings)
    GenerationRegistry.of(settings).bootstrap("g1", "f", {})
    DocumentLeases.of(settings)
    SourceRegistry.of(settings).record(SourceRecord("docs", "directory", "/srv"))
    ReplayCache(open_database(settings, now / "webhook" / "replay.db"))
    made = sorted(p.relative_to(now).as_posix() for p in now.rglob("*") if p.suffix in (".sqlite3", ".db"))
    assert made == sorted(EARLIER)
    for name in EARLIER:
        assert _earlier_columns_of(name, _shape(now / name)) == _shape(earlier / name), name
