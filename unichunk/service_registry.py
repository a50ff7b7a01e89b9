"""The running services' records in server mode: one row per live `unichunk serve` of this database.

In server mode (UNICHUNK_DATABASE_URL) a service records itself as a row of `services` in the database's
`unichunk` schema, with its process identity (`unichunk.index.process_identity.ProcessIdentity`), and a CLI
uses the row of a live service on its own machine only: the URL is a loopback one, meaningless elsewhere.
The service's discovery (`unichunk.deployments.service.discovery`) reaches the database only through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from unichunk.index.process_identity import ProcessIdentity
from unichunk.settings import SinkSettings

if TYPE_CHECKING:
    from unichunk.sinks.database import Database

_SERVICES_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS services (machine TEXT NOT NULL, pid INTEGER NOT NULL, "
    "pid_started TEXT NOT NULL, url TEXT NOT NULL, PRIMARY KEY (machine, pid))"
]


def service_rows(data_dir: Path | None) -> ServiceRows | None:
    """The server-mode database's service table; None on the embedded default (the caller keeps a file)."""
    settings = SinkSettings() if data_dir is None else SinkSettings(data_dir=Path(data_dir))
    if settings.database_url is None:
        return None
    from unichunk.sinks.database import (
        open_database,  # SQLAlchemy only in server mode: the CLI starts light
    )

    return ServiceRows(open_database(settings, settings.data_dir / "services.sqlite3"))


class ServiceRows:
    """This database's running-service rows: this process's own, and the live ones of this machine."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def add(self, url: str) -> None:
        """Record this process as a running service at `url`."""
        database = self._database
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

    def remove(self) -> None:
        """Remove this process's row; quietly, as at exit the database may be gone (the row is then stale,
        and readers check the process)."""
        database = self._database
        me = ProcessIdentity.current()
        try:
            with database.write() as conn:
                conn.execute(
                    database.statement("DELETE FROM services WHERE machine = :m AND pid = :p"),
                    {"m": me.machine, "p": me.pid},
                )
        except Exception:
            pass

    def live_url(self) -> str | None:
        """The URL of a service on this machine whose process is alive (a killed one's row is stale)."""
        database = self._database
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
