"""`unichunk.sinks.database`: one store implementation on a SQLite file and on a real PostgreSQL server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, dispose_engines, open_database, server_url

_DDL = ["CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)"]


@pytest.fixture(params=["sqlite", "postgresql"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> SinkSettings:
    """The embedded default, or server mode on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return SinkSettings(data_dir=tmp_path)
    url = request.getfixturevalue("database_url")
    return SinkSettings(data_dir=tmp_path, database_url=SecretStr(url))


def _increment(db: Database, name: str) -> None:
    with db.write() as conn:
        row = conn.execute(text("SELECT n FROM counters WHERE name = :name"), {"name": name})
        current = row.scalar()
        if current is None:
            conn.execute(text("INSERT INTO counters VALUES (:name, 1)"), {"name": name})
        else:
            conn.execute(
                text("UPDATE counters SET n = :n WHERE name = :name"),
                {"name": name, "n": current + 1},
            )


def test_generations_are_apart_and_a_dropped_one_is_gone(settings: SinkSettings, tmp_path: Path) -> None:
    live = open_database(settings, tmp_path / "g1" / "records.sqlite3", generation="g1")
    other = open_database(settings, tmp_path / "g2" / "records.sqlite3", generation="g2")
    assert not live.has_table("counters")
    for db in (live, other):
        db.ensure(_DDL)
    _increment(live, "a")
    _increment(live, "a")
    with live.read() as conn:
        assert conn.execute(text("SELECT n FROM counters")).scalar() == 2
    with other.read() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM counters")).scalar() == 0
    other.drop_schema()
    if settings.database_url is not None:
        assert not other.has_table("counters")
        assert live.has_table("counters")
        assert live.schema == "unichunk__g1"
    else:
        assert (tmp_path / "g1" / "records.sqlite3").exists()


def test_concurrent_writers_lose_no_update(settings: SinkSettings, tmp_path: Path) -> None:
    """Four threads, 25 transactions each, on one row: every one lands. On SQLite each transaction is a
    read, then a write (`BEGIN IMMEDIATE` makes writers queue instead of failing "database is locked" when
    a read lock is upgraded); PostgreSQL gets the atomic upsert the stores use there."""
    db = open_database(settings, tmp_path / "records.sqlite3")
    db.ensure(_DDL)
    upsert = text("INSERT INTO counters VALUES ('x', 1) ON CONFLICT (name) DO UPDATE SET n = counters.n + 1")
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(25):
                if db.dialect == "sqlite":
                    _increment(db, "x")
                else:
                    with db.write() as conn:
                        conn.execute(upsert)
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    with db.read() as conn:
        assert conn.execute(text("SELECT n FROM counters WHERE name = 'x'")).scalar() == 100


def test_a_read_only_sqlite_file_that_does_not_exist_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nothing" / "records.sqlite3"
    db = Database.sqlite(path, readonly=True)
    assert not db.has_table("counters")
    assert not path.exists()


def test_only_postgresql_urls_are_server_mode(tmp_path: Path) -> None:
    assert server_url(SinkSettings(data_dir=tmp_path)) is None
    url = server_url(SinkSettings(database_url=SecretStr("postgresql://u:p@db:5432/x")))
    assert url == "postgresql+psycopg://u:p@db:5432/x"
    with pytest.raises(ValueError, match="postgresql://"):
        server_url(SinkSettings(database_url=SecretStr("mysql://u:p@db/x")))


@pytest.fixture(autouse=True)
def _dispose() -> None:
    yield
    dispose_engines()  # the per-test database is dropped after the test: no pooled connection may linger


def test_a_kept_sqlite_connection_follows_its_file_when_the_file_is_replaced(tmp_path: Path) -> None:
    """A dropped generation's directory is deleted under the process's kept connection, and the same
    generation may be built again: the new rows must land in the new file, not the deleted one."""
    import shutil
    import sqlite3

    path = tmp_path / "generations" / "g1" / "records.sqlite3"
    db = Database.sqlite(path)
    db.ensure(_DDL)
    _increment(db, "a")
    reader = Database.sqlite(path, readonly=True)
    with reader.read() as conn:
        assert conn.execute(text("SELECT n FROM counters")).scalar() == 1
    shutil.rmtree(tmp_path / "generations")
    assert not reader.has_table("counters")
    again = Database.sqlite(path)  # the directory is made again, the engine is the one kept
    assert again.engine is db.engine
    again.ensure(_DDL)
    _increment(again, "b")
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT name, n FROM counters").fetchall() == [("b", 1)]
    with reader.read() as conn:
        assert conn.execute(text("SELECT name FROM counters")).scalars().all() == ["b"]


def test_a_process_keeps_the_engines_of_its_most_recent_sqlite_files_only(tmp_path: Path) -> None:
    from unichunk.sinks import database

    first = Database.sqlite(tmp_path / "0.sqlite3")
    first.ensure(_DDL)
    for n in range(1, database.SQLITE_ENGINES_KEPT + 5):
        Database.sqlite(tmp_path / f"{n}.sqlite3").ensure(_DDL)
    assert len(database._sqlite_engines) <= database.SQLITE_ENGINES_KEPT
    _increment(first, "x")  # an evicted engine still works: it reconnects
    with first.read() as conn:
        assert conn.execute(text("SELECT n FROM counters WHERE name = 'x'")).scalar() == 1


def test_a_schema_another_process_dropped_is_made_again_by_the_next_store(
    database_url: str, tmp_path: Path
) -> None:
    """`ensure` runs its DDL once per process and schema; when another process drops the schema (a dropped
    generation) and this one builds the generation again, the failed write forgets that, and the next
    store made creates the tables again."""
    import psycopg
    from sqlalchemy.exc import ProgrammingError

    settings = SinkSettings(data_dir=tmp_path, database_url=SecretStr(database_url))
    db = open_database(settings, tmp_path / "r.sqlite3", generation="g1")
    db.ensure(_DDL)
    _increment(db, "a")
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute('DROP SCHEMA "unichunk__g1" CASCADE')
    db.ensure(_DDL)  # remembered as done: nothing runs
    with pytest.raises(ProgrammingError):
        _increment(db, "a")
    again = open_database(settings, tmp_path / "r.sqlite3", generation="g1")
    again.ensure(_DDL)
    _increment(again, "a")
    with again.read() as conn:
        assert conn.execute(text("SELECT n FROM counters")).scalar() == 1
