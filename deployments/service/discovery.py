"""How the CLI finds a running service: `<data dir>/service.json` with its URL and pid.

`unichunk serve` writes it once its HTTP server is about to listen and removes it when it stops; a file whose
pid is not alive (a service killed with SIGKILL) is stale and ignored. UNICHUNK_SERVICE_URL, when set, wins.

In server mode (UNICHUNK_DATABASE_URL) nothing is written under the data dir: the service records itself as
a row of the database (`unichunk.service_registry`), and a CLI uses the row of a live service on its own
machine only (a CLI on another machine sets UNICHUNK_SERVICE_URL).
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

from unichunk.deployments.settings import ServiceSettings
from unichunk.service_registry import service_rows
from unichunk.settings import SinkSettings

SERVICE_FILE = "service.json"


def service_file(data_dir: Path | None = None) -> Path:
    return Path(data_dir or SinkSettings().data_dir) / SERVICE_FILE


def connect_host(host: str) -> str:
    """The host a client on this machine connects to for a server bound to `host`."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def announce(host: str, port: int, data_dir: Path | None = None) -> Path | None:
    """Record this process as the running service (withdrawn at exit): the service file's path, or None
    when the record is a row of the server-mode database."""
    name = connect_host(host)
    url = f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"
    rows = service_rows(data_dir)
    if rows is not None:
        rows.add(url)
        atexit.register(rows.remove)
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
        rows = service_rows(None)
        if rows is not None:
            rows.remove()
        return
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def running_service_url(data_dir: Path | None = None) -> str | None:
    """UNICHUNK_SERVICE_URL, else the URL of a live service for this data dir (its file, or in server mode
    its row on this machine), else None."""
    configured = ServiceSettings().service_url
    if configured:
        return configured.rstrip("/")
    rows = service_rows(data_dir)
    if rows is not None:
        return rows.live_url()
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
