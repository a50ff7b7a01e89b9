"""Stop a server that a command started implicitly once nobody has used it for a while, or once its data
dir is gone, as build daemons stop themselves.

The watchdog is a small process that starts the server (`start`) and leads its process group, so whatever
stops the group (`unichunk down`) stops both; it exits when the server does. It watches the server's
directory under the data dir (`<data dir>/stack`, `<data dir>/falkordb`):

- the directory is gone, or its state file no longer names this server: nothing can reach the server
  any more, so it is stopped at once;
- otherwise it is stopped after `idle_seconds` without use. In use means: a process holds the directory's
  lease (`lease`: a shared lock on `in-use`, held for a command's or a run's duration), or the server
  reports use of its own (a Prefect flow or task run started since the last look; a FalkorDB client
  connected besides the watchdog's probe). The lease file's mtime records the last use, so a client that
  only touched the server (`touch`) counts too. A `pinned` file (`unichunk up`) keeps it until `down`.

The watchdog decides "idle" while holding the lease exclusively and keeps it while it stops the server:
a client taking the lease meanwhile waits, then finds no recorded server and starts a new one.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import httpx

LEASE_FILE = "in-use"
PINNED_FILE = "pinned"


@contextlib.contextmanager
def starting(directory: Path) -> Iterator[None]:
    """Serialise starting and stopping the server of `directory` across processes, so two callers never
    start two servers on one directory. The lock file's descriptor is not inherited by the server
    (subprocess closes descriptors), so the lock frees when its holder exits, however it exits."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def lease(directory: Path) -> Iterator[None]:
    """Hold the server of `directory` in use for the block (its watchdog does not stop it meanwhile); the
    lease frees when the block ends or the process dies, however it dies."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LEASE_FILE
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            touch(directory)
            yield
        finally:
            touch(directory)
            fcntl.flock(handle, fcntl.LOCK_UN)


def touch(directory: Path) -> None:
    """Record a use of the server of `directory` now (the idle period starts again)."""
    with contextlib.suppress(OSError):
        (directory / LEASE_FILE).touch()


def pin(directory: Path, pinned: bool) -> None:
    """Keep the server of `directory` running until `down` (True), or let it stop when idle (False)."""
    if pinned:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / PINNED_FILE).touch()
    else:
        (directory / PINNED_FILE).unlink(missing_ok=True)


def start(
    command: list[str],
    directory: Path,
    state_file: str,
    idle_seconds: float,
    probe: str,
    log: Path,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """Start `command` (a server) under its watchdog, which leads a new session and process group (so the
    server outlives its starter and stops with the group) and is the pid to record in
    `directory/state_file`. `probe` says how to ask the server whether it works: `prefect:<api url>` or
    `redis:<port>`. `idle_seconds` 0: stop only when the data dir is gone. The watchdog exits with the
    server."""
    # Run as a script, isolated (-I): it needs the standard library and httpx, not the package's imports.
    watchdog = [
        sys.executable, "-I", str(Path(__file__).resolve()),
        str(directory), state_file, str(idle_seconds), probe, "--", *command,
    ]  # fmt: skip
    with log.open("ab") as handle:
        return subprocess.Popen(
            watchdog,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def group_alive(group: int) -> bool:
    """True while process group `group` has a member that is not a zombie (reaping this process's own)."""
    reap(group)
    return bool(group_members(group))


def reap(group: int) -> None:
    """Collect the exit status of this process's children in process group `group` (the server and its
    watchdog, when this process started them), so they do not linger as zombies."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-group, os.WNOHANG)[0]:
            pass


# --- the watchdog process --------------------------------------------------------------------------------


def group_members(group: int) -> list[int]:
    """Live (not zombie) processes of process group `group` other than this one."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _recorded_pid(directory: Path, state_file: str) -> int | None:
    try:
        return int(json.loads((directory / state_file).read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _busy(probe: str, since: float) -> bool:
    """Whether the server reports use of its own since `since` (epoch seconds): a Prefect flow or task run
    started (a run whose process was killed starts nothing more, so it does not keep the server for
    ever), a FalkorDB client connected. An unanswered question counts as busy."""
    kind, _, target = probe.partition(":")
    try:
        if kind == "prefect":
            after = datetime.fromtimestamp(since, UTC).isoformat()
            for runs in ("flow_runs", "task_runs"):
                body = {runs: {"start_time": {"after_": after}}}
                response = httpx.post(f"{target}/{runs}/count", json=body, timeout=10)
                if response.status_code != 200 or int(response.json()) > 0:
                    return True
            return False
        if kind == "redis":
            return _redis_clients(int(target)) > 1  # the probe's own connection is one
    except (httpx.HTTPError, OSError, ValueError):
        return True
    return False


def _redis_clients(port: int) -> int:
    """`connected_clients` from the server's INFO (plain RESP: no client library for one command)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n")
        reply = b""
        while b"connected_clients:" not in reply or not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith("connected_clients:"):
            return int(line.split(":", 1)[1])
    raise ValueError("no connected_clients in INFO")


def _try_exclusive(directory: Path) -> IO[str] | None:
    """The lease held exclusively (no client holds it), or None."""
    try:
        handle = (directory / LEASE_FILE).open("a")
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def _last_use(directory: Path) -> float:
    try:
        return (directory / LEASE_FILE).stat().st_mtime
    except OSError:
        return 0.0


def _stop(server: subprocess.Popen, reason: str, timeout: float = 20.0) -> None:
    """Stop the server and whatever else runs in the group (this process last), then exit."""
    print(f"unichunk watchdog: stopping the server (pid {server.pid}): {reason}", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgid(0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout)
    deadline = time.monotonic() + 5
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in group_members(group):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    sys.exit(0)


def watch(server: subprocess.Popen, directory: Path, state_file: str, idle_seconds: float, probe: str) -> int:
    """Watch until the server exits (returns its exit status) or must stop (stops it and exits)."""
    tick = min(5.0, max(0.2, idle_seconds / 5)) if idle_seconds > 0 else 5.0
    last_busy = checked = time.time()
    recorded = False  # the starter records this process once the server answers
    while server.poll() is None:
        pid = _recorded_pid(directory, state_file)
        recorded = recorded or pid == os.getpid()
        if not directory.is_dir() or (recorded and pid != os.getpid()):
            _stop(server, f"its data dir {directory.parent} is gone or no longer records it")
        if idle_seconds > 0 and recorded and not (directory / PINNED_FILE).exists():
            handle, now = _try_exclusive(directory), time.time()
            busy = handle is None or _busy(probe, checked - tick)  # a margin: a run's clock may lag
            last_busy, checked = (now if busy else last_busy), now
            if not busy and now - max(last_busy, _last_use(directory)) >= idle_seconds:
                (directory / state_file).unlink(missing_ok=True)
                _stop(server, f"unused for {idle_seconds:g} s")  # the lease stays held until exit
            if handle is not None:
                handle.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(tick)
    return server.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("state_file")
    parser.add_argument("idle_seconds", type=float)
    parser.add_argument("probe")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL)  # same group, output, environment
    sys.exit(watch(server, args.directory, args.state_file, args.idle_seconds, args.probe))


if __name__ == "__main__":
    main()
