"""A rebuild refuses only on real loss: an unreadable file blocks no switch, a lost document does.

Before, `rebuild` refused whenever any document failed, so one file unreadable in the live generation too
blocked every rebuild for as long as it existed. Now the new generation's failures are judged against the
live one (`unichunk.flows.rebuild.sort_failures`): unreadable in both (or absent from the live one) is reported;
held by the live generation and failed in the new one is loss, and refuses.

Real stores (Qdrant local, BM25, FalkorDB from the session server), MiniLM and spaCy; flows on the
session's Prefect server. Generation A is token_window, B sentence chunking, as in
test_pipeline_generations.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from unichunk.chunking.config import ChunkStrategy
from unichunk.engine.params import IngestParams, RebuildParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.flows.rebuild import rebuild
from unichunk.index.generations import live_status
from unichunk.index.registry import GenerationRegistry
from unichunk.index.run import RunConfig
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks

A = ChunkStrategy(name="token_window")
B = ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=0)
GOOD = {
    "qdrant.txt": "Qdrant stores one vector per chunk. Operators check its collection before a run.\n",
    "bm25.md": "# BM25\n\nThe keyword index scores chunks by term frequency. It is rebuilt in memory.\n",
    "graph.txt": "FalkorDB holds the knowledge graph. Chen Wei reviews its entities every week.\n",
}
INVALID_UTF8 = b"Was readable, now \xff\xfe not UTF-8\n"


def _write_corpus(root: Path) -> Path:
    root.mkdir(parents=True)
    for name, text in GOOD.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def _generation_of(strategy: ChunkStrategy) -> str:
    return RunConfig(strategy, SinkSettings(), SINK_NAMES).generation_id


def _live() -> str:
    live = GenerationRegistry.of(SinkSettings()).live()
    assert live is not None
    return live.generation_id


def _rebuild(root: Path, strategy: ChunkStrategy):
    state = rebuild(RebuildParams(source=SourceParams(root=str(root)), strategy=strategy), return_state=True)
    return state, state.result(raise_on_failure=False)


def _held(generation: str) -> dict[str, set[str]]:
    sinks = get_sinks(SINK_NAMES, SinkSettings().for_generation(generation))
    return {name: sink.chunk_ids() for name, sink in sinks.items()}


@pytest.mark.timeout(900)
def test_a_file_unreadable_in_both_generations_is_reported_and_the_rebuild_switches(pipeline_env, tmp_path):
    root = _write_corpus(tmp_path / "corpus")
    (root / "broken.txt").write_bytes(INVALID_UTF8)
    params = IngestParams(source=SourceParams(root=str(root)), strategy=A)
    state = ingest(params, return_state=True)
    assert state.is_failed() and "1 document(s) failed" in state.message  # its first run reports it
    assert ingest(params, return_state=True).is_completed()  # then it is known unreadable

    state, summary = _rebuild(root, B)
    assert state.is_completed(), state.message
    assert summary.outcome == "switched" and summary.reasons == []
    assert (
        [d.source_id for d in summary.reported] == ["broken.txt"] and not summary.lost and not summary.failed
    )
    assert (
        summary.reported[0].error.startswith("load failed: ")
        and "not valid utf-8" in summary.reported[0].error
    )
    assert "1 unreadable document(s) reported" in summary.line() and "broken.txt" in summary.line()
    assert [f.source_id for f in summary.build.failed] == ["broken.txt"]  # new in this generation's table
    assert [u.source_id for u in summary.catch_up.unreadable] == ["broken.txt"]  # and known after that
    assert summary.counts["new"]["processed"] == summary.counts["live"]["processed"] == len(GOOD)
    gen_b = _generation_of(B)
    assert _live() == gen_b
    expected = live_status(SinkSettings(data_dir=pipeline_env)).expected_chunk_ids()
    assert expected and _held(gen_b) == dict.fromkeys(SINK_NAMES, expected)
    rows = {r.source_id: r.state for r in live_status(SinkSettings(data_dir=pipeline_env)).rows()}
    assert rows == {name: "processed" for name in GOOD} | {"broken.txt": "failed"}


@pytest.mark.timeout(900)
def test_a_document_the_live_generation_holds_that_fails_in_the_new_one_refuses_the_switch(
    pipeline_env, tmp_path
):
    root = _write_corpus(tmp_path / "corpus")
    params = IngestParams(source=SourceParams(root=str(root)), strategy=A)
    assert ingest(params, return_state=True).is_completed()
    gen_a, gen_b = _generation_of(A), _generation_of(B)
    held_a = _held(gen_a)
    (root / "graph.txt").write_bytes(INVALID_UTF8)  # unreadable now, held by the live generation

    state, summary = _rebuild(root, B)
    assert state.is_failed() and summary.outcome == "refused"
    assert [d.source_id for d in summary.lost] == ["graph.txt"] and not summary.reported
    assert any("(real loss): graph.txt" in reason for reason in summary.reasons), summary.reasons
    assert _live() == gen_a and _held(gen_a) == held_a  # the live generation is untouched
    assert GenerationRegistry.of(SinkSettings()).get(gen_b).state == "failed"

    # The file is fixed: the resumed rebuild reads it again (it changed), loses nothing, and switches.
    (root / "graph.txt").write_text(GOOD["graph.txt"] + "Edited since.\n", encoding="utf-8")
    state, summary = _rebuild(root, B)
    assert state.is_completed(), state.message
    assert summary.outcome == "switched" and not summary.lost and not summary.reported
    assert summary.build.processed == 1 and _live() == gen_b
