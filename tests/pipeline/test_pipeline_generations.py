"""Index generations against real stores: rebuild beside the live index, queries during it, cutover,
refusal on a broken sink, rollback, drop, and a changed-settings ingest that must not skip or mix.

Stores: Qdrant local mode and BM25 under the test's data dir, FalkorDB from the session server, MiniLM and
spaCy; flows run on the session's Prefect server. Generation A is token_window (each short document is
one chunk), generation B is sentence chunking at 128 tokens (several chunks per document), so every chunk
ID says which generation it came from.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from falkordb import FalkorDB
from typer.testing import CliRunner

from unichunk import Pipeline
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.sources import default_source_name
from unichunk.deployments.cli.main import app
from unichunk.engine.params import IngestParams, RebuildParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.flows.rebuild import rebuild
from unichunk.flows.switch import drop_generation_now, switch_generation
from unichunk.index.chunk_cache import ChunkCache, ChunkKey
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.registry import GenerationRegistry
from unichunk.index.run import RunConfig
from unichunk.retrieval.ranking import retrieve
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.device import cpu_has_bf16
from unichunk.sinks.pool import get_sinks

A = ChunkStrategy(name="token_window")
B = ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=0)
TOPICS = ["Qdrant", "BM25", "FalkorDB", "Prefect", "Prometheus", "tiktoken"]


def _write_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for n, topic in enumerate(TOPICS):
        sentences = [
            f"Note {n} is about {topic} and how the ingestion pipeline uses it every night.",
            f"Operators of {topic} check its metrics before each scheduled re-index run starts.",
            f"When {topic} is slow, the summary of the run names the documents that waited.",
        ]
        paragraphs = [
            " ".join(f"{s} Detail {p}.{k} of {topic}." for k, s in enumerate(sentences)) for p in range(4)
        ]
        (root / f"note_{n}.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return root


def _expected_ids(root: Path, strategy: ChunkStrategy) -> set[str]:
    """The chunk IDs `strategy` gives the corpus, computed by the chunking library alone."""
    service = ChunkingService()
    ids: set[str] = set()
    for path in sorted(root.glob("*.txt")):
        document = Document(
            text=path.read_text(encoding="utf-8"),
            document_id=derive_document_id(source_system=default_source_name(root), source_id=path.name),
            source_system=default_source_name(root),
            source_id=path.name,
            path=str(path),
        )
        ids |= {c.chunk_id for c in service.chunk(document, strategy)}
    return ids


def _registry() -> GenerationRegistry:
    return GenerationRegistry.of(SinkSettings())


def _generation_of(strategy: ChunkStrategy) -> str:
    return RunConfig(strategy, SinkSettings(), SINK_NAMES).generation_id


def _answer(query: str) -> set[str]:
    """What a reader gets: the live generation's sinks, resolved the way the CLI and /search do."""
    sinks = get_sinks(("keywords", "vectors"), reading_settings(SinkSettings()))
    return {hit.chunk_id for hit in retrieve(sinks, query, 5).hits}


def _held(generation: str) -> dict[str, set[str]]:
    sinks = get_sinks(SINK_NAMES, SinkSettings().for_generation(generation))
    return {name: sink.chunk_ids() for name, sink in sinks.items()}


def _ingest(root: Path, strategy: ChunkStrategy):
    state = ingest(IngestParams(source=SourceParams(root=str(root)), strategy=strategy), return_state=True)
    return state, state.result(raise_on_failure=False)


def _rebuild(root: Path, strategy: ChunkStrategy, **options):
    params = RebuildParams(source=SourceParams(root=str(root)), strategy=strategy, **options)
    state = rebuild(params, return_state=True)
    return state, state.result(raise_on_failure=False)


@pytest.fixture
def corpus(tmp_path) -> Path:
    return _write_corpus(tmp_path / "corpus")


@pytest.mark.timeout(900)
def test_rebuild_serves_the_old_generation_until_a_verified_cutover_then_rolls_back(pipeline_env, corpus):
    ids_a, ids_b = _expected_ids(corpus, A), _expected_ids(corpus, B)
    assert len(ids_b) > len(ids_a) == len(TOPICS) and not ids_a & ids_b
    state, _ = _ingest(corpus, A)
    assert state.is_completed(), state.message
    gen_a, gen_b = _generation_of(A), _generation_of(B)
    assert _registry().live().generation_id == gen_a
    assert _answer("Prometheus metrics") <= ids_a

    answers: list[tuple[str | None, set[str]]] = []  # (state of B when asked, answer)
    errors: list[BaseException] = []
    done = threading.Event()

    def keep_querying() -> None:
        while not done.is_set():
            try:
                # B's state read after the answer too: the switch may land between the first read and the
                # search, and then the new generation answers, rightly. Still building after, it had not.
                before = _registry().get(gen_b)
                answer = _answer("how is FalkorDB checked before a run")
                after = _registry().get(gen_b)
                states = {g.state if g else None for g in (before, after)}
                answers.append((states.pop() if len(states) == 1 else "switching", answer))
            except BaseException as exc:  # any error during the rebuild fails the test
                errors.append(exc)
            time.sleep(0.05)

    reader = threading.Thread(target=keep_querying, daemon=True)
    reader.start()
    try:
        state, summary = _rebuild(corpus, B)
    finally:
        done.set()
        reader.join(timeout=60)
    assert state.is_completed(), state.message
    assert not errors, errors
    assert summary.outcome == "switched" and summary.previous == gen_a and summary.generation == gen_b
    during = [answer for gen_state, answer in answers if gen_state == "building"]
    assert during, "no query ran while the new generation was being built"
    assert all(answer and answer <= ids_a for answer in during)  # only the old generation answered
    assert summary.counts["new"]["processed"] == summary.counts["live"]["processed"] == len(TOPICS)
    assert summary.counts["new"]["chunks"] == len(ids_b)

    registry = _registry()
    assert registry.live().generation_id == gen_b
    assert registry.get(gen_a).state == "retired" and registry.get(gen_a).drop_after
    answer = _answer("how is FalkorDB checked before a run")
    assert answer and answer <= ids_b
    assert _held(gen_b) == dict.fromkeys(SINK_NAMES, ids_b)  # every store: the new strategy's IDs only
    assert _held(gen_a) == dict.fromkeys(SINK_NAMES, ids_a)  # the old generation is kept, intact
    sinks_b = get_sinks(SINK_NAMES, SinkSettings().for_generation(gen_b))
    vectors = sinks_b["vectors"]
    assert {c.extra["generation"] for c in vectors.get_chunks(ids_b).values()} == {
        gen_b
    }  # each chunk records it
    graph_rows = sinks_b["graph"].backend.run(
        "MATCH (c:Chunk) RETURN DISTINCT c.generation AS g", write=False
    )
    assert graph_rows == [{"g": gen_b}]
    assert vectors.alias_target(SinkSettings().qdrant_collection) == vectors.collection
    assert (
        live_status(SinkSettings(data_dir=pipeline_env)).expected_chunk_ids() == ids_b
    )  # readers follow the switch
    shown = CliRunner().invoke(app, ["status"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    # not a terminal: tab-separated rows (generation, state, fingerprint, settings, documents, since / until)
    rows = {row[0]: row for row in (line.split("\t") for line in shown.output.splitlines())}
    assert rows[gen_b][1] == "live" and "sentence 128/0" in rows[gen_b][3]
    assert rows[gen_a][1] == "retired" and rows[gen_a][5].startswith("kept until")
    assert "token_window" in rows[gen_a][3]

    # Roll back: A is verified and made live again; B is retained in turn.
    result = switch_generation(return_state=True).result()
    assert result == {"live": gen_a, "previous": gen_b, "switched": True}
    assert _registry().live().generation_id == gen_a and _registry().get(gen_b).state == "retired"
    assert _answer("Prometheus metrics") <= ids_a
    vectors_a = get_sinks(["vectors"], SinkSettings().for_generation(gen_a))["vectors"]
    assert vectors_a.alias_target(SinkSettings().qdrant_collection) == vectors_a.collection

    # Dropping B removes its collection, BM25 file, graph, status and cached chunks, and forgets it.
    chunk_store = ChunkCache.of(SinkSettings(data_dir=pipeline_env))
    note = corpus / "note_0.txt"
    key = ChunkKey(
        derive_document_id(source_system=default_source_name(corpus), source_id=note.name),
        Document(text=note.read_text(encoding="utf-8")).content_hash,
        "",
    )
    cached = {
        s.name: replace(key, fingerprint=RunConfig(s, SinkSettings()).chunk_fingerprint) for s in (A, B)
    }
    assert all(chunk_store.has(k) for k in cached.values())
    assert drop_generation_now(gen_b) == gen_b
    assert chunk_store.has(cached["token_window"]) and not chunk_store.has(cached["sentence"])
    pinned = SinkSettings().for_generation(gen_b)
    assert _registry().get(gen_b) is None
    assert not pinned.generation_dir.exists()
    assert not pinned.qdrant_path.exists()  # the local Qdrant storage went with the generation's directory
    assert pinned.graph_key not in FalkorDB.from_url(SinkSettings().falkordb_url).list_graphs()
    assert (
        SinkSettings(generation=gen_a).graph_key
        in FalkorDB.from_url(SinkSettings().falkordb_url).list_graphs()
    )
    assert _held(gen_a) == dict.fromkeys(SINK_NAMES, ids_a)


@pytest.mark.timeout(900)
def test_a_rebuild_with_a_broken_sink_does_not_switch_and_a_rerun_resumes(pipeline_env, corpus, monkeypatch):
    assert _ingest(corpus, A)[0].is_completed()
    gen_a, gen_b = _generation_of(A), _generation_of(B)
    ids_a, ids_b = _expected_ids(corpus, A), _expected_ids(corpus, B)
    keywords_b = get_sinks(["keywords"], SinkSettings().for_generation(gen_b))["keywords"]
    real_write = keywords_b.write

    def lossy_write(prepared):  # reports success but loses a document: only the alignment check can tell
        written = real_write(prepared)
        keywords_b.delete(sorted(prepared.chunks)[0])
        return written

    with monkeypatch.context() as patch:
        patch.setattr(keywords_b, "write", lossy_write)
        state, summary = _rebuild(corpus, B)
    assert state.is_failed() and summary.outcome == "refused"
    assert any("alignment" in reason for reason in summary.reasons), summary.reasons
    assert _registry().live().generation_id == gen_a and _registry().get(gen_b).state == "failed"
    assert _answer("Prometheus metrics") <= ids_a
    assert _held(gen_a) == dict.fromkeys(SINK_NAMES, ids_a)

    # The sink is fixed; a re-run resumes (nothing is chunked again) and repairs.
    state, summary = _rebuild(corpus, B)
    assert state.is_completed(), state.message
    assert summary.outcome == "switched" and summary.build.chunked == 0 and summary.build.processed == 0
    assert summary.repaired and summary.repaired["rewritten"].get("keywords")
    assert _registry().live().generation_id == gen_b
    assert _held(gen_b) == dict.fromkeys(SINK_NAMES, ids_b)


@pytest.mark.timeout(600)
def test_changed_settings_without_a_rebuild_are_refused_not_skipped_or_mixed(pipeline_env, corpus):
    assert _ingest(corpus, A)[0].is_completed()
    gen_a = _generation_of(A)
    ids_a = _expected_ids(corpus, A)
    rows_before = {
        r.document_id: r.as_dict() for r in live_status(SinkSettings(data_dir=pipeline_env)).rows()
    }

    state, result = _ingest(corpus, B)
    assert state.is_failed()
    assert "rebuild" in str(result) and "chunking.name: 'token_window' -> 'sentence'" in str(result)
    assert {
        r.document_id: r.as_dict() for r in live_status(SinkSettings(data_dir=pipeline_env)).rows()
    } == rows_before
    assert _held(gen_a) == dict.fromkeys(SINK_NAMES, ids_a)
    assert [g.generation_id for g in _registry().all()] == [gen_a]

    # The same settings again: every document is current and skipped, as before.
    state, summary = _ingest(corpus, A)
    assert state.is_completed() and summary.skipped == len(TOPICS) and summary.processed == 0
    refused = CliRunner().invoke(app, ["generations", "drop", gen_a], env={"COLUMNS": "250"})
    assert refused.exit_code == 2 and "is live" in refused.output  # the live index is never dropped
    assert _held(gen_a) == dict.fromkeys(SINK_NAMES, ids_a)


def test_auto_keeps_the_live_indexs_embedder_and_a_new_index_gets_the_machines(
    pipeline_env, corpus, tmp_path
):
    """`UNICHUNK_EMBEDDING_BACKEND=auto` (the default) never turns an existing index into a mismatch: an
    index of torch's fp32 vectors takes updates and answers queries as fp32 where this machine would choose
    bfloat16; a new data dir gets this machine's choice (bf16 on a CPU with bf16 instructions)."""
    with Pipeline(SinkSettings(embedding_backend="torch")) as pipeline:
        first = pipeline.ingest(corpus)
    assert first.processed == len(TOPICS) and not first.failed
    (live,) = _registry().all()
    assert "embedding_variant" not in live.description
    (corpus / "note_0.txt").write_text("Qdrant keeps the vectors of every chunk.\n", encoding="utf-8")
    with Pipeline() as pipeline:  # auto
        edited = pipeline.ingest(corpus)
        hits = pipeline.search("Qdrant vectors", k=3)
    assert (edited.processed, edited.skipped, edited.failed) == (1, len(TOPICS) - 1, [])
    assert [g.generation_id for g in _registry().all()] == [live.generation_id]
    assert hits.hits and reading_settings(SinkSettings()).minilm_backend() == "torch"

    fresh = SinkSettings(data_dir=tmp_path / "fresh", graph_name=f"fresh_{live.generation_id}")
    with Pipeline(fresh) as pipeline:
        assert pipeline.ingest(corpus).processed == len(TOPICS)
    variant = GenerationRegistry.of(fresh).live().description.get("embedding_variant")
    assert variant == ("bf16" if cpu_has_bf16() else None)
