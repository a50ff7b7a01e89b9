"""The access tests' shared checks (`access_checks`), importable by every door's test."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # for access_checks


import uuid
from collections.abc import Iterator

import pytest
from access_checks import ACCESS_CORPUS, Index
from pydantic import SecretStr

from unichunk import Pipeline
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.sinks.config import SinkSettings


@pytest.fixture(scope="module", params=["embedded", "postgresql"])
def access_index(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    falkordb_url: str,
    prefect_api_url: str,
) -> Iterator[Index]:
    """`ACCESS_CORPUS` ingested once per module and records backend (the embedded SQLite files, then server
    mode: records and keyword index in a fresh PostgreSQL database), each document with its own labels
    (`Document.metadata`), in fixed-size small chunks so every document has several and neighbours matter."""
    from unichunk.sinks.database import dispose_engines
    from unichunk.sinks.pool import close_all_sinks

    data = tmp_path_factory.mktemp("access") / "data"
    database = (
        _database(request.getfixturevalue("postgres_server_url")) if request.param == "postgresql" else None
    )
    base = SinkSettings(
        data_dir=data,
        falkordb_url=falkordb_url,
        graph_name=f"access_{uuid.uuid4().hex[:12]}",
        database_url=SecretStr(database[1]) if database else None,
    )
    strategy = ChunkStrategy(name="fixed_chars", chunk_size=240, chunk_overlap=0)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("PUSHGATEWAY_URL", raising=False)
        if database:  # code that reads the environment agrees with these settings
            env.setenv("UNICHUNK_DATABASE_URL", database[1])
        else:
            env.delenv("UNICHUNK_DATABASE_URL", raising=False)
        pipeline = Pipeline(base, strategy=strategy)
        documents = [
            Document(text=d.text, source_id=d.name, metadata={"labels": list(d.labels)} if d.labels else {})
            for d in ACCESS_CORPUS.documents
        ]
        summary = pipeline.ingest(documents, source_name="acl")
        assert summary.failed == [] and summary.processed == len(documents), summary
        names = {row.source_id: row.document_id for row in pipeline.status().documents}
        ACCESS_CORPUS.ids.update({d.name: names[d.name] for d in ACCESS_CORPUS.documents})
        ACCESS_CORPUS.server_root = str(data)  # inline documents are kept as files under the data dir
        assert all(row.path and row.path.startswith(str(data)) for row in pipeline.status().documents)
        yield Index(pipeline, ACCESS_CORPUS)
        pipeline.close()
        close_all_sinks()
        dispose_engines()
    if database:
        _drop(*database)


def _database(server_url: str) -> tuple[str, str]:
    """A fresh PostgreSQL database on the session's server: (server URL, its URL)."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return server_url, server_url.rsplit("/", 1)[0] + f"/{name}"


def _drop(server_url: str, database_url: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database_url.rsplit("/", 1)[1]}" WITH (FORCE)')
