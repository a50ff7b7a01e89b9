"""Fault-test fixtures: a fresh data dir per test, and private servers for the ones a test kills."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
import servers

from tasks.resources import close_all_sinks

sys.path.insert(0, str(Path(__file__).parent))  # for fault_checks


@pytest.fixture
def fault_env(tmp_path, monkeypatch, falkordb_url, prefect_api_url):
    """Like the pipeline tests' environment: own data dir and graph, flows on the session Prefect server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    data_dir = tmp_path / "data"
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(data_dir))
    monkeypatch.setenv("UNICHUNK_FALKORDB_URL", falkordb_url)
    monkeypatch.setenv("UNICHUNK_GRAPH_NAME", f"fault_{uuid.uuid4().hex[:12]}")
    monkeypatch.delenv("PUSHGATEWAY_URL", raising=False)
    with temporary_settings(updates={PREFECT_API_URL: prefect_api_url}):
        yield data_dir
    close_all_sinks()


@pytest.fixture
def private_falkordb(tmp_path):
    """A FalkorDB server of this test alone (never the shared one), which the test may kill and restart."""
    try:
        server = servers.start_falkordb(tmp_path / "own-falkordb", reuse=False)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    yield server
    server.stop()
