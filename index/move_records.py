"""Move a data dir's records into server mode: `python -m unichunk.index.move_records [--data-dir DIR]`.

For an index whose stores stay where they are (servers several machines already shared): the records that
describe them (generation registry, status tables, chunk cache, sources) are copied from the data dir's
SQLite files into the database UNICHUNK_DATABASE_URL names, so the index goes on without being built again.
Leases and the webhook replay cache are not copied: stop every run and receiver first, which the move needs
anyway. The registry is copied last and a database that holds one already is refused, so a move that stopped
half-way runs again and two indexes are never merged into one. The files are left as they are; embedded
stores are not moved (docs/operations.md, "Moving an existing data dir").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from unichunk.chunking.errors import UnichunkError
from unichunk.index.chunk_cache import ChunkCache
from unichunk.index.generations import registry_of
from unichunk.index.source_registry import SourceRegistry
from unichunk.index.status import StatusStore
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, DatabaseUnavailable, copy_rows, server_url


class MoveRefused(UnichunkError):
    """The move cannot run as asked (no database named, or it holds an index already)."""


def move_records(data_dir: Path, target: SinkSettings) -> dict[str, int]:
    """Copy the records of the embedded `data_dir` into `target`'s database; rows copied per record."""
    if server_url(target) is None:
        raise MoveRefused("set UNICHUNK_DATABASE_URL to the database to move the records into")
    if registry_of(target).all():
        raise MoveRefused(
            "the database of UNICHUNK_DATABASE_URL holds an index already (its generation registry is not "
            "empty): move into an empty database"
        )
    source = target.model_copy(update={"data_dir": data_dir, "database_url": None, "generation": None})
    moved: dict[str, int] = {}
    for generation in registry_of(source).all():
        path = source.for_generation(generation.generation_id).status_path
        if path.exists():
            into = StatusStore.of(target.for_generation(generation.generation_id)).db
            moved[f"status {generation.generation_id}"] = copy_rows(_file(path), into, "documents")
    if (data_dir / "chunks.sqlite3").exists():
        cache = ChunkCache.of(target).db
        for table in ("documents", "chunks"):
            moved[f"chunk cache {table}"] = copy_rows(_file(data_dir / "chunks.sqlite3"), cache, table)
    if (data_dir / "sources.sqlite3").exists():
        moved["sources"] = copy_rows(
            _file(data_dir / "sources.sqlite3"), SourceRegistry.of(target).create(), "sources"
        )
    if (data_dir / "generations.sqlite3").exists():  # last: see the module docstring
        registry = registry_of(target).create()
        moved["generations"] = copy_rows(_file(data_dir / "generations.sqlite3"), registry, "generations")
    return moved


def _file(path: Path) -> Database:
    return Database.sqlite(path, readonly=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="the data dir to move (default: UNICHUNK_DATA_DIR)")
    args = parser.parse_args(argv)
    target = SinkSettings()
    data_dir = args.data_dir or target.data_dir
    try:
        moved = move_records(data_dir, target)
    except MoveRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DatabaseUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    for what, rows in moved.items():
        print(f"{what}: {rows} row(s)")
    if "generations" not in moved:
        print(f"warning: no generation registry in {data_dir}: nothing was ingested there", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
