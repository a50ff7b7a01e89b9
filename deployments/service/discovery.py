"""How the CLI finds a running service: `<data dir>/service.json` with its URL and pid.

`unichunk serve` writes it once its HTTP server is about to listen and removes it when it stops; a file whose
pid is not alive (a service killed with SIGKILL) is stale and ignored. UNICHUNK_SERVICE_URL, when set, wins.

In server mode (UNICHUNK_DATABASE_URL) nothing is written under the data dir: the service records itself as
a row of `services` in the database's `unichunk` schema, with its process identity
(`unichunk.index.process_identity.ProcessIdentity`), and a CLI uses the row of a live service on its own machine
only: the URL is a loopback one, meaningless elsewhere (a CLI on another machine sets
UNICHUNK_SERVICE_URL).
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from unichunk.deployments.settings import ServiceSettings
from unichunk.index.process_identity import ProcessIdentity
from unichunk.settings import SinkSettings

if TYPE_CHECKING:
    from unichunk.sinks.database import Database

SERVICE_FILE = "service.json"

_SERVICES_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS services (machine TEXT NOT NULL, pid INTEGER NOT NULL, "
    "pid_started TEXT NOT NULL, url TEXT NOT NULL, PRIMARY KEY (machine, pid))"
]


def service_file(data_dir: Path | None = None) -> Path:
    return Path(data_dir or SinkSettings().data_dir) / SERVICE_FILE


def connect_host(host: str) -> str:
    """The host a client on this machine connects to for a server bound to `host`."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _services(data_dir: Path | None) -> Database | None:
    """The server-mode database's service table; None on the embedded default (the file is used)."""
    settings = SinkSettings() if data_dir is None else SinkSettings(data_dir=Path(data_dir))
    if settings.database_url is None:
        return None
    from unichunk.sinks.database import (
        open_database,  # SQLAlchemy (~0.16 s) only in server mode: the CLI starts light
    )

    return open_database(settings, settings.data_dir / "services.sqlite3")


def announce(host: str, port: int, data_dir: Path | None = None) -> Path | None:
    """Record this process as the running service (withdrawn at exit): the service file's path, or None
    when the record is a row of the server-mode database."""
    name = connect_host(host)
    url = f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"
    database = _services(data_dir)
    if database is not None:
        database.ensure(_SERVICES_SCHEMA)
        me = ProcessIdentity.current()
        with database.write() as conn:
            conn.execute(
                database.statement(
                    "INSERT INTO services (machine, pid, pid_started, url) VALUES (:m, :p, :s, :u) "
                    "ON CONFLICT (machine, pid) DO UPDATE SET pid_started = excluded.pid_started, url = excluded.url"
                ),
                {"m": me.machine, "p": me.pid, "s": me.started, "u": url},
            )
        atexit.register(_withdraw_row, database)
        return None
    path = service_file(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    tmp.replace(path)
    atexit.register(withdraw, path)
    return path


def withdraw(path: Path | None) -> None:
    """Remove the service file (or this process's row) if it is still this process's."""
    if path is None:
        database = _services(None)
        if database is not None:
            _withdraw_row(database)
        return
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def _withdraw_row(database: Database) -> None:
    me = ProcessIdentity.current()
    try:
        with database.write() as conn:
            conn.execute(
                database.statement("DELETE FROM services WHERE machine = :m AND pid = :p"),
                {"m": me.machine, "p": me.pid},
            )
    except Exception:  # at exit, with the database gone: the row is stale, and readers check the process
        pass


def running_service_url(data_dir: Path | None = None) -> str | None:
    """UNICHUNK_SERVICE_URL, else the URL of a live service for this data dir (its file, or in server mode
    its row on this machine), else None."""
    configured = ServiceSettings().service_url
    if configured:
        return configured.rstrip("/")
    database = _services(data_dir)
    if database is not None:
        return _live_row(database)
    try:
        record = json.loads(service_file(data_dir).read_text())
        pid, url = int(record["pid"]), str(record["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # stale: that service is gone
    except PermissionError:
        pass
    return url


def _live_row(database: Database) -> str | None:
    """The URL of a service on this machine whose process is alive (a killed one's row is stale)."""
    machine = ProcessIdentity.current().machine
    try:
        with database.read() as conn:
            rows = conn.execute(
                database.statement(
                    "SELECT pid, pid_started, url FROM services WHERE machine = :m ORDER BY pid"
                ),
                {"m": machine},
            ).all()
    except Exception as exc:
        if database.missing(exc):  # no service ever announced itself
            return None
        raise
    for pid, started, url in rows:
        if not ProcessIdentity(machine, pid, started).is_gone():
            return str(url)
    return None
