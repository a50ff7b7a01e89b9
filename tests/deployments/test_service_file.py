"""How the CLI finds a running service, embedded (`service.json`) and in server mode (a row per machine and
process in the database, nothing under the data dir)."""

from __future__ import annotations

import json

from sqlalchemy import text

from unichunk.deployments.service.discovery import announce, running_service_url, service_file, withdraw
from unichunk.index.process_identity import ProcessIdentity
from unichunk.sinks.database import open_database


def test_the_service_is_found_where_it_announced_itself(records_settings, monkeypatch):
    monkeypatch.delenv("UNICHUNK_SERVICE_URL", raising=False)
    data_dir = records_settings.data_dir
    assert running_service_url(data_dir) is None
    where = announce("0.0.0.0", 8123, data_dir)
    assert running_service_url(data_dir) == "http://127.0.0.1:8123"
    if records_settings.database_url is None:
        assert (
            where == service_file(data_dir)
            and json.loads(where.read_text())["url"] == "http://127.0.0.1:8123"
        )
    else:
        assert where is None and not data_dir.exists()  # server mode: nothing on this machine's disk
        database = open_database(records_settings, data_dir / "services.sqlite3")
        me = ProcessIdentity.current()
        with database.write() as conn:  # a service on this machine that was killed: its row is stale
            conn.execute(
                text("UPDATE services SET pid = :dead WHERE pid = :pid"), {"dead": 2**22 + 17, "pid": me.pid}
            )
        assert running_service_url(data_dir) is None
        with database.write() as conn:
            conn.execute(
                text("UPDATE services SET pid = :pid WHERE pid = :dead"), {"dead": 2**22 + 17, "pid": me.pid}
            )
        with database.write() as conn:  # a service on another machine: its loopback URL is not ours
            conn.execute(text("UPDATE services SET machine = 'elsewhere'"))
        assert running_service_url(data_dir) is None
        with database.write() as conn:
            conn.execute(text("UPDATE services SET machine = :m"), {"m": me.machine})
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(data_dir))  # withdraw() of a row reads the environment
    withdraw(where)
    assert running_service_url(data_dir) is None
