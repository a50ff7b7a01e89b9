"""Who may read what, through the Python API: `Pipeline.scoped(principal)` over a real index (Qdrant, BM25,
FalkorDB, flows on the session's Prefect server), ingested once for the module with random labels.

The property (`access_checks.py`, shared with the other doors): whatever a reader asks, no search hit, context span,
neighbour, graph entity or relation, chunk, context or document look-up returns text of a document it may
not read, and a document it may not read answers exactly as one that does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from access_checks import Corpus, assert_no_leak, check_search, make_corpus, principals, queries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk import Pipeline
from unichunk.access import AccessDenied, Principal
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.errors import NotFound
from unichunk.sinks.config import SinkSettings

CORPUS = make_corpus()
EXAMPLES = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


class Index:
    """The module's ingested corpus: an owner's Pipeline, each document's chunk IDs."""

    def __init__(self, pipeline: Pipeline, corpus: Corpus) -> None:
        self.owner = pipeline
        self.corpus = corpus
        self.chunks = {
            document_id: [c.chunk_id for c in pipeline.document(document_id).chunks]
            for document_id in corpus.by_id()
        }

    def as_(self, principal: Principal) -> Pipeline:
        return self.owner.scoped(principal)

    def readable_chunks(self, principal: Principal) -> int:
        return sum(len(self.chunks[self.corpus.ids[d.name]]) for d in self.corpus.readable(principal))

    def readable(self, principal: Principal, document_id: str) -> bool:
        return principal.may_read(self.corpus.by_id()[document_id].labels)


@pytest.fixture(scope="module")
def index(
    tmp_path_factory: pytest.TempPathFactory, falkordb_url: str, prefect_api_url: str
) -> Iterator[Index]:
    """One ingest of the whole corpus, each document with its own labels (`Document.metadata`), fixed-size
    small chunks so every document has several and neighbours matter."""
    from unichunk.sinks.pool import close_all_sinks

    data = tmp_path_factory.mktemp("access") / "data"
    base = SinkSettings(
        data_dir=data, falkordb_url=falkordb_url, graph_name=f"access_{uuid.uuid4().hex[:12]}"
    )
    strategy = ChunkStrategy(name="fixed_chars", chunk_size=240, chunk_overlap=0)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("PUSHGATEWAY_URL", raising=False)
        pipeline = Pipeline(base, strategy=strategy)
        documents = [
            Document(text=d.text, source_id=d.name, metadata={"labels": list(d.labels)} if d.labels else {})
            for d in CORPUS.documents
        ]
        summary = pipeline.ingest(documents, source_name="acl")
        assert summary.failed == [] and summary.processed == len(documents), summary
        names = {row.source_id: row.document_id for row in pipeline.status().documents}
        CORPUS.ids.update({d.name: names[d.name] for d in CORPUS.documents})
        yield Index(pipeline, CORPUS)
        pipeline.close()
        close_all_sinks()


def _search_as(index: Index):  # type: ignore[no-untyped-def]
    def search(principal: Principal, query: str, k: int):  # type: ignore[no-untyped-def]
        return index.as_(principal).search(query, k=k)

    return search


@EXAMPLES
@given(principal=principals(), query=queries(CORPUS), k=st.integers(1, 8))
def test_search_never_returns_hidden_text(index: Index, principal: Principal, query: str, k: int) -> None:
    check_search(index.corpus, principal, _search_as(index), query, k, index.readable_chunks(principal))


@EXAMPLES
@given(principal=principals(), data=st.data())
def test_look_ups_answer_for_hidden_documents_as_for_missing_ones(
    index: Index, principal: Principal, data: st.DataObject
) -> None:
    reader = index.as_(principal)
    everything = [c for ids in index.chunks.values() for c in ids]
    asked = data.draw(st.lists(st.sampled_from(everything), min_size=1, max_size=6, unique=True))
    got = reader.get_chunks(asked)
    assert_no_leak(index.corpus, principal, got, "get_chunks")
    readable = [
        c for c in asked if any(c in index.chunks[d] and index.readable(principal, d) for d in index.chunks)
    ]
    assert [c.chunk_id for c in got] == readable

    chunk_id = data.draw(st.sampled_from(everything))
    document_id = next(d for d, ids in index.chunks.items() if chunk_id in ids)
    radius = data.draw(st.integers(0, 2))
    if index.readable(principal, document_id):
        around = reader.neighbours(chunk_id, radius)
        context = reader.context(chunk_id, radius)
        document = reader.document(document_id)
        assert chunk_id in [c.chunk_id for c in around] and context.document_id == document_id
        assert [c.chunk_id for c in document.chunks] == index.chunks[document_id]
        assert reader.knows(document_id) and list(reader.documents([document_id])) == [document_id]
        for payload, where in ((around, "neighbours"), (context, "context"), (document, "document")):
            assert_no_leak(index.corpus, principal, payload, where)
    else:
        _assert_missing_chunk(reader, chunk_id, radius)
        _assert_missing_document(reader, document_id)


def _assert_missing_chunk(reader: Pipeline, chunk_id: str, radius: int = 1) -> None:
    """`chunk_id` answers exactly as a chunk ID that never existed (same error, same message shape)."""
    ghost = chunk_id[:-4] + "0000" if not chunk_id.endswith("0000") else chunk_id[:-4] + "1111"
    for look_up in (reader.neighbours, reader.context):
        for asked in (chunk_id, ghost):
            with pytest.raises(NotFound) as caught:
                look_up(asked, radius)
            assert type(caught.value) is NotFound and str(caught.value) == f"no such chunk: {asked}"
    assert reader.get_chunks([chunk_id, ghost]) == []


def _assert_missing_document(reader: Pipeline, document_id: str) -> None:
    ghost = "f" * len(document_id)
    for asked in (document_id, ghost):
        with pytest.raises(NotFound) as caught:
            reader.document(asked)
        assert type(caught.value) is NotFound and str(caught.value) == f"no such document: {asked}"
        assert not reader.knows(asked) and reader.documents([asked]) == {}


def test_a_reader_without_labels_reads_nothing(index: Index) -> None:
    nobody = Principal(name="nobody")
    reader = index.as_(nobody)
    found = reader.search("Alice Johnson payroll", k=5)
    assert (
        found.hits == [] and (found.context is None or found.context.spans == []) and found.graph in (None,)
    )
    everything = [c for ids in index.chunks.values() for c in ids]
    assert reader.get_chunks(everything) == []
    for document_id, ids in index.chunks.items():
        _assert_missing_document(reader, document_id)
        _assert_missing_chunk(reader, ids[0])


def test_graph_context_comes_from_readable_chunks_only(index: Index) -> None:
    """The companies and people are named in every document; an eng reader's graph context still holds
    only sentences of eng documents (an admin's holds the others too: the check can fail)."""
    eng = Principal(name="eng", labels=("eng",))
    query = "Acme Corporation Alice Johnson Berlin"
    found = index.as_(eng).search(query, k=8)
    assert found.graph is not None and found.graph.entities
    assert_no_leak(index.corpus, eng, found, "graph context")
    admin_view = index.owner.search(query, k=8)
    assert admin_view.graph is not None
    hidden = {d.marker for d in index.corpus.hidden(eng)}
    shown = " ".join(e.description for e in admin_view.graph.entities)
    assert any(m in shown for m in hidden)


def test_admin_only_operations_are_refused_to_readers_and_writers(index: Index) -> None:
    for principal in (
        Principal(name="reader", labels=("eng", "hr")),
        Principal(name="writer", labels=("eng", "hr", "ops"), may_write=True),
    ):
        reader = index.as_(principal)
        for operation in (
            reader.status,
            reader.verify,
            reader.generations,
            reader.switch_generation,
            lambda: reader.drop_generation("g0"),  # noqa: B023 - called at once
        ):
            with pytest.raises(AccessDenied, match="admins only"):
                operation()


def test_writes_need_write_rights(index: Index, tmp_path: Path) -> None:
    reader = index.as_(Principal(name="reader", labels=LABELS_ALL))
    some_document = next(iter(index.chunks))
    for operation in (
        lambda: reader.ingest({"new.txt": "New text."}, source_name="acl0"),
        lambda: reader.delete(some_document),
        lambda: reader.rebuild(),
        lambda: reader.forget_source("acl0"),
    ):
        with pytest.raises(AccessDenied, match="may not write"):
            operation()
    assert index.owner.knows(some_document)  # nothing was deleted
    assert index.owner.documents([some_document])


def test_a_writer_cannot_delete_a_document_it_may_not_read(index: Index) -> None:
    writer = index.as_(Principal(name="writer", labels=("ops",), may_write=True))
    hidden = next(d for d in index.corpus.documents if "ops" not in d.labels)
    document_id = index.corpus.ids[hidden.name]
    with pytest.raises(NotFound) as caught:
        writer.delete(document_id)
    assert str(caught.value) == f"no such document: {document_id}"
    assert index.owner.knows(document_id)


LABELS_ALL = ("eng", "hr", "ops")
