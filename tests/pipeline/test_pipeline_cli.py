"""The `unichunk` CLI through typer's CliRunner, on real stores and the session's Prefect server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from unichunk.deployments.cli.main import app
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks, release_sinks
from unichunk.sinks.vectors.sink import point_id

runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def ingested(pipeline_env, corpus):
    result = _cli("ingest", str(corpus))
    assert result.exit_code == 0, result.output
    assert "3 processed" in result.output
    return corpus


def test_status_verify_and_search(ingested, pipeline_env, doc_id):
    result = _cli("status")
    assert result.exit_code == 0, result.output
    assert "processed: 3" in result.output and "failed: 0" in result.output
    # not a terminal: one tab-separated line per document, its ID whole (no ellipsis, no wrapping)
    rows = [line.split("\t") for line in result.output.splitlines()]
    for name in ("notes/plain.txt", "guide.md"):
        assert [doc_id(name), name, "processed"] in [row[:3] for row in rows], result.output

    result = _cli("verify")
    assert result.exit_code == 0, result.output
    assert "aligned" in result.output

    result = _cli("search", "keyword", "overlap", "BM25", "ranks", "-k", "2")  # unquoted words: one query
    assert result.exit_code == 0, result.output
    plain = doc_id("notes/plain.txt")
    first_hit = next(line for line in result.output.splitlines() if line.startswith("1. "))
    assert plain in first_hit and "keywords#1" in first_hit
    assert "notes/plain.txt [0:" in result.output
    assert "2. " in result.output and "3. " not in result.output


def test_verify_exits_1_on_a_missing_point(ingested, pipeline_env):
    settings = reading_settings(SinkSettings())
    vectors = get_sinks(["vectors"], settings)["vectors"]
    victim = sorted(live_status(SinkSettings(data_dir=pipeline_env)).expected_chunk_ids())[0]
    vectors._store_delete([point_id(victim)])  # engine-neutral (qdrant-edge or qdrant-client)
    release_sinks(["vectors"], settings)  # the CLI opens its own (Qdrant local mode: one client per dir)
    result = _cli("verify")
    assert result.exit_code == 1
    assert f"vectors: missing {victim}" in result.output and "1 mismatch" in result.output


def test_failed_documents_show_in_status_and_fail_ingest(pipeline_env, corpus, doc_id):
    (corpus / "broken.txt").write_bytes(b"\xc3\x28 not utf-8 \xff")
    result = _cli("ingest", str(corpus))
    assert result.exit_code == 1
    assert "1 failed" in result.output and "broken.txt" in result.output
    result = _cli("status", "--failed")
    assert result.exit_code == 0 and "failed: 1" in result.output
    assert doc_id("broken.txt")[:10] in result.output


def test_dry_run_and_delete(ingested, pipeline_env, doc_id):
    (ingested / "guide.md").unlink()
    result = _cli("ingest", str(ingested), "--dry-run")
    assert result.exit_code == 0 and "would delete   guide.md" in result.output
    guide = doc_id("guide.md")
    result = _cli("delete", guide)
    assert result.exit_code == 0, result.output
    assert live_status(SinkSettings(data_dir=pipeline_env)).get(guide) is None
    held = {
        name: sink.chunk_ids()
        for name, sink in get_sinks(SINK_NAMES, reading_settings(SinkSettings())).items()
    }
    assert not any(cid.startswith(guide) for ids in held.values() for cid in ids)


def test_user_mistakes_print_one_line(pipeline_env, tmp_path):
    result = _cli("ingest", str(tmp_path / "nowhere"))
    assert result.exit_code == 2
    assert result.output.strip() == f"error: no such file or directory: {tmp_path / 'nowhere'}"
    result = _cli("ingest", str(tmp_path), "--strategy", "bogus")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().startswith("error: --strategy: 'bogus' is not one of auto, token_window")
    result = _cli("delete", "doc_0000000000000000")
    assert result.exit_code == 1 and "no such document: doc_0000000000000000" in result.output
