"""Who may read what, through the Python API: `Pipeline.scoped(principal)` over a real index (Qdrant, BM25,
FalkorDB, flows on the session's Prefect server), ingested once (the `access_index` fixture) with random labels.

The property (`access_checks.py`, shared with the other doors): whatever a reader asks, no search hit, context span,
neighbour, graph entity or relation, chunk, context or document look-up returns text of a document it may
not read, and a document it may not read answers exactly as one that does not exist.
"""

from __future__ import annotations

from typing import Any

import pytest
from access_checks import (
    ACCESS_CORPUS,
    Index,
    answers_as_missing,
    assert_no_leak,
    check_entity,
    check_graph_search,
    check_search,
    entity_names,
    ghost_of,
    principals,
    queries,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk import Pipeline
from unichunk.access import OWNER, AccessDenied, Principal
from unichunk.errors import NotFound

EXAMPLES = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
CORPUS = ACCESS_CORPUS


def _search_as(access_index: Index):  # type: ignore[no-untyped-def]
    def search(principal: Principal, query: str, k: int):  # type: ignore[no-untyped-def]
        return access_index.as_(principal).search(query, k=k)

    return search


@EXAMPLES
@given(principal=principals(), query=queries(CORPUS), k=st.integers(1, 8))
def test_search_never_returns_hidden_text(
    access_index: Index, principal: Principal, query: str, k: int
) -> None:
    check_search(
        access_index.corpus,
        principal,
        _search_as(access_index),
        query,
        k,
        access_index.readable_chunks(principal),
    )


@EXAMPLES
@given(principal=principals(), query=queries(CORPUS), k=st.integers(1, 8))
def test_graph_mode_never_returns_hidden_text(
    access_index: Index, principal: Principal, query: str, k: int
) -> None:
    """The graph retriever reads entities, relations and chunks under the reader's filter: no hidden text,
    and with room for every chunk the graph finds, exactly the admin's graph hits of readable documents
    (a hidden chunk never takes a readable hit's place, nor is one lost because a hidden chunk named it)."""

    def search(who: Principal, q: str, top: int):  # type: ignore[no-untyped-def]
        return access_index.as_(who).search(q, k=top, mode="graph")

    check_graph_search(access_index.corpus, principal, search, query, k)
    everything = 1000
    mine = {h.chunk_id for h in access_index.as_(principal).search(query, k=everything, mode="graph").hits}
    admins = access_index.owner.search(query, k=everything, mode="graph").hits
    readable = {h.chunk_id for h in admins if access_index.readable(principal, h.document_id)}
    assert mine == readable


def test_graph_mode_finds_readable_chunks_and_hides_the_rest(access_index: Index) -> None:
    """A query naming a person and a company: the eng reader's graph hits are all of eng documents, and
    the admin's include documents hidden from eng (the check can fail)."""
    eng = Principal(name="eng", labels=("eng",))
    query = "Alice Johnson of Acme Corporation"
    found = access_index.as_(eng).search(query, k=50, mode="graph")
    assert found.route == "graph" and found.hits
    assert all(access_index.readable(eng, h.document_id) for h in found.hits)
    assert_no_leak(access_index.corpus, eng, found, "graph mode")
    admin_view = access_index.owner.search(query, k=50, mode="graph")
    assert any(not access_index.readable(eng, h.document_id) for h in admin_view.hits)


@EXAMPLES
@given(principal=principals(), data=st.data())
def test_look_ups_answer_for_hidden_documents_as_for_missing_ones(
    access_index: Index, principal: Principal, data: st.DataObject
) -> None:
    reader = access_index.as_(principal)
    everything = [c for ids in access_index.chunks.values() for c in ids]
    asked = data.draw(st.lists(st.sampled_from(everything), min_size=1, max_size=6, unique=True))
    got = reader.get_chunks(asked)
    assert_no_leak(access_index.corpus, principal, got, "get_chunks")
    readable = [
        c
        for c in asked
        if any(
            c in access_index.chunks[d] and access_index.readable(principal, d) for d in access_index.chunks
        )
    ]
    assert [c.chunk_id for c in got] == readable

    chunk_id = data.draw(st.sampled_from(everything))
    document_id = next(d for d, ids in access_index.chunks.items() if chunk_id in ids)
    radius = data.draw(st.integers(0, 2))
    if access_index.readable(principal, document_id):
        around = reader.neighbours(chunk_id, radius)
        context = reader.context(chunk_id, radius)
        document = reader.document(document_id)
        assert chunk_id in [c.chunk_id for c in around] and context.document_id == document_id
        assert [c.chunk_id for c in document.chunks] == access_index.chunks[document_id]
        assert reader.knows(document_id) and list(reader.documents([document_id])) == [document_id]
        for payload, where in ((around, "neighbours"), (context, "context"), (document, "document")):
            assert_no_leak(access_index.corpus, principal, payload, where)
    else:
        _assert_missing_chunk(reader, chunk_id, radius)
        _assert_missing_document(reader, document_id)


def _assert_missing_chunk(reader: Pipeline, chunk_id: str, radius: int = 1) -> None:
    """`chunk_id` answers exactly as a chunk ID that never existed: `NotFound`, the same message."""
    for look_up in (reader.neighbours, reader.context):
        got = answers_as_missing(lambda asked: look_up(asked, radius), chunk_id)  # noqa: B023 - called at once
        assert got == {"raised": "NotFound", "message": f"no such chunk: {chunk_id}"}
    assert reader.get_chunks([chunk_id, ghost_of(chunk_id)]) == []


def _assert_missing_document(reader: Pipeline, document_id: str) -> None:
    got = answers_as_missing(reader.document, document_id)
    assert got == {"raised": "NotFound", "message": f"no such document: {document_id}"}
    assert answers_as_missing(lambda asked: reader.documents([asked]), document_id) == {}
    assert answers_as_missing(reader.knows, document_id) is False


def test_a_reader_lists_the_documents_it_may_read(access_index: Index) -> None:
    for labels in ((), ("eng",), ("hr", "ops"), ("eng", "hr", "ops")):
        reader = Principal(name="reader", labels=labels)
        listed = access_index.as_(reader).documents()
        assert set(listed) == {access_index.corpus.ids[d.name] for d in access_index.corpus.readable(reader)}
        assert all(info.labels and set(info.labels) & set(labels) for info in listed.values())
    assert set(access_index.owner.documents()) == set(access_index.chunks)  # admins: all, unlabelled too


def test_only_an_admin_sees_where_the_server_keeps_a_file(access_index: Index) -> None:
    """A hit and a document's record cite the document by its source and ID there for every caller; the
    file's place on the server's disk (`path`) only for an admin."""
    reader = access_index.as_(Principal(name="reader", labels=("eng", "hr", "ops")))
    for who, sees in ((reader, False), (access_index.owner, True)):
        hits = who.search("payroll budget", k=4).hits
        assert hits and all(h.source_system == "acl" and h.source_id for h in hits)
        assert all((h.path is not None) == sees for h in hits)
        document_id = hits[0].document_id
        assert (who.document(document_id).document.path is not None) == sees
        assert all((info.path is not None) == sees for info in who.documents().values())


def test_a_reader_without_labels_reads_nothing(access_index: Index) -> None:
    nobody = Principal(name="nobody")
    reader = access_index.as_(nobody)
    found = reader.search("Alice Johnson payroll", k=5)
    assert (
        found.hits == [] and (found.context is None or found.context.spans == []) and found.graph in (None,)
    )
    everything = [c for ids in access_index.chunks.values() for c in ids]
    assert reader.get_chunks(everything) == []
    for document_id, ids in access_index.chunks.items():
        _assert_missing_document(reader, document_id)
        _assert_missing_chunk(reader, ids[0])


def test_graph_context_comes_from_readable_chunks_only(access_index: Index) -> None:
    """The companies and people are named in every document; an eng reader's graph context still holds
    only sentences of eng documents (an admin's holds the others too: the check can fail)."""
    eng = Principal(name="eng", labels=("eng",))
    query = "Acme Corporation Alice Johnson Berlin"
    found = access_index.as_(eng).search(query, k=8)
    assert found.graph is not None and found.graph.entities
    assert_no_leak(access_index.corpus, eng, found, "graph context")
    admin_view = access_index.owner.search(query, k=8)
    assert admin_view.graph is not None
    hidden = {d.marker for d in access_index.corpus.hidden(eng)}
    shown = " ".join(e.description for e in admin_view.graph.entities)
    assert any(m in shown for m in hidden)


def test_admin_only_operations_are_refused_to_readers_and_writers(access_index: Index) -> None:
    for principal in (
        Principal(name="reader", labels=("eng", "hr")),
        Principal(name="writer", labels=("eng", "hr", "ops"), may_write=True),
    ):
        reader = access_index.as_(principal)
        for operation in (
            reader.status,
            reader.verify,
            reader.generations,
            reader.switch_generation,
            lambda: reader.drop_generation("g0"),  # noqa: B023 - called at once
        ):
            with pytest.raises(AccessDenied, match="admins only"):
                operation()


def test_writes_need_write_rights(access_index: Index) -> None:
    reader = access_index.as_(Principal(name="reader", labels=LABELS_ALL))
    some_document = next(iter(access_index.chunks))
    for operation in (
        lambda: reader.ingest({"new.txt": "New text."}, source_name="acl0"),
        lambda: reader.delete(some_document),
        lambda: reader.rebuild(),
        lambda: reader.forget_source("acl0"),
    ):
        with pytest.raises(AccessDenied, match="may not write"):
            operation()
    assert access_index.owner.knows(some_document)  # nothing was deleted
    assert access_index.owner.documents([some_document])


def test_a_writer_cannot_delete_a_document_it_may_not_read(access_index: Index) -> None:
    writer = access_index.as_(Principal(name="writer", labels=("ops",), may_write=True))
    hidden = next(d for d in access_index.corpus.documents if "ops" not in d.labels)
    document_id = access_index.corpus.ids[hidden.name]
    with pytest.raises(NotFound) as caught:
        writer.delete(document_id)
    assert str(caught.value) == f"no such document: {document_id}"
    assert access_index.owner.knows(document_id)


LABELS_ALL = ("eng", "hr", "ops")


@EXAMPLES
@given(principal=principals(), name=entity_names(CORPUS))
def test_an_entity_shows_only_what_readable_documents_taught(
    access_index: Index, principal: Principal, name: str
) -> None:
    """`Pipeline.entity` as a reader: the admin's sources in documents it may read, nothing hidden, and
    an entity only hidden documents name is not found, as an unknown one."""

    def entity_as(who: Principal, entity_name: str) -> Any:
        try:
            return access_index.as_(who).entity(entity_name)
        except NotFound:
            return None

    check_entity(access_index.corpus, principal, entity_as, entity_as(OWNER, name), name)


def test_a_reader_sees_a_person_from_its_documents_only(access_index: Index) -> None:
    """Every person is named in documents of several label sets (the first one admins' only): an eng
    reader gets the person, from strictly fewer sources than the admin, none of them hidden."""
    eng = Principal(name="eng", labels=("eng",))
    corpus = access_index.corpus
    readable = {corpus.ids[d.name] for d in corpus.readable(eng)}
    for name in ("Alice Johnson", "Bob Miller"):
        admin = access_index.owner.entity(name)
        assert admin.entity is not None and admin.entity.key == name.casefold()
        mine = access_index.as_(eng).entity(name)
        assert mine.entity is not None
        theirs = {s.chunk_id for s in admin.entity.sources if s.document_id in readable}
        assert {s.chunk_id for s in mine.entity.sources} == theirs
        assert len(theirs) < len(admin.entity.sources)  # the admin sees more: doc00 is admins' only
        assert all(s.source_id for s in mine.entity.sources)  # the records' source IDs are filled in
        assert_no_leak(corpus, eng, mine.model_dump(exclude={"query"}), f"entity {name!r}")
