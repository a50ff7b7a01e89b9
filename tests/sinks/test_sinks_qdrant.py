"""QdrantSink against real Qdrant local mode in tmp_path, with the real MiniLM model where meaning matters.

The bookkeeping and search tests run on both embedded engines (`engine` fixture): qdrant-client's local
mode (`QdrantSink`) and qdrant-edge (`EdgeQdrantSink`, the same sink on another store).

Tests that only check bookkeeping (replacement, batching, 10k chunks, locking) use a hash embedder so
they stay fast; MiniLM runs on a handful of chunks only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from qdrant_client import QdrantClient

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.base import ScoredChunk, SinkError
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.factory import open_sink as open_sink_by_name
from unichunk.sinks.vectors.base import Embedder
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink
from unichunk.sinks.vectors.sink import point_id

ENGINES = {"local": QdrantSink, "edge": EdgeQdrantSink}


class HashEmbedder(Embedder):
    """Deterministic, instant vectors from SHA-256: exercises storage without a model."""

    max_tokens = 10_000

    def __init__(self, dimension: int = 16, name: str = "hash-test") -> None:
        self._dimension = dimension
        self.name = name

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            vectors.append([digest[i % 32] / 255.0 + 0.01 for i in range(self._dimension)])
        return vectors

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def make_document(paragraphs: Sequence[str], source_id: str, **fields: Any) -> Document:
    return Document(text="\n\n".join(paragraphs), source_system="test", source_id=source_id, **fields)


def make_chunks(
    document: Document, heading_chain: tuple[str, ...] = (), metadata: dict[str, Any] | None = None
) -> list[Chunk]:
    """One chunk per paragraph, with exact offsets into the document text."""
    spans, start = [], 0
    for paragraph in document.text.split("\n\n"):
        start = document.text.index(paragraph, start)
        spans.append(
            Span(start, start + len(paragraph), len(paragraph.split()), heading_chain, metadata or {})
        )
        start += len(paragraph)
    return chunks_from_spans(document, spans)


def settings_for(path: Path, **overrides: Any) -> SinkSettings:
    return SinkSettings(data_dir=path, qdrant_url=None, **overrides)


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    """Each embedded engine in turn."""
    return str(request.param)


def open_sink(engine: str, settings: SinkSettings, embedder: Embedder) -> QdrantSink:
    return ENGINES[engine](settings.model_copy(update={"vector_engine": engine}), embedder)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
def hash_sink(tmp_path: Path, engine: str) -> Iterator[QdrantSink]:
    with open_sink(
        engine, settings_for(tmp_path, upsert_batch_size=2, embedding_batch_size=3), HashEmbedder()
    ) as sink:
        yield sink


TOPICS = {
    "plants": [
        "Photosynthesis lets green plants capture sunlight in chlorophyll and turn it into sugar.",
        "Leaves open their stomata to take in carbon dioxide and release oxygen.",
    ],
    "volcano": [
        "Magma rises through the crust and erupts from a volcano as lava and ash.",
        "Pyroclastic flows race down the slopes of an erupting volcano.",
    ],
    "bread": [
        "A sourdough starter is a culture of wild yeast and lactobacilli fed with flour and water.",
        "Bakers fold the dough several times during bulk fermentation.",
    ],
}


@pytest.fixture(scope="module", params=sorted(ENGINES))
def searchable(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, minilm: MiniLMEmbedder
) -> Iterator[dict[str, Any]]:
    """Three topical documents embedded once with MiniLM (per engine), shared by the read-only tests."""
    path = tmp_path_factory.mktemp(f"qdrant-minilm-{request.param}")
    documents = {
        topic: make_document(
            paras, topic, title=f"On {topic}", path=f"/docs/{topic}.md", mime_type="text/markdown"
        )
        for topic, paras in TOPICS.items()
    }
    chunks = {
        topic: make_chunks(doc, heading_chain=("Science", topic.title())) for topic, doc in documents.items()
    }
    with open_sink(request.param, settings_for(path, embedding_batch_size=4), minilm) as sink:
        prepared = sink.prepare([(documents[t], chunks[t]) for t in TOPICS])
        before = datetime.now().astimezone()
        assert sink.write(prepared) == 6
        yield {"sink": sink, "documents": documents, "chunks": chunks, "written_after": before}


def _payloads(sink: QdrantSink, chunk_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The raw stored payloads by chunk ID, read from the engine itself by point ID."""
    payloads = sink._store_retrieve([point_id(c) for c in chunk_ids])
    return {p["chunk_id"]: p for p in payloads if p}


# --- replace semantics ------------------------------------------------------------------------------


def test_reupsert_same_document_keeps_one_copy(hash_sink: QdrantSink) -> None:
    document = make_document(["alpha one", "beta two", "gamma three"], "same")
    chunks = make_chunks(document)
    assert hash_sink.upsert(document, chunks) == 3
    first = hash_sink.chunk_ids()
    assert hash_sink.upsert(document, chunks) == 3
    assert hash_sink.count() == 3
    assert hash_sink.chunk_ids() == first == {c.chunk_id for c in chunks}


def test_changed_document_replaces_its_chunks_without_orphans(hash_sink: QdrantSink) -> None:
    other = make_document(["bystander text"], "other")
    hash_sink.upsert(other, make_chunks(other))
    old = make_document(["intro", "middle part", "old ending", "appendix"], "doc")
    old_chunks = make_chunks(old)
    hash_sink.upsert(old, old_chunks)
    new = make_document(["intro", "rewritten middle"], "doc")
    new_chunks = make_chunks(new)
    assert new.document_id == old.document_id

    hash_sink.upsert(new, new_chunks)

    assert hash_sink.chunk_ids(new.document_id) == {c.chunk_id for c in new_chunks}
    assert hash_sink.count() == 3  # 2 new + the bystander
    assert hash_sink.get_chunks(c.chunk_id for c in old_chunks[1:]) == {}
    assert hash_sink.chunk_ids(other.document_id) == {make_chunks(other)[0].chunk_id}


def test_writing_a_document_with_no_chunks_empties_it(hash_sink: QdrantSink) -> None:
    document = make_document(["one", "two"], "emptied")
    hash_sink.upsert(document, make_chunks(document))
    assert hash_sink.upsert(document, []) == 0
    assert hash_sink.chunk_ids(document.document_id) == set()


def test_delete_removes_every_point_of_the_document(hash_sink: QdrantSink) -> None:
    assert hash_sink.delete("doc_never_written") == 0  # before the collection exists
    keep = make_document(["keep me"], "keep")
    gone = make_document(["a", "b", "c", "d", "e"], "gone")
    hash_sink.upsert(keep, make_chunks(keep))
    hash_sink.upsert(gone, make_chunks(gone))

    assert hash_sink.delete(gone.document_id) == 5
    assert hash_sink.chunk_ids(gone.document_id) == set()
    assert hash_sink.count() == 1
    assert hash_sink.delete(gone.document_id) == 0


def test_prepare_writes_nothing(hash_sink: QdrantSink) -> None:
    document = make_document(["x y", "z"], "prepared-only")
    prepared = hash_sink.prepare([(document, make_chunks(document))])
    assert prepared.chunk_count == 2 and prepared.stats["truncated_chunks"] == 0
    assert not hash_sink._store_exists()
    assert hash_sink.chunk_ids() == set() and hash_sink.count() == 0 and hash_sink.search("x") == []


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs when there is one: local mode commits (fsyncs) every point to SQLite on its
    own, so on a busy shared disk 10k points take minutes; the storage code exercised is the same."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="unichunk-qdrant-") as directory:
        yield Path(directory)


def test_batch_of_ten_thousand_chunks(fast_dir: Path, engine: str) -> None:
    settings = settings_for(fast_dir, upsert_batch_size=512, embedding_batch_size=256)
    documents = [
        make_document([f"doc {d} paragraph {i}" for i in range(100)], f"bulk-{d}") for d in range(100)
    ]
    batch = [(doc, make_chunks(doc)) for doc in documents]
    expected = {c.chunk_id for _, chunks in batch for c in chunks}
    with open_sink(engine, settings, HashEmbedder(dimension=32)) as sink:
        assert sink.write(sink.prepare(batch)) == 10_000
        assert sink.count() == 10_000
        assert sink.chunk_ids() == expected  # paginated scroll over several pages
        changed = make_document(["doc 0 paragraph 0", "entirely new text"], "bulk-0")
        sink.upsert(changed, make_chunks(changed))
        assert sink.count() == 10_000 - 100 + 2
        assert sink.chunk_ids(changed.document_id) == {c.chunk_id for c in make_chunks(changed)}


def test_threads_share_one_sink(hash_sink: QdrantSink) -> None:
    documents = [make_document([f"thread {t} text {i}" for i in range(5)], f"t{t}") for t in range(6)]
    errors: list[BaseException] = []

    def work(document: Document) -> None:
        try:
            hash_sink.upsert(document, make_chunks(document))
        except BaseException as exc:  # surfaced in the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(d,)) for d in documents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert hash_sink.count() == 30


# --- payload, search ----------------------------------------------------------------------------------


def test_payload_fields_and_offsets(searchable: dict[str, Any]) -> None:
    sink: QdrantSink = searchable["sink"]
    document: Document = searchable["documents"]["volcano"]
    chunks: list[Chunk] = searchable["chunks"]["volcano"]
    stored = sink.get_chunks([c.chunk_id for c in chunks] + ["doc_missing::chunk::000::00000000"])
    assert set(stored) == {c.chunk_id for c in chunks}
    payloads = _payloads(sink, [c.chunk_id for c in chunks])
    for chunk in chunks:
        record = stored[chunk.chunk_id]  # the read side's record: the chunk as stored, plus what came with it
        assert (record.chunk_id, record.document_id, record.chunk_index) == (
            chunk.chunk_id,
            chunk.document_id,
            chunk.chunk_index,
        )
        assert (record.start_char, record.end_char, record.content) == (
            chunk.start_char,
            chunk.end_char,
            chunk.content,
        )
        assert record.heading_chain == ("Science", "Volcano") and record.title == "On volcano"
        payload = payloads[chunk.chunk_id]
        assert (
            document.text[payload["start_char"] : payload["end_char"]] == payload["content"] == chunk.content
        )
        assert payload["chunk_index"] == chunk.chunk_index
        assert payload["token_count"] == chunk.token_count
        assert payload["content_hash"] == chunk.content_hash
        assert payload["heading_chain"] == ["Science", "Volcano"]
        assert payload["whole_document"] is False
        assert payload["document_id"] == document.document_id
        assert payload["document_content_hash"] == document.content_hash
        assert payload["title"] == "On volcano" and payload["path"] == "/docs/volcano.md"
        assert payload["source_system"] == "test" and payload["source_id"] == "volcano"
        assert payload["mime_type"] == "text/markdown"
        assert payload["metadata"] == {}
        ingested = datetime.fromisoformat(payload["ingested_at"])
        assert ingested.utcoffset() == timedelta(0)
        assert ingested >= searchable["written_after"]
    record = sink._store_retrieve([point_id(chunks[0].chunk_id)])
    assert record[0]["chunk_id"] == chunks[0].chunk_id  # point ID is derived from the chunk ID


def test_search_ranks_the_distinctive_chunk_first(searchable: dict[str, Any]) -> None:
    sink: QdrantSink = searchable["sink"]
    hits = sink.search("how do green plants turn sunlight into sugar", k=3)
    assert len(hits) == 3 and all(isinstance(h, ScoredChunk) for h in hits)
    top = hits[0]
    expected = searchable["chunks"]["plants"][0]
    assert (top.chunk_id, top.document_id) == (expected.chunk_id, expected.document_id)
    assert (top.start_char, top.end_char, top.content) == (
        expected.start_char,
        expected.end_char,
        expected.content,
    )
    assert top.heading_chain == ("Science", "Plants")
    assert top.score > hits[1].score >= hits[2].score


def test_chunks_at_returns_a_documents_chunks_by_position_for_neighbour_expansion(
    searchable: dict[str, Any],
) -> None:
    sink: QdrantSink = searchable["sink"]
    document: Document = searchable["documents"]["volcano"]
    chunks: list[Chunk] = searchable["chunks"]["volcano"]
    found = sink.chunks_at(document.document_id, [1, 0, -1, 7])  # out-of-range positions are not there
    assert [c.chunk_id for c in found] == [chunks[0].chunk_id, chunks[1].chunk_id]
    assert [(c.start_char, c.end_char, c.content) for c in found] == [
        (c.start_char, c.end_char, c.content) for c in chunks[:2]
    ]
    assert sink.chunks_at("doc_absent", [0]) == [] and sink.chunks_at(document.document_id, []) == []


def test_search_honours_filters(searchable: dict[str, Any]) -> None:
    sink: QdrantSink = searchable["sink"]
    bread_id = searchable["documents"]["bread"].document_id
    volcano_id = searchable["documents"]["volcano"].document_id
    hits = sink.search("photosynthesis in leaves", k=10, filter={"document_id": bread_id})
    assert {h.document_id for h in hits} == {bread_id} and len(hits) == 2
    hits = sink.search("photosynthesis in leaves", k=10, filter={"document_id": [bread_id, volcano_id]})
    assert {h.document_id for h in hits} == {bread_id, volcano_id} and len(hits) == 4
    assert sink.count({"source_id": "plants"}) == 2


def test_whole_document_is_one_flagged_point(tmp_path: Path, minilm: MiniLMEmbedder) -> None:
    document = make_document(["A short note about tea."], "note")
    chunks = make_chunks(document, metadata={"whole_document": True, "strategy": "single"})
    with QdrantSink(settings_for(tmp_path), minilm) as sink:
        sink.upsert(document, chunks)
        payload = _payloads(sink, [chunks[0].chunk_id])[chunks[0].chunk_id]
        assert sink.count() == 1
        assert payload["whole_document"] is True
        assert payload["metadata"] == {"whole_document": True, "strategy": "single"}
        assert (payload["start_char"], payload["end_char"]) == (0, len(document.text))


def test_truncated_chunk_is_counted_and_logged(
    tmp_path: Path, minilm: MiniLMEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    long_text = " ".join(f"word{i}" for i in range(300))  # several word pieces each: well over 256
    document = make_document(["Short and fine.", long_text], "long")
    chunks = make_chunks(document)
    labels = {"embedder": minilm.name}
    before = REGISTRY.get_sample_value("unichunk_embedder_truncated_chunks_total", labels) or 0.0
    with (
        QdrantSink(settings_for(tmp_path), minilm) as sink,
        caplog.at_level(logging.WARNING, "unichunk.sinks.vectors.sink"),
    ):
        prepared = sink.prepare([(document, chunks)])
    assert prepared.stats["truncated_chunks"] == 1
    assert REGISTRY.get_sample_value("unichunk_embedder_truncated_chunks_total", labels) == before + 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert document.document_id in warnings[0] and chunks[1].chunk_id in warnings[0]
    assert chunks[0].chunk_id not in warnings[0]


def test_embedded_text_carries_the_heading_chain(hash_sink: QdrantSink) -> None:
    document = make_document(["Install with pip.", "Run the tests."], "guide")
    chunks = make_chunks(document, heading_chain=("Guide", "Setup"))
    hash_sink.upsert(document, chunks)
    # The hash embedder maps equal texts to equal vectors: only the exact embed text scores 1.0.
    top = hash_sink.search("Guide > Setup: Run the tests.", k=1)[0]
    assert top.chunk_id == chunks[1].chunk_id and top.score == pytest.approx(1.0, abs=1e-5)
    assert hash_sink.search("Run the tests.", k=1)[0].score < 0.999


# --- configuration errors -------------------------------------------------------------------------


def test_changed_embedder_dimension_is_a_clear_error(tmp_path: Path, engine: str) -> None:
    document = make_document(["some text"], "dim")
    with open_sink(engine, settings_for(tmp_path), HashEmbedder(dimension=8)) as sink:
        sink.upsert(document, make_chunks(document))
    with open_sink(engine, settings_for(tmp_path), HashEmbedder(dimension=12, name="bigger")) as sink:
        with pytest.raises(SinkError, match=r"8-d .*'bigger' makes 12-d.*rebuild") as caught:
            sink.prepare([(document, make_chunks(document))])
        assert caught.value.sink == "vectors"
        with pytest.raises(SinkError, match="rebuild"):
            sink.search("some text")
        assert sink.chunk_ids() == {make_chunks(document)[0].chunk_id}  # reads of stored IDs still work


def test_sinks_in_one_process_share_the_local_client_and_another_process_is_refused(
    hash_sink: QdrantSink, engine: str
) -> None:
    # In this process a second sink on the same storage (another generation, a reader) shares the client.
    other = open_sink(engine, hash_sink.settings, HashEmbedder())
    document = make_document(["shared storage"], "shared")
    other.upsert(document, make_chunks(document))
    other.close()
    assert hash_sink.chunk_ids(document.document_id) == {c.chunk_id for c in make_chunks(document)}
    # Local mode allows one process per directory: another one gets a clear error naming the fix.
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from unichunk.sinks.base import SinkError\n"
        "from unichunk.sinks.config import SinkSettings\n"
        "from unichunk.sinks.vectors.sink import open_vector_sink\n"
        "try:\n"
        "    open_vector_sink(SinkSettings(data_dir=Path(sys.argv[1]), vector_engine=sys.argv[2]))\n"
        "except SinkError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(hash_sink.settings.data_dir), engine],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert re.search(r"already open.*UNICHUNK_QDRANT_URL", result.stdout), result.stdout + result.stderr


def test_store_failures_surface_as_sink_errors(tmp_path: Path, engine: str) -> None:
    sink = open_sink(engine, settings_for(tmp_path), HashEmbedder())
    document = make_document(["text"], "closed")
    prepared = sink.prepare([(document, make_chunks(document))])
    sink.close()
    with pytest.raises(
        SinkError, match=r"Qdrant write on collection 'unichunk_chunks' failed.*closed"
    ) as caught:
        sink.write(prepared)
    assert caught.value.sink == "vectors"
    with pytest.raises(SinkError, match="Qdrant chunk_ids"):
        sink.chunk_ids()


def test_the_live_alias_moves_between_generation_collections_atomically(tmp_path: Path) -> None:
    # As on a server, where every generation's collection lives in one storage: one client, two sinks.
    client = QdrantClient(path=str(tmp_path / "shared"))
    old = QdrantSink(settings_for(tmp_path, generation="gold"), HashEmbedder(), client=client)
    new = QdrantSink(settings_for(tmp_path, generation="gnew"), HashEmbedder(), client=client)
    document = make_document(["first generation"], "alias")
    old.upsert(document, make_chunks(document))
    alias = old.settings.qdrant_collection
    assert old.alias_target(alias) is None
    old.point_alias(alias)
    assert old.alias_target(alias) == "unichunk_chunks__gold"
    assert client.count(alias).count == 1  # readers of the alias see the old generation
    new.point_alias(alias)  # creates the new (empty) collection and moves the alias in one operation
    assert new.alias_target(alias) == "unichunk_chunks__gnew" and client.count(alias).count == 0
    new.point_alias(alias)  # idempotent
    assert [a.alias_name for a in client.get_aliases().aliases] == [alias]
    old.drop()
    assert not client.collection_exists("unichunk_chunks__gold") and new.alias_target(alias)
    # An existing collection under the alias's name is never shadowed.
    taken = QdrantSink(settings_for(tmp_path, qdrant_collection="taken"), HashEmbedder(), client=client)
    taken.upsert(document, make_chunks(document))
    with pytest.raises(SinkError, match="cannot become the live alias"):
        new.point_alias("taken")
    client.close()


# --- the two embedded engines ---------------------------------------------------------------------


def test_the_factory_opens_the_engine_the_settings_name(tmp_path: Path) -> None:
    edge = open_sink_by_name("vectors", settings_for(tmp_path / "a", vector_engine="edge"))
    local = open_sink_by_name("vectors", settings_for(tmp_path / "b", vector_engine="local"))
    default = open_sink_by_name("vectors", settings_for(tmp_path / "c"))
    assert (type(edge), type(local)) == (EdgeQdrantSink, QdrantSink)
    assert default.engine == SinkSettings().vector_engine == "edge"  # the measured default
    for sink in (edge, local, default):
        sink.close()


@pytest.mark.parametrize(("writer", "reader"), [("local", "edge"), ("edge", "local")])
def test_an_index_of_the_other_engine_is_refused_not_read_as_empty(
    tmp_path: Path, writer: str, reader: str
) -> None:
    document = make_document(["kept by the first engine"], "switch")
    with open_sink(writer, settings_for(tmp_path), HashEmbedder()) as sink:
        sink.upsert(document, make_chunks(document))
    with pytest.raises(
        SinkError, match=rf"written by the '{writer}' engine.*VECTOR_ENGINE={writer}"
    ) as caught:
        open_sink(reader, settings_for(tmp_path), HashEmbedder())
    assert caught.value.sink == "vectors"
    with open_sink(writer, settings_for(tmp_path), HashEmbedder()) as sink:  # the index itself is intact
        assert sink.chunk_ids() == {c.chunk_id for c in make_chunks(document)}


def test_edge_indexes_document_and_source_fields_so_filters_do_not_scan(tmp_path: Path) -> None:
    documents = [make_document([f"text {d} {i}" for i in range(3)], f"src-{d}") for d in range(4)]
    with open_sink("edge", settings_for(tmp_path), HashEmbedder()) as sink:
        for document in documents:
            sink.upsert(document, make_chunks(document))
        assert isinstance(sink, EdgeQdrantSink)
        schema = sink.shard.info().payload_schema
        assert {"document_id", "chunk_id", "source_system", "source_id"} <= set(schema)
        assert schema["document_id"].points == schema["source_id"].points == 12
        assert sink.count({"source_id": "src-2"}) == 3
        hits = sink.search("text 1 0", k=10, filter={"document_id": documents[1].document_id})
        assert {h.document_id for h in hits} == {documents[1].document_id} and len(hits) == 3
        assert sink.delete(documents[1].document_id) == 3 and sink.count() == 9
    with open_sink("edge", settings_for(tmp_path), HashEmbedder()) as sink:  # reopened: indexes persist
        assert sink.count({"source_id": "src-2"}) == 3 and sink.count() == 9
        assert "document_id" in sink.shard.info().payload_schema


def test_edge_optimize_vacuums_deleted_points_only_after_changes(fast_dir: Path, engine: str) -> None:
    documents = [make_document([f"doc {d} paragraph {i}" for i in range(40)], f"opt-{d}") for d in range(30)]
    with open_sink(engine, settings_for(fast_dir), HashEmbedder()) as sink:
        sink.write(sink.prepare([(doc, make_chunks(doc)) for doc in documents]))
        for doc in documents[:12]:  # 480 of 1200 points: past qdrant's 20 % vacuum threshold
            assert sink.delete(doc.document_id) == 40
        # qdrant-edge reclaims the deleted points' space; local mode organises itself (nothing to do)
        assert sink.optimize() is (engine == "edge")
        assert sink.optimize() is False  # nothing changed since
        kept = {c.chunk_id for doc in documents[12:] for c in make_chunks(doc)}
        assert sink.count() == 720 and sink.chunk_ids() == kept
        hits = sink.search("doc 20 paragraph 3", k=3)  # the hash embedder: the same text, the same vector
        assert hits[0].content == "doc 20 paragraph 3" and hits[0].chunk_id in kept
