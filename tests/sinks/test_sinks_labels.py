"""Access labels in the chunk stores: stored with every chunk, filtered inside each store's query, changed
without re-embedding, read back for verify.

Each test runs on the real stores: qdrant-edge, qdrant-client's local mode, and the keyword store on
SQLite and on PostgreSQL (server mode). The embedder is a hash (instant, deterministic): these tests are
about which chunks come back, not how well they rank.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.base import Sink
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import dispose_engines
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.vectors.base import Embedder
from unichunk.sinks.vectors.qdrant import QdrantSink
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink

STORES = ["vectors-edge", "vectors-local", "keywords-sqlite", "keywords-postgresql"]


class CountingHashEmbedder(Embedder):
    """Instant vectors from SHA-256, counting the texts it embeds (a relabel must embed none)."""

    max_tokens = 10_000
    name = "hash-labels"

    def __init__(self) -> None:
        self.embedded = 0

    @property
    def dimension(self) -> int:
        return 8

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return [[b / 255 + 0.01 for b in hashlib.sha256(t.encode()).digest()[:8]] for t in texts]

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def labelled(document_id: str, pieces: Sequence[str], labels: Sequence[str]) -> tuple[Document, list[Chunk]]:
    """A document with these access labels whose chunks are exactly `pieces`."""
    document = Document(document_id=document_id, text=" ".join(pieces), metadata={"labels": list(labels)})
    spans, start = [], 0
    for piece in pieces:
        spans.append(Span(start, start + len(piece), token_count=len(piece.split())))
        start += len(piece) + 1
    return document, chunks_from_spans(document, spans)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sink]:
    kind = request.param
    if kind.startswith("vectors"):
        engine = kind.split("-")[1]
        sink_class = EdgeQdrantSink if engine == "edge" else QdrantSink
        base = SinkSettings(data_dir=tmp_path, qdrant_url=None, vector_engine=engine, upsert_batch_size=64)
        with sink_class(base, CountingHashEmbedder()) as sink:
            yield sink
        return
    settings = SinkSettings(data_dir=tmp_path / "data")
    if kind == "keywords-postgresql":
        settings = settings.model_copy(
            update={"database_url": SecretStr(request.getfixturevalue("database_url"))}
        )
    with BM25Sink(settings) as sink:
        yield sink
    dispose_engines()


def write(sink: Sink, *documents: tuple[Document, list[Chunk]]) -> None:
    sink.write(sink.prepare(list(documents)))


def search(sink: Sink, query: str, k: int, filter: dict[str, list[str]] | None = None) -> list:  # type: ignore[type-arg]
    return sink.search(query, k, filter)  # type: ignore[attr-defined]


def test_labels_are_stored_with_every_chunk_and_read_back(store: Sink) -> None:
    doc, chunks = labelled("d1", ["alpha one", "alpha two"], ["HR", "eng"])
    plain, plain_chunks = labelled("d2", ["alpha three"], [])
    write(store, (doc, chunks), (plain, plain_chunks))
    assert store.chunk_labels() == {
        chunks[0].chunk_id: ("eng", "hr"),
        chunks[1].chunk_id: ("eng", "hr"),
        plain_chunks[0].chunk_id: (),
    }
    assert store.chunk_labels("d2") == {plain_chunks[0].chunk_id: ()}
    found = store.get_chunks([chunks[0].chunk_id])  # type: ignore[attr-defined]
    assert found[chunks[0].chunk_id].extra["labels"] == ["eng", "hr"]


def test_filter_matches_any_listed_label_and_an_empty_list_matches_nothing(store: Sink) -> None:
    hr, hr_chunks = labelled("hr", ["alpha hr", "alpha hr again"], ["hr"])
    eng, eng_chunks = labelled("eng", ["alpha eng"], ["eng"])
    both, both_chunks = labelled("both", ["alpha both"], ["eng", "hr"])
    none, none_chunks = labelled("none", ["alpha none"], [])
    write(store, (hr, hr_chunks), (eng, eng_chunks), (both, both_chunks), (none, none_chunks))

    def docs(filter: dict[str, list[str]] | None) -> set[str]:
        return {hit.document_id for hit in search(store, "alpha", 10, filter)}

    assert docs(None) == {"hr", "eng", "both", "none"}
    assert docs({"labels": ["hr"]}) == {"hr", "both"}
    assert docs({"labels": ["eng", "hr"]}) == {"hr", "eng", "both"}
    assert docs({"labels": ["finance"]}) == set()
    assert docs({"labels": []}) == set()
    assert docs({"labels": ["hr"], "document_id": ["both", "eng"]}) == {"both"}
    ids = [c.chunk_id for c in (*hr_chunks, *eng_chunks, *both_chunks, *none_chunks)]
    assert set(store.get_chunks(ids, {"labels": ["eng"]})) == {
        eng_chunks[0].chunk_id,
        both_chunks[0].chunk_id,
    }  # type: ignore[attr-defined]
    assert store.get_chunks(ids, {"labels": []}) == {}  # type: ignore[attr-defined]
    assert [c.chunk_index for c in store.chunks_at("hr", [0, 1], {"labels": ["hr"]})] == [0, 1]  # type: ignore[attr-defined]
    assert store.chunks_at("hr", [0, 1], {"labels": ["eng"]}) == []  # type: ignore[attr-defined]
    assert store.chunks_at("none", [0], {"labels": ["hr", "eng"]}) == []  # type: ignore[attr-defined]


def test_one_readable_document_among_a_thousand_gives_k_hits(store: Sink) -> None:
    """The filter is inside the query: post-filtering the top 5 of 1,001 documents would return nothing."""
    documents = [
        labelled(f"other-{n:04d}", [f"shared term number {n} piece {i}" for i in range(3)], ["public"])
        for n in range(1000)
    ]
    readable = labelled("secret", [f"shared term secret piece {i}" for i in range(8)], ["hr"])
    for start in range(0, len(documents), 250):
        write(store, *documents[start : start + 250])
    write(store, readable)
    hits = search(store, "shared term", 5, {"labels": ["hr"]})
    assert len(hits) == 5
    assert {hit.document_id for hit in hits} == {"secret"}
    assert all(hit.extra["labels"] == ["hr"] for hit in hits)


def test_relabel_changes_labels_without_reembedding_and_is_idempotent(store: Sink) -> None:
    doc, chunks = labelled("d1", ["alpha one", "alpha two", "alpha three"], ["hr"])
    write(store, (doc, chunks))
    embedder = getattr(store, "embedder", None)
    embedded = embedder.embedded if embedder is not None else 0
    assert store.relabel("d1", ["ENG", "finance"]) == 3
    assert store.relabel("d1", ["eng", "finance"]) == 0  # already so: nothing changes
    assert store.relabel("absent", ["eng"]) == 0
    assert set(store.chunk_labels("d1").values()) == {("eng", "finance")}
    if embedder is not None:
        assert embedder.embedded == embedded  # no chunk embedded again
        assert all(len(p) for p in store.content_hashes("d1").values())
    assert search(store, "alpha", 5, {"labels": ["hr"]}) == []
    assert {hit.document_id for hit in search(store, "alpha", 5, {"labels": ["finance"]})} == {"d1"}
    assert store.chunks_at("d1", [0, 1, 2], {"labels": ["eng"]})[2].content == "alpha three"  # type: ignore[attr-defined]


def test_a_rewrite_replaces_labels_and_delete_forgets_them(store: Sink) -> None:
    doc, chunks = labelled("d1", ["alpha one"], ["hr"])
    write(store, (doc, chunks))
    doc2, chunks2 = labelled("d1", ["alpha one"], ["eng"])
    write(store, (doc2, chunks2))
    assert store.chunk_labels() == {chunks[0].chunk_id: ("eng",)}
    store.delete("d1")
    assert store.chunk_labels() == {}
    write(store, labelled("d1", ["alpha one"], []))
    assert store.chunk_labels() == {chunks[0].chunk_id: ()}


LABELS = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    documents=st.lists(st.sets(LABELS, max_size=3), min_size=1, max_size=6),
    wanted=st.lists(LABELS, max_size=3),
)
def test_a_filtered_read_never_returns_a_chunk_without_a_listed_label(
    store: Sink, documents: list[set[str]], wanted: list[str]
) -> None:
    batch = [
        labelled(f"doc{n}", [f"word {n} x", f"word {n} y"], sorted(labels))
        for n, labels in enumerate(documents)
    ]
    for n in range(6):  # what earlier examples wrote
        store.delete(f"doc{n}")
    stored = {d.document_id for d, _ in batch}
    write(store, *batch)
    readable = {f"doc{n}" for n, labels in enumerate(documents) if labels & set(wanted)}
    filter = {"labels": wanted}
    hits = search(store, "word", 100, filter)
    assert {h.document_id for h in hits} == readable  # every readable chunk holds "word": all come back
    ids = [c.chunk_id for _, chunks in batch for c in chunks]
    got = store.get_chunks(ids, filter)  # type: ignore[attr-defined]
    assert {c.document_id for c in got.values()} == readable
    for document_id in stored:
        near = store.chunks_at(document_id, [0, 1], filter)  # type: ignore[attr-defined]
        assert len(near) == (2 if document_id in readable else 0)
    for chunk in [*hits, *got.values()]:
        assert set(chunk.extra["labels"]) & set(wanted)


def test_a_keyword_store_made_before_labels_opens_and_its_chunks_have_none(tmp_path: Path) -> None:
    settings = SinkSettings(data_dir=tmp_path / "data")
    doc, chunks = labelled("d1", ["alpha one"], ["hr"])
    with BM25Sink(settings) as sink:
        write(sink, (doc, chunks))
        with sink.store.db.write() as conn:  # as an earlier version left it: no labels table
            conn.exec_driver_sql("DROP TABLE labels")
    with BM25Sink(settings) as sink:
        assert sink.chunk_labels() == {chunks[0].chunk_id: ()}
        assert [hit.document_id for hit in sink.search("alpha", 5)] == ["d1"]
        assert sink.search("alpha", 5, {"labels": ["hr"]}) == []  # no labels: no reader but an admin
        assert sink.relabel("d1", ["hr"]) == 1
        assert [hit.document_id for hit in sink.search("alpha", 5, {"labels": ["hr"]})] == ["d1"]


def test_relabel_many_sets_each_documents_labels_in_one_pass(store: Sink) -> None:
    a, a_chunks = labelled("a", ["alpha one", "alpha two"], ["hr"])
    b, b_chunks = labelled("b", ["alpha three"], ["hr"])
    write(store, (a, a_chunks), (b, b_chunks))
    assert store.relabel_many({"a": ["eng"], "b": ["HR"], "absent": ["x"]}) == 2  # b is hr already
    assert store.chunk_labels() == {
        a_chunks[0].chunk_id: ("eng",),
        a_chunks[1].chunk_id: ("eng",),
        b_chunks[0].chunk_id: ("hr",),
    }
    assert store.relabel_many({}) == 0
