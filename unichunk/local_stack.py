"""The local stack without containers: one Prefect server per data dir and the embedded FalkorDB.

`prefect_api` is the one way every entry point (the CLI, `unichunk.Pipeline`) reaches Prefect:
PREFECT_API_URL when set, else the data dir's own server, recorded in `<data_dir>/stack/prefect-server.json`,
started on first use (`unichunk up`: port 4200; otherwise a free port) and held in use for the caller's
block. Not Prefect's ephemeral server: that one is a child of each command, so every command pays its
start-up and a command killed with SIGKILL leaves it running, unrecorded. Start and stop hold a file lock
(`stack/.lock`), so two commands starting at once start one server; `down()` stops only what was recorded
(a server found answering on 4200 is used, never stopped). Servers a command starts stop themselves when
idle or when the data dir goes (`unichunk.sinks.idle_watchdog`); those of `up` only then or at `down`.

Every server gets its own PREFECT_UI_API_URL (`_spawn`), since Prefect's UI would otherwise call port 4200.
docs/operations.md, "Lifecycle", has the details and why not `prefect server start --background`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx

from unichunk.sinks import idle_watchdog
from unichunk.sinks.config import DEFAULT_IDLE_SECONDS, SinkSettings
from unichunk.sinks.graph.falkordb_server import ensure_server, running_url, server_dir, stop_server

STATE_FILE = "prefect-server.json"
UP_PORT = 4200
# How long a recorded server that stops answering /health may take to answer again (a busy SQLite
# database) before it is taken for hung and replaced.
UNRESPONSIVE_SECONDS = 15.0


@dataclass(frozen=True)
class LocalPrefect:
    """The data dir's Prefect server: where it answers, its process (group), whether this call started it."""

    api_url: str
    pid: int
    started: bool

    @property
    def ui_url(self) -> str:
        return self.api_url.removesuffix("/api")

    def announce(self) -> str:
        """The one line a command prints about the server it uses."""
        if self.started:
            return f"Prefect: local server {self.ui_url} (started by unichunk; `unichunk down` stops it)"
        return f"Prefect: reusing local server {self.ui_url} (`unichunk down` stops it)"


@dataclass(frozen=True)
class PrefectApi:
    """The Prefect API an entry point uses: PREFECT_API_URL's, or the data dir's local server (`local`)."""

    url: str
    local: LocalPrefect | None


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


def _read_state(directory: Path) -> tuple[int, str] | None:
    try:
        state = json.loads((directory / STATE_FILE).read_text())
        return int(state["pid"]), str(state["api_url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _group_alive(pid: int) -> bool:
    """True while `pid` leads a live process group: the server we started (a recycled pid does not lead
    a group). Reaps it first if this process started it and it exited."""
    idle_watchdog.reap(pid)
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _recorded(directory: Path, patience: float = UNRESPONSIVE_SECONDS) -> LocalPrefect | None:
    """The recorded server if it is alive and answers (waiting up to `patience` s for a busy one); a dead
    record is removed, and a server that stays silent is stopped, so the caller starts a new one."""
    state = _read_state(directory)
    if state is None:
        return None
    pid, api_url = state
    deadline = time.monotonic() + patience
    while _group_alive(pid):
        if _healthy(api_url):
            return LocalPrefect(api_url, pid, started=False)
        if time.monotonic() > deadline:
            _terminate_group(pid)
            break
        time.sleep(0.5)
    (directory / STATE_FILE).unlink(missing_ok=True)
    return None


def client_host(host: str) -> str:
    """The address clients use for a server bound to `host`: loopback for a wildcard bind (0.0.0.0, ::),
    an IPv6 address in brackets."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _free_port() -> int:
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port != UP_PORT:
            return port


def _spawn(directory: Path, host: str, port: int, idle_seconds: float) -> subprocess.Popen:
    """The server under its watchdog (`unichunk.sinks.idle_watchdog`), which leads their process group."""
    env = dict(os.environ)
    env.update(
        PREFECT_HOME=str(directory / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
    )
    env.pop("PREFECT_API_URL", None)  # the server must not try to talk to another one
    # Its UI must call this server, not the default port (see the module docstring).
    if not (env.get("PREFECT_UI_API_URL") or env.get("PREFECT_SERVER_UI_API_URL")):
        env["PREFECT_UI_API_URL"] = f"http://{client_host(host)}:{port}/api"
    command = [_prefect_executable(), "server", "start", "--host", host, "--port", str(port)]
    probe = f"prefect:http://{client_host(host)}:{port}/api"
    log = directory / "prefect-server.log"
    return idle_watchdog.start(command, directory, STATE_FILE, idle_seconds, probe, log, env)


def _wait_healthy(process: subprocess.Popen, api_url: str, timeout: float) -> bool:
    """True once the server answers; False if it exited (or did not answer within `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if _healthy(api_url):
            return True
        time.sleep(0.5)
    return False


def _start(directory: Path, host: str, port: int | None, timeout: float, idle_seconds: float) -> LocalPrefect:
    """Start and record a server on `port`, or on a free port (a second one if another process took the
    first between our choosing it and the server binding it), with its watchdog (`idle_seconds`)."""
    log = directory / "prefect-server.log"
    for _attempt in range(1 if port else 2):
        chosen = port or _free_port()
        api_url = f"http://{client_host(host)}:{chosen}/api"
        process = _spawn(directory, host, chosen, idle_seconds)
        (directory / STATE_FILE).write_text(json.dumps({"pid": process.pid, "api_url": api_url}))
        if _wait_healthy(process, api_url, timeout):
            return LocalPrefect(api_url, process.pid, started=True)
        (directory / STATE_FILE).unlink(missing_ok=True)
        if process.poll() is None:
            _terminate_group(process.pid)
            raise RuntimeError(f"prefect server not healthy after {timeout:.0f} s; see {log}")
    raise RuntimeError(f"prefect server exited with {process.returncode}; see {log}")


def ensure_prefect_server(
    data_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    timeout: float = 300.0,
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
) -> LocalPrefect:
    """The data dir's recorded Prefect server if it answers, else a new one (on `port`, default a free
    port other than 4200), started detached and recorded; one started here stops itself after
    `idle_seconds` without use (0: only when the data dir is gone). `timeout` is patient: a busy 2-core
    machine takes minutes to start one."""
    directory = stack_dir(data_dir)
    with idle_watchdog.starting(directory):
        idle_watchdog.touch(directory)
        return _recorded(directory) or _start(directory, host, port, timeout, idle_seconds)


@contextlib.contextmanager
def prefect_api(settings: SinkSettings, *, in_process: bool = True) -> Iterator[PrefectApi]:
    """The Prefect API every entry point uses, for the block: PREFECT_API_URL when set (in the environment,
    or in Prefect's settings of this thread), else the data dir's local server, started or reused, and
    held in use until the block ends (its idle period starts then).

    `in_process`: point Prefect's settings of this thread (and of the tasks and threads Prefect starts
    from it) at that API for the block, leaving the process environment alone, so two threads can use
    two data dirs at once. The CLI passes False and sets PREFECT_API_URL itself, before Prefect loads."""
    url = os.environ.get("PREFECT_API_URL") or _prefect_setting()
    with contextlib.ExitStack() as scope:
        local = None
        if not url:
            scope.enter_context(idle_watchdog.lease(stack_dir(settings.data_dir)))
            local = ensure_prefect_server(settings.data_dir, idle_seconds=settings.server_idle_seconds)
            url = local.api_url
        if in_process:
            from prefect.settings import PREFECT_API_URL, temporary_settings

            scope.enter_context(temporary_settings(updates={PREFECT_API_URL: url}))
            # on the way out, while the URL still holds: this block's events and logs reach its server
            scope.callback(flush_prefect_queues)
        yield PrefectApi(url, local)


def flush_prefect_queues(timeout: float = 2) -> None:
    """Send what Prefect's log and event workers hold (bounded by `timeout`) and stop them, importing
    nothing (a process that never loaded them has none). A stopped worker is made again on its next use,
    for the API URL of that moment: Prefect keys its one events worker by client type only, so without this
    a second data dir's runs in one process would send their events to the first one's server."""
    for module, worker in (
        ("prefect.logging.handlers", "APILogWorker"),
        ("prefect.events.worker", "EventsWorker"),
    ):
        with suppress(Exception):
            getattr(sys.modules[module], worker).drain_all(timeout=timeout)


def _prefect_setting() -> str | None:
    """Prefect's API URL setting in this thread, if Prefect is loaded (loading it costs every CLI command
    seconds, and a process that has not loaded it has set nothing but the environment)."""
    if "prefect.settings" not in sys.modules:
        return None
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


def recorded_prefect(data_dir: Path) -> LocalPrefect | None:
    """The data dir's recorded Prefect server if it is running (without starting one)."""
    directory = stack_dir(data_dir)
    if not (directory / STATE_FILE).exists():
        return None
    with idle_watchdog.starting(directory):
        return _recorded(directory, patience=2.0)


def start_prefect_server(
    data_dir: Path, host: str = "127.0.0.1", port: int = UP_PORT, timeout: float = 180.0
) -> tuple[str, bool]:
    """For `up`: the recorded server, else one answering on `port` (used, not ours to stop), else a new
    one on `port`; returns (api url, started)."""
    directory = stack_dir(data_dir)
    with idle_watchdog.starting(directory):
        idle_watchdog.pin(directory, True)  # `up`'s server runs until `down` (or its data dir goes)
        if recorded := _recorded(directory):
            return recorded.api_url, False
        api_url = f"http://{client_host(host)}:{port}/api"
        if _healthy(api_url):
            return api_url, False
        return _start(directory, host, port, timeout, DEFAULT_IDLE_SECONDS).api_url, True


def _terminate_group(pid: int, timeout: float = 20.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    # Zombies do not count: the server and its watchdog may be children of a process still running.
    while idle_watchdog.group_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            return
        time.sleep(0.2)


def stop_prefect_server(data_dir: Path) -> LocalPrefect | None:
    """Stop the recorded server (`up`'s or a command's) and its process group; returns what was stopped."""
    directory = stack_dir(data_dir)
    with idle_watchdog.starting(directory):
        idle_watchdog.pin(directory, False)
        state = _read_state(directory)
        (directory / STATE_FILE).unlink(missing_ok=True)
        if state is None or not _group_alive(state[0]):  # a recycled pid is not a group leader: left alone
            return None
        _terminate_group(state[0])
        return LocalPrefect(state[1], state[0], started=False)


def running(data_dir: Path | None = None) -> list[str]:
    """One line per server the stack left running for this data dir (what `down` would stop)."""
    data_dir = Path(data_dir or SinkSettings().data_dir)
    lines = []
    if falkordb := running_url(data_dir):
        lines.append(f"FalkorDB {falkordb} (embedded, data in {Path(data_dir).resolve() / 'falkordb'})")
    if prefect := recorded_prefect(data_dir):
        lines.append(f"Prefect server {prefect.ui_url} (pid {prefect.pid})")
    return lines


def up(
    data_dir: Path | None = None, host: str = "127.0.0.1", port: int = UP_PORT, echo: bool = True
) -> StackUrls:
    """Start (or reuse) the Prefect server and the embedded FalkorDB; print and return their URLs. A
    recorded server on another port is reused, and the note says so (on stderr)."""
    data_dir = Path(data_dir or SinkSettings().data_dir)
    api_url, started = start_prefect_server(data_dir, host, port)
    idle_watchdog.pin(server_dir(data_dir).resolve(), True)
    falkordb_url = ensure_server(data_dir)
    urls = StackUrls(api_url, api_url.removesuffix("/api"), falkordb_url, started)
    if not api_url.endswith(f":{port}/api"):
        print(
            f"note: this data dir's Prefect server already runs at {urls.prefect_ui_url}; "
            f"`unichunk down`, then `unichunk up --port {port}`, to move it",
            file=sys.stderr,
        )
    if echo:
        print(f"Prefect API   {urls.prefect_api_url}{'' if started else '  (already running)'}")
        print(f"Prefect UI    {urls.prefect_ui_url}")
        print(f"FalkorDB      {urls.falkordb_url}")
        print(f"Logs          {stack_dir(data_dir)}")
        print(urls.exports())
    return urls


def down(data_dir: Path | None = None, echo: bool = True) -> dict[str, bool]:
    """Stop what `up()`, `demo` and other commands started for this data dir: the recorded Prefect server
    and the embedded FalkorDB. Prints (with `echo`) one line for each."""
    data_dir = Path(data_dir or SinkSettings().data_dir)
    falkordb = running_url(data_dir)
    idle_watchdog.pin(server_dir(data_dir).resolve(), False)
    prefect = stop_prefect_server(data_dir)
    stopped = {"prefect": prefect is not None, "falkordb": stop_server(data_dir)}
    if echo:
        print(
            "Prefect server  "
            + (f"{prefect.ui_url} (pid {prefect.pid}) stopped" if prefect else "not running")
        )
        print(
            "FalkorDB        "
            + (f"{falkordb or 'embedded'} stopped" if stopped["falkordb"] else "not running")
        )
    return stopped
