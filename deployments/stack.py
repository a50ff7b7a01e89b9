"""The local stack without containers: a Prefect server and the embedded FalkorDB, started in the background.

`up()` is idempotent: a Prefect server already answering on the port is reused, and FalkorDB is reused by
`sinks.graph.falkordb_server.ensure_server`. Everything it starts lives under `<data_dir>/stack` (logs, pid
file, the Prefect database via PREFECT_HOME), so `down()` stops exactly what `up()` started and nothing
else. Qdrant and BM25 need no server: they run embedded in the flow processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from sinks.config import SinkSettings
from sinks.graph.falkordb_server import ensure_server, stop_server

STATE_FILE = "prefect-server.json"


@dataclass
class StackUrls:
    prefect_api_url: str
    prefect_ui_url: str
    falkordb_url: str
    started_prefect: bool

    def exports(self) -> str:
        """Shell lines that point other terminals (serve, webhook, CLI) at this stack."""
        return (
            f"export PREFECT_API_URL={self.prefect_api_url}\nexport UNICHUNK_FALKORDB_URL={self.falkordb_url}"
        )


def stack_dir(data_dir: Path) -> Path:
    return Path(data_dir).resolve() / "stack"


def _healthy(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _prefect_executable() -> str:
    candidate = Path(sys.executable).parent / "prefect"
    return str(candidate) if candidate.exists() else "prefect"


def start_prefect_server(
    data_dir: Path, host: str = "127.0.0.1", port: int = 4200, timeout: float = 180.0
) -> tuple[str, bool]:
    """Start `prefect server start` detached (or reuse one answering there); returns (api url, started)."""
    api_url = f"http://{host}:{port}/api"
    if _healthy(api_url):
        return api_url, False
    directory = stack_dir(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        PREFECT_HOME=str(directory / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
    )
    env.pop("PREFECT_API_URL", None)  # the server must not try to talk to another one
    log = directory / "prefect-server.log"
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [_prefect_executable(), "server", "start", "--host", host, "--port", str(port)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # survives the CLI that started it; down() signals the whole group
        )
    (directory / STATE_FILE).write_text(json.dumps({"pid": process.pid, "api_url": api_url}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prefect server exited with {process.returncode}; see {log}")
        if _healthy(api_url):
            return api_url, True
        time.sleep(0.5)
    _terminate_group(process.pid)
    raise RuntimeError(f"prefect server not healthy after {timeout:.0f} s; see {log}")


def _terminate_group(pid: int, timeout: float = 20.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # If this process started the server (up() then down() in one process), reap it, or its
        # zombie would keep the group "alive".
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def stop_prefect_server(data_dir: Path) -> bool:
    """Stop the server `up()` started (found by its pid file); True if one was stopped."""
    state_file = stack_dir(data_dir) / STATE_FILE
    if not state_file.exists():
        return False
    state = json.loads(state_file.read_text())
    state_file.unlink()
    pid = int(state["pid"])
    # Only a process group we created has this pid as its group id: a recycled pid is left alone.
    try:
        if os.getpgid(pid) != pid:
            return False
    except ProcessLookupError:
        return False
    _terminate_group(pid)
    return True


def up(
    data_dir: Path | None = None, host: str = "127.0.0.1", port: int = 4200, echo: bool = True
) -> StackUrls:
    """Start (or reuse) the Prefect server and the embedded FalkorDB; print and return their URLs."""
    data_dir = Path(data_dir or SinkSettings().data_dir)
    api_url, started = start_prefect_server(data_dir, host, port)
    falkordb_url = ensure_server(data_dir)
    urls = StackUrls(api_url, api_url.removesuffix("/api"), falkordb_url, started)
    if echo:
        print(f"Prefect API   {urls.prefect_api_url}{'' if started else '  (already running)'}")
        print(f"Prefect UI    {urls.prefect_ui_url}")
        print(f"FalkorDB      {urls.falkordb_url}")
        print(f"Logs          {stack_dir(data_dir)}")
        print(urls.exports())
    return urls


def down(data_dir: Path | None = None, echo: bool = True) -> dict[str, bool]:
    """Stop what `up()` started: the Prefect server it launched and the embedded FalkorDB."""
    data_dir = Path(data_dir or SinkSettings().data_dir)
    stopped = {"prefect": stop_prefect_server(data_dir), "falkordb": stop_server(data_dir)}
    if echo:
        for name, was in stopped.items():
            print(f"{name:<10}{'stopped' if was else 'was not running'}")
    return stopped
