"""Fault-test fixtures: a fresh data dir per test, and private servers for the ones a test kills."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import servers

sys.path.insert(0, str(Path(__file__).parent))  # for fault_checks


@pytest.fixture
def fault_env(pipeline_env):  # type: ignore[no-untyped-def]
    """The pipeline tests' environment: own data dir and graph, flows on the session Prefect server."""
    return pipeline_env


@pytest.fixture
def private_falkordb(tmp_path):
    """A FalkorDB server of this test alone (never the shared one), which the test may kill and restart."""
    try:
        server = servers.start_falkordb(tmp_path / "own-falkordb", reuse=False)
    except RuntimeError as exc:
        servers.unavailable(str(exc))
    yield server
    server.stop()
