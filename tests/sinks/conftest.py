"""Graph-sink fixtures: one graph per test on the session's FalkorDB server, or on Neo4j when NEO4J_URI is set.

The graph tests run once per backend; the Neo4j run is skipped unless a server is given, because none can
run on this machine. Its database is wiped of Chunk/Entity/Document nodes around every test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from unichunk.sinks.graph.backends import FalkorDBBackend, GraphBackend, Neo4jBackend


@pytest.fixture(params=["falkordb", "neo4j"])
def graph_backend(request: pytest.FixtureRequest) -> Iterator[GraphBackend]:
    if request.param == "falkordb":
        url = request.getfixturevalue("falkordb_url")
        backend: GraphBackend = FalkorDBBackend(url, f"test_{uuid.uuid4().hex[:12]}")
    else:
        uri = os.environ.get("NEO4J_URI")
        if not uri:
            pytest.skip(
                "NEO4J_URI is not set (no Neo4j server can run here); set it to run the suite on Neo4j"
            )
        backend = Neo4jBackend(
            uri,
            os.environ.get("NEO4J_USER", "neo4j"),
            os.environ.get("NEO4J_PASSWORD"),
            os.environ.get("NEO4J_DATABASE"),
        )
    backend.clear()
    yield backend
    backend.clear()
    backend.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def keyword_settings(request: pytest.FixtureRequest, tmp_path) -> Iterator:  # type: ignore[no-untyped-def]
    """Settings for the keyword store on each backend: the embedded SQLite file under a fresh data dir, or
    server mode on a fresh PostgreSQL database (`database_url`)."""
    from pydantic import SecretStr

    from unichunk.sinks.config import SinkSettings
    from unichunk.sinks.database import dispose_engines

    if request.param == "sqlite":
        yield SinkSettings(data_dir=tmp_path / "data")
    else:
        url = request.getfixturevalue("database_url")
        yield SinkSettings(data_dir=tmp_path / "data", database_url=SecretStr(url))
    dispose_engines()  # the per-test database is dropped after the test: no pooled connection may linger
