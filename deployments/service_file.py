"""How the CLI finds a running service: `<data dir>/service.json` with its URL and pid.

`unichunk serve` writes it once its HTTP server is about to listen and removes it when it stops; a file whose
pid is not alive (a service killed with SIGKILL) is stale and ignored. UNICHUNK_SERVICE_URL, when set, wins.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

from deployments.settings import ServiceSettings
from sinks.config import SinkSettings

SERVICE_FILE = "service.json"


def service_file(data_dir: Path | None = None) -> Path:
    return Path(data_dir or SinkSettings().data_dir) / SERVICE_FILE


def connect_host(host: str) -> str:
    """The host a client on this machine connects to for a server bound to `host`."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def announce(host: str, port: int, data_dir: Path | None = None) -> Path:
    """Write the service file for this process (removed at exit) and return its path."""
    path = service_file(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    name = connect_host(host)
    url = f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    tmp.replace(path)
    atexit.register(withdraw, path)
    return path


def withdraw(path: Path) -> None:
    """Remove the service file if it is still this process's."""
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def running_service_url(data_dir: Path | None = None) -> str | None:
    """UNICHUNK_SERVICE_URL, else the URL in a live service's file for this data dir, else None."""
    configured = ServiceSettings().service_url
    if configured:
        return configured.rstrip("/")
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
