"""The result cache (`unichunk.sinks.result_cache`) in the sinks that use it, on real stores: vectors and
extractions are reused for the same model and text only, a text shared by two chunks is computed once, the
cache stays within its bound, any text round-trips, and a cache that cannot be opened costs nothing but
the reuse."""

from __future__ import annotations

import itertools
import math
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.documents import make_document
from tests.sinks.test_sinks_qdrant import HashEmbedder
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.backends import GraphBackend
from unichunk.sinks.graph.extraction import (
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    SpacyExtractor,
    pack_extraction,
    unpack_extraction,
)
from unichunk.sinks.graph.sink import KnowledgeGraphSink
from unichunk.sinks.result_cache import ResultCache, text_key
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink
from unichunk.sinks.vectors.sink import _pack, _unpack

TEXTS = [
    "Ownership rules: each value has one owner, and the value is dropped when the owner goes out of scope.",
    "Borrowing lets a function use a value without taking ownership of it.",
    "Alice Smith moved from Berlin to Paris to work for Mozilla in 2019.",
    "Traits define shared behaviour in an abstract way.",
]


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting the texts it is asked to embed."""

    def __init__(self, name: str = "hash-test") -> None:
        super().__init__(dimension=16, name=name)
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed(texts)


def _stats(prepared) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    return int(prepared.stats["embedded_chunks"]), int(prepared.stats["reused_chunks"])


def test_vectors_are_reused_for_the_same_embedder_and_text_only(tmp_path: Path) -> None:
    settings = SinkSettings(data_dir=tmp_path, embedding_batch_size=3)
    doc_a, chunks_a = make_document("doc_a", TEXTS)
    doc_b, chunks_b = make_document("doc_b", [TEXTS[1], "A passage only b holds.", TEXTS[1]])
    first = CountingEmbedder()
    with EdgeQdrantSink(settings, first) as sink:
        prepared = sink.prepare([(doc_a, chunks_a)])
        assert _stats(prepared) == (4, 0) and sorted(first.texts) == sorted(TEXTS)
        sink.write(prepared)
        first.texts.clear()
        again = sink.prepare([(doc_a, chunks_a), (doc_b, chunks_b)])
        # only the text no chunk had before is embedded; doc_b's two copies of TEXTS[1] are reused
        assert first.texts == ["A passage only b holds."]
        assert _stats(again) == (1, 6) and sum(_stats(again)) == sink.write(again)
        for chunk in chunks_a:
            assert again.payload[chunk.chunk_id] == prepared.payload[chunk.chunk_id]
        assert again.payload[chunks_b[0].chunk_id] == prepared.payload[chunks_a[1].chunk_id]

    other = CountingEmbedder(name="another-model")  # another fingerprint: nothing is reused
    with EdgeQdrantSink(settings.model_copy(update={"qdrant_collection": "other"}), other) as sink:
        assert _stats(sink.prepare([(doc_a, chunks_a)])) == (4, 0) and len(other.texts) == 4


def test_a_text_two_chunks_share_is_embedded_once_in_one_batch(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    doc_a, chunks_a = make_document("doc_a", [TEXTS[0], TEXTS[2]])
    doc_b, chunks_b = make_document("doc_b", [TEXTS[2], TEXTS[0]])
    with EdgeQdrantSink(SinkSettings(data_dir=tmp_path), embedder) as sink:
        prepared = sink.prepare([(doc_a, chunks_a), (doc_b, chunks_b)])
    assert _stats(prepared) == (2, 2) and sorted(embedder.texts) == sorted([TEXTS[0], TEXTS[2]])
    assert prepared.payload[chunks_a[0].chunk_id] == prepared.payload[chunks_b[1].chunk_id]


def test_the_fingerprint_names_model_size_and_backend() -> None:
    class OtherBackend(HashEmbedder):
        backend = "quantised"

    # int8 has a fingerprint of its own: tests/sinks/test_sinks_onnx_embedder.py
    assert "all-MiniLM-L6-v2" in MiniLMEmbedder(backend="torch").fingerprint
    assert HashEmbedder(dimension=8).fingerprint != HashEmbedder(dimension=12).fingerprint
    assert OtherBackend(dimension=8).fingerprint != HashEmbedder(dimension=8).fingerprint


def test_with_the_cache_off_or_unusable_every_text_is_embedded(tmp_path: Path) -> None:
    doc, chunks = make_document("doc_a", TEXTS)
    off = SinkSettings(data_dir=tmp_path / "off", result_cache_entries=0)
    broken = SinkSettings(data_dir=tmp_path / "broken")
    (broken.data_dir / "result_cache.sqlite3").mkdir(parents=True)  # not a database file
    for chosen in (off, broken):
        embedder = CountingEmbedder()
        with EdgeQdrantSink(chosen, embedder) as sink:
            sink.write(sink.prepare([(doc, chunks)]))
            assert _stats(sink.prepare([(doc, chunks)])) == (4, 0)
        assert len(embedder.texts) == 8


def test_the_cache_keeps_the_most_recently_used_within_its_bound(keyword_settings: SinkSettings) -> None:
    settings = keyword_settings.model_copy(update={"result_cache_entries": 5})
    cache = ResultCache.open(settings, "vectors", "model-a")
    keys = [text_key(f"text {i}") for i in range(8)]
    cache.put({key: bytes([i]) for i, key in enumerate(keys[:5])})
    assert cache.get(keys[:2]) == {keys[0]: b"\x00", keys[1]: b"\x01"}  # used now: kept longest
    cache.put({key: bytes([i + 5]) for i, key in enumerate(keys[5:])})
    assert cache.count() == 5
    assert set(cache.get(keys)) == {keys[0], keys[1], *keys[5:]}
    assert ResultCache.open(settings, "vectors", "model-b").get(keys) == {}  # another model's: none


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.text(), min_size=1, max_size=6),
    vector=st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=8),
)
def test_any_text_and_vector_round_trip_through_the_cache(tmp_path: Path, texts: list[str], vector) -> None:  # type: ignore[no-untyped-def]
    assert _unpack(_pack(vector)) == vector
    # a fingerprint of its own per example: the data dir is the test's, shared by every example
    cache = ResultCache.open(SinkSettings(data_dir=tmp_path), "extractions", uuid.uuid4().hex)
    extraction = Extraction(
        "c1",
        tuple(ExtractedEntity(t, t[:3], t[::-1], "c1") for t in texts),
        tuple(ExtractedRelation(a, b, a + b, b, 1.5, "c1") for a, b in itertools.pairwise(texts)),
    )
    blobs = {text_key(t): pack_extraction(extraction) for t in texts}
    cache.put(blobs)
    held = cache.get([text_key(t) for t in texts])
    assert held == blobs
    back = unpack_extraction(held[text_key(texts[0])], "c2")
    assert [e.name for e in back.entities] == texts and all(e.chunk_id == "c2" for e in back.entities)
    assert all(math.isclose(r.weight, 1.5) for r in back.relations)


class CountingSpacy(SpacyExtractor):
    """Real spaCy extraction, counting the chunks it extracts from."""

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.seen: list[str] = []

    def extract(self, chunks):  # type: ignore[no-untyped-def]
        self.seen.extend(c.content for c in chunks)
        return super().extract(chunks)


def test_extractions_are_reused_for_the_same_extractor_and_text(
    graph_backend: GraphBackend, tmp_path: Path
) -> None:
    settings = SinkSettings(data_dir=tmp_path)
    extractor = CountingSpacy()
    cache = ResultCache.open(settings, "extractions", extractor.fingerprint)
    sink = KnowledgeGraphSink(graph_backend, extractor, cache=cache)
    reference = KnowledgeGraphSink(graph_backend, SpacyExtractor())  # no cache: always extracts
    doc_a, chunks_a = make_document("doc_a", TEXTS)
    doc_b, chunks_b = make_document("doc_b", [TEXTS[2], "Bob Jones lives in Madrid.", TEXTS[2]])

    first = sink.prepare([(doc_a, chunks_a)])
    assert (first.stats["extracted_chunks"], first.stats["reused_chunks"]) == (4, 0)
    sink.write(first)
    extractor.seen.clear()
    again = sink.prepare([(doc_a, chunks_a), (doc_b, chunks_b)])
    assert extractor.seen == ["Bob Jones lives in Madrid."]
    assert (again.stats["extracted_chunks"], again.stats["reused_chunks"]) == (1, 6)
    fresh = reference.prepare([(doc_a, chunks_a), (doc_b, chunks_b)])
    assert again.payload == fresh.payload  # reused extractions are what extracting gives, chunk IDs included
    assert any(g.entities for g in again.payload.values())
    sink.write(again)

    narrower = CountingSpacy(labels={"PERSON"})  # another fingerprint: nothing reused
    other = KnowledgeGraphSink(
        graph_backend, narrower, cache=ResultCache.open(settings, "extractions", narrower.fingerprint)
    )
    assert other.prepare([(doc_a, chunks_a)]).stats["extracted_chunks"] == 4
