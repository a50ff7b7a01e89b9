"""Server mode (UNICHUNK_DATABASE_URL): the flows keep every record in PostgreSQL and none under the data dir.

The ingest test writes the keyword index (its terms in PostgreSQL) and the graph (FalkorDB is the
session's server), so it proves the data dir stays empty: a worker with a Qdrant server (which cannot run
here) and a database writes nothing on its disk. The rebuild test writes every sink, so the embedded vector
store does write under the data dir, but no record does; dropping a generation drops its schemas. A database that does not answer is one line
and exit 3 in the CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from unichunk.chunking.config import ChunkStrategy
from unichunk.engine.params import IngestParams, RebuildParams, SourceParams
from unichunk.flows.documents import delete_document
from unichunk.flows.ingest import ingest
from unichunk.flows.rebuild import rebuild
from unichunk.flows.switch import drop_generation_now, switch_generation
from unichunk.index.alignment import verify_alignment
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.registry import GenerationRegistry
from unichunk.index.run import RunConfig
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks

SERVER_SINKS = ["keywords", "graph"]  # every sink but the vectors, which have no server here
RECORD_FILES = (
    "status.sqlite3",
    "chunks.sqlite3",
    "generations.sqlite3",
    "leases.sqlite3",
    "sources.sqlite3",
    "result_cache.sqlite3",
)


def _ingest(corpus: Path, **options):  # type: ignore[no-untyped-def]
    state = ingest(IngestParams(source=SourceParams(root=str(corpus)), **options), return_state=True)
    assert state.is_completed(), state.message
    return state.result()


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'unichunk%'"
        )
        return {row[0] for row in rows}


def _files(data_dir: Path) -> list[str]:
    return (
        sorted(p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*")) if data_dir.exists() else []
    )


@pytest.mark.timeout(600)
def test_ingest_reingest_delete_and_verify_keep_nothing_in_the_data_dir(
    pipeline_env, server_records, corpus, doc_id
):
    first = _ingest(corpus, sinks=SERVER_SINKS)
    assert (first.processed, first.failed) == (3, [])
    assert (_ingest(corpus, sinks=SERVER_SINKS).processed, _ingest(corpus, sinks=SERVER_SINKS).skipped) == (
        0,
        3,
    )

    (corpus / "guide.md").write_text("# Guide\n\nEdited: the records now live in PostgreSQL.\n")
    (corpus / "notes/page.html").unlink()
    changed = _ingest(corpus, sinks=SERVER_SINKS)
    assert (changed.processed, changed.skipped, changed.deleted) == (1, 1, 1)
    state = delete_document(doc_id("notes/plain.txt"), sinks=SERVER_SINKS, return_state=True)
    assert state.is_completed(), state.message

    rows = live_status(SinkSettings()).rows()
    assert [r.source_id for r in rows] == ["guide.md"] and rows[0].state == "processed"
    sinks = get_sinks(SERVER_SINKS, reading_settings(SinkSettings()))
    assert sinks["graph"].chunk_ids() == sinks["keywords"].chunk_ids() == set(rows[0].chunk_ids)
    assert verify_alignment(sinks, expected=live_status(SinkSettings()).expected_chunk_ids()).ok
    live = GenerationRegistry.of(SinkSettings()).live()
    assert live is not None
    assert _schemas(server_records) == {
        "unichunk",
        "unichunk_chunk_cache",
        "unichunk_result_cache",  # the graph's extractions by (extractor, text): outlives generations
        f"unichunk__{live.generation_id}",
        f"unichunk_keywords__{live.generation_id}",
    }
    assert _files(pipeline_env) == []  # no record, lock, cache or directory on this worker's disk


@pytest.mark.timeout(900)
def test_rebuild_switch_and_drop_keep_records_in_the_database(pipeline_env, server_records, corpus):
    a, b = ChunkStrategy(name="token_window"), ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=0)
    _ingest(corpus, strategy=a)
    gen_a, gen_b = (RunConfig(s, SinkSettings(), SINK_NAMES).generation_id for s in (a, b))
    state = rebuild(RebuildParams(source=SourceParams(root=str(corpus)), strategy=b), return_state=True)
    assert state.is_completed(), state.message
    summary = state.result()
    assert (summary.outcome, summary.previous, summary.generation) == ("switched", gen_a, gen_b)
    registry = GenerationRegistry.of(SinkSettings())
    assert registry.live().generation_id == gen_b and registry.get(gen_a).state == "retired"
    assert live_status(SinkSettings()).counts()["processed"] == 3

    assert switch_generation(return_state=True).result() == {
        "live": gen_a,
        "previous": gen_b,
        "switched": True,
    }
    assert {f"unichunk__{gen_a}", f"unichunk__{gen_b}"} <= _schemas(server_records)
    assert drop_generation_now(gen_b) == gen_b
    gone = {f"unichunk__{gen_b}", f"unichunk_keywords__{gen_b}"}
    assert not gone & _schemas(server_records)  # its schemas went, every table in them
    assert registry.get(gen_b) is None and registry.live().generation_id == gen_a
    assert live_status(SinkSettings()).counts()["processed"] == 3
    # The embedded vector store is files (it stays embedded); no record and no keyword term is.
    left = _files(pipeline_env)
    assert left and not [
        f for f in left if f.rsplit("/", 1)[-1] in RECORD_FILES or "webhook" in f or "bm25" in f
    ]
    assert not (pipeline_env / "generations" / gen_b).exists()


def _cli(data_dir: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ) | {"UNICHUNK_DATA_DIR": str(data_dir), "UNICHUNK_DATABASE_URL": url}
    env.pop("UNICHUNK_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "unichunk.deployments.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.timeout(600)
def test_a_database_that_is_down_or_refuses_is_one_line_and_exit_3(
    tmp_path, postgres_server_url, prefect_api_url, corpus
):
    import servers

    down = f"postgresql://unichunk:s3cret@127.0.0.1:{servers.free_port()}/nothing"
    for command in (["status"], ["search", "x"], ["ingest", str(corpus), "--sink", "graph"]):
        result = _cli(tmp_path / "data", down, *command)
        assert result.returncode == 3, (command, result.stdout, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(
            "error: the database of UNICHUNK_DATABASE_URL (postgresql://unichunk:***@127.0.0.1:"
        )
        assert "is unreachable" in line and "s3cret" not in line and "Traceback" not in result.stderr
    missing = postgres_server_url.rsplit("/", 1)[0] + "/no_such_database"
    result = _cli(tmp_path / "data", missing, "status")
    assert result.returncode == 3, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "UNICHUNK_DATABASE_URL" in line and "refused" in line and "no_such_database" in line
    assert _files(tmp_path / "data") == []
