"""The generation registry's state machine, physical store names, and Neo4j's per-generation labels."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from unichunk.index.errors import GenerationError
from unichunk.index.generations import drop_generation, reading_settings
from unichunk.index.registry import GenerationRegistry
from unichunk.index.run import generation_id_for
from unichunk.sinks.graph.backends import namespaced_labels


def test_reading_a_registry_that_does_not_exist_creates_nothing(records_settings):
    registry = GenerationRegistry.of(records_settings)
    assert registry.live() is None and registry.all() == [] and registry.expired() == []
    assert not records_settings.data_dir.exists()
    assert reading_settings(records_settings) is records_settings  # nothing live: the generation-less names


def test_concurrent_first_ingests_agree_on_one_live_generation(records_settings):
    registry = GenerationRegistry.of(records_settings)
    results: list[str] = []

    def bootstrap(fingerprint: str) -> None:
        results.append(registry.bootstrap(generation_id_for(fingerprint), fingerprint, {}).generation_id)

    threads = [threading.Thread(target=bootstrap, args=(f"{n:016x}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    live = registry.live()
    assert live is not None and set(results) == {live.generation_id}
    assert [g.state for g in registry.all()] == ["live"]


def test_build_switch_retire_expire_and_forget(records_settings):
    registry = GenerationRegistry.of(records_settings)
    old = registry.bootstrap("gold", "f-old", {"chunking": {"name": "token_window"}})
    with pytest.raises(GenerationError, match="already live"):
        registry.begin_build("gold", "f-old", {}, 3)
    new = registry.begin_build("gnew", "f-new", {"chunking": {"name": "sentence"}}, 3)
    assert (new.state, new.listed) == ("building", 3) and registry.live() == old
    assert [g.generation_id for g in registry.in_progress()] == ["gnew"]

    registry.mark_failed("gnew", "2 document(s) failed")
    assert registry.get("gnew").state == "failed" and registry.get("gnew").last_error
    assert registry.begin_build("gnew", "f-new", {}, 4).state == "building"  # a re-run resumes it
    assert registry.get("gnew").last_error is None

    previous = registry.switch_live("gnew", timedelta(hours=2))
    assert previous is not None and previous.generation_id == "gold"
    assert registry.live().generation_id == "gnew"
    retired = registry.get("gold")
    assert retired.state == "retired" and retired.retired_at and retired.drop_after > retired.retired_at
    assert registry.expired() == []
    assert [g.generation_id for g in registry.expired(datetime.now(UTC) + timedelta(hours=3))] == ["gold"]
    assert registry.switch_live("gnew", timedelta(0)) is None  # already live: nothing changes

    registry.forget("gnew")  # the live generation is never forgotten
    assert registry.live().generation_id == "gnew"
    registry.forget("gold")
    assert registry.get("gold") is None
    with pytest.raises(GenerationError, match="no generation"):
        registry.switch_live("gold", timedelta(0))


def test_a_switch_is_one_transaction_so_exactly_one_generation_is_ever_live(records_settings):
    registry = GenerationRegistry.of(records_settings)
    registry.bootstrap("ga", "fa", {})
    registry.begin_build("gb", "fb", {}, 1)
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(sum(g.state == "live" for g in registry.all()))

    watcher = threading.Thread(target=watch)
    watcher.start()
    for n in range(20):
        registry.switch_live("gb" if n % 2 == 0 else "ga", timedelta(hours=1))
    stop.set()
    watcher.join()
    assert seen and set(seen) == {1}


def test_each_generation_names_its_own_stores(records_settings):
    tmp_path = records_settings.data_dir
    base = records_settings.model_copy(update={"qdrant_collection": "chunks", "graph_name": "kg"})
    assert (base.collection_name, base.graph_key, base.generation_dir) == ("chunks", "kg", None)
    pinned = base.for_generation("g0123456789")
    assert pinned.collection_name == "chunks__g0123456789" and pinned.graph_key == "kg__g0123456789"
    assert pinned.bm25_path == tmp_path / "generations" / "g0123456789" / "bm25"
    # local mode: a directory per generation, so a rebuild does not lock readers of the live one out
    assert pinned.qdrant_path == tmp_path / "generations" / "g0123456789" / "qdrant" != base.qdrant_path
    GenerationRegistry.of(base).bootstrap("g0123456789", "f", {})
    assert reading_settings(base).generation == "g0123456789"
    assert reading_settings(base.for_generation("gother")).generation == "gother"  # pinned stays pinned


def test_neo4j_generations_live_under_their_own_labels():
    query = (
        "MATCH (c:Chunk {chunk_id: $id})<-[:MENTIONED_IN]-(e:Entity)-[:RELATED]-(:Entity) "
        "MERGE (d:Document {document_id: 'x'})-[:FROM_DOCUMENT]->(c) WHERE n:Chunk OR n:Entity"
    )
    renamed = namespaced_labels(query, "g1")
    assert renamed == (
        "MATCH (c:Chunk_g1 {chunk_id: $id})<-[:MENTIONED_IN]-(e:Entity_g1)-[:RELATED]-(:Entity_g1) "
        "MERGE (d:Document_g1 {document_id: 'x'})-[:FROM_DOCUMENT]->(c) WHERE n:Chunk_g1 OR n:Entity_g1"
    )
    assert namespaced_labels(query, None) == query


def test_dropping_a_generation_that_does_not_exist_is_refused(records_settings):
    GenerationRegistry.of(records_settings).bootstrap("glive", "f", {})
    with pytest.raises(GenerationError, match="no generation gxyz"):
        drop_generation(records_settings, "gxyz")
    with pytest.raises(GenerationError, match="is live"):
        drop_generation(records_settings, "glive")
    assert [g.generation_id for g in GenerationRegistry.of(records_settings).all()] == ["glive"]
