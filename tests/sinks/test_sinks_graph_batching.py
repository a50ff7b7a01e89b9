"""The graph sink writes a batch of documents with each kind of statement once, on a real FalkorDB server.

The reference for every batched result is the same documents written one batch per document, the way the
sink wrote before: both graphs are dumped in full (every property, parallel lists in stored order, every
edge with duplicates kept) and compared exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.graph.backends import FalkorDBBackend, GraphBackend
from unichunk.sinks.graph.cypher import UPSERT_ENTITIES, UPSERT_RELATIONS
from unichunk.sinks.graph.extraction import EntityExtractor, ExtractedEntity, ExtractedRelation, Extraction
from unichunk.sinks.graph.sink import KnowledgeGraphSink

TYPES = {"Acme": "ORG", "Hub": "PLACE", "Oslo": "PLACE", "Ada": "PERSON", "Bob": "PERSON", "Carl": "PERSON"}

# Acme, Hub, Ada and Bob are mentioned by several documents, as are the relations between them.
BATCH = {
    "doc_1": ["Acme hired Ada.", "Ada met Bob at Hub."],
    "doc_2": ["Acme hired Bob.", "Bob joined Hub.", "Hub hired Ada."],
    "doc_3": ["Hub is in Oslo."],
    "doc_4": ["Acme hired Ada again.", "Ada and Acme at Hub, Acme and Ada.", "Oslo welcomes Acme."],
}
# doc_2 re-chunked: its first chunk kept (same ID), the others replaced, a new entity added.
DOC_2_EDITED = ["Acme hired Bob.", "Bob left Hub for Oslo.", "Carl joined Acme."]


class _Rules(EntityExtractor):
    """Known capitalised words are entities, consecutive ones are related: deterministic and shared."""

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        out = []
        for c in chunks:
            words = [w for w in re.findall(r"[A-Z][a-z]+", c.content) if w in TYPES]
            entities = tuple(
                ExtractedEntity(w, TYPES[w], c.content, c.chunk_id) for w in dict.fromkeys(words)
            )
            relations = tuple(
                ExtractedRelation(a, b, f"{a}+{b}", f"{a} with {b}: {c.content}", 1.0 + i, c.chunk_id)
                for i, (a, b) in enumerate(pairwise(words))
                if a != b
            )
            out.append(Extraction(c.chunk_id, entities, relations))
        return out


class _Counting(GraphBackend):
    """The real backend, recording every statement it is asked to run."""

    def __init__(self, inner: GraphBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def run(self, query, params=None, *, write=True):  # type: ignore[no-untyped-def]
        self.calls.append((query, dict(params or {})))
        return self.inner.run(query, params, write=write)

    def setup_schema(self) -> None:
        self.inner.setup_schema()

    def clear(self) -> None:
        self.inner.clear()


def _docs(make_doc, batch: dict[str, list[str]]) -> list[tuple[Document, list[Chunk]]]:
    return [make_doc(doc_id, pieces, title=f"Title of {doc_id}") for doc_id, pieces in batch.items()]


def _dump(backend: GraphBackend) -> dict[str, Any]:
    """Everything stored, ordered so that equal graphs give equal dumps (list properties keep their order)."""

    def rows(query: str) -> list[dict]:
        return backend.run(query, write=False)

    def pairs(rel: str, a: str, b: str) -> list[tuple[str, str]]:
        found = rows(f"MATCH (x)-[:{rel}]->(y) RETURN x.{a} AS a, y.{b} AS b")
        return sorted((r["a"], r["b"]) for r in found)

    return {
        "documents": sorted(
            (r["id"], dict(r["p"]))
            for r in rows("MATCH (d:Document) RETURN d.document_id AS id, properties(d) AS p")
        ),
        "chunks": sorted(
            (r["id"], dict(r["p"]))
            for r in rows("MATCH (c:Chunk) RETURN c.chunk_id AS id, properties(c) AS p")
        ),
        "entities": sorted(
            (r["id"], dict(r["p"])) for r in rows("MATCH (e:Entity) RETURN e.name AS id, properties(e) AS p")
        ),
        "relations": sorted(
            ((r["a"], r["b"]), dict(r["p"]))
            for r in rows(
                "MATCH (a:Entity)-[x:RELATED]->(b:Entity) RETURN a.name AS a, b.name AS b, properties(x) AS p"
            )
        ),
        "from_document": pairs("FROM_DOCUMENT", "chunk_id", "document_id"),
        "next_chunk": pairs("NEXT_CHUNK", "chunk_id", "chunk_id"),
        "mentioned_in": pairs("MENTIONED_IN", "name", "chunk_id"),
    }


def _one_by_one(backend: GraphBackend, *batches: list[tuple[Document, list[Chunk]]]) -> dict[str, Any]:
    """The reference: each batch's documents written one batch per document, on a cleared graph."""
    backend.clear()
    sink = KnowledgeGraphSink(backend, _Rules())
    for batch in batches:
        for doc, chunks in batch:
            sink.upsert(doc, chunks)
    dump = _dump(backend)
    backend.clear()
    return dump


def test_a_batch_stores_what_one_batch_per_document_stores(graph_backend: GraphBackend, make_doc) -> None:
    docs = _docs(make_doc, BATCH)
    expected = _one_by_one(graph_backend, docs)
    sink = KnowledgeGraphSink(graph_backend, _Rules())
    assert sink.write(sink.prepare(docs)) == sum(len(c) for _, c in docs)
    assert _dump(graph_backend) == expected

    # What that comparison covers, spelled out for the entity and relation every document shares.
    by_doc = {doc.document_id: chunks for doc, chunks in docs}
    acme = sink.entity("Acme")
    assert acme is not None and acme.type == "ORG"
    assert acme.source_chunk_ids == (
        by_doc["doc_1"][0].chunk_id,
        by_doc["doc_2"][0].chunk_id,
        by_doc["doc_4"][0].chunk_id,
        by_doc["doc_4"][1].chunk_id,
        by_doc["doc_4"][2].chunk_id,
    )
    assert acme.description == "\n".join(BATCH["doc_1"][:1] + BATCH["doc_2"][:1] + BATCH["doc_4"][:1])
    hired = {(r.source, r.target): r for r in sink.neighbourhood("Ada").relations}[("acme", "ada")]
    # doc_4's second chunk states the pair twice (weights 1 and 4 summed in that chunk).
    assert hired.source_chunk_ids == (
        by_doc["doc_1"][0].chunk_id,
        by_doc["doc_4"][0].chunk_id,
        by_doc["doc_4"][1].chunk_id,
    )
    assert hired.weight == 1.0 + 1.0 + (1.0 + 4.0)
    stats = sink.stats()
    assert stats["Document"] == 4 and stats["Chunk"] == 9 and stats["FROM_DOCUMENT"] == 9
    assert stats["NEXT_CHUNK"] == 5 and stats["Entity"] == 5  # no Carl yet


def test_rewriting_a_batch_with_a_rechunked_document(graph_backend: GraphBackend, make_doc) -> None:
    first = _docs(make_doc, BATCH)
    second = _docs(make_doc, {**BATCH, "doc_2": DOC_2_EDITED})
    expected = _one_by_one(graph_backend, first, second)
    sink = KnowledgeGraphSink(graph_backend, _Rules())
    sink.write(sink.prepare(first))
    before = {doc.document_id: chunks for doc, chunks in first}
    hub_before = sink.entity("Hub")
    assert sink.write(sink.prepare(second)) == 9
    assert _dump(graph_backend) == expected

    after = {doc.document_id: chunks for doc, chunks in second}
    assert after["doc_2"][0].chunk_id == before["doc_2"][0].chunk_id
    stale = {c.chunk_id for c in before["doc_2"][1:]}
    assert sink.chunk_ids("doc_2") == {c.chunk_id for c in after["doc_2"]}
    assert not stale & sink.chunk_ids()
    # Exactly the stale chunks' contributions went; the other documents' stayed. Every document of the
    # batch was written again, so the lists are in batch order (as written one by one).
    hub = sink.entity("Hub")
    assert hub is not None and hub_before is not None
    assert set(hub_before.source_chunk_ids) - set(hub.source_chunk_ids) == stale
    assert hub.source_chunk_ids == (
        before["doc_1"][1].chunk_id,
        after["doc_2"][1].chunk_id,
        before["doc_3"][0].chunk_id,
        before["doc_4"][1].chunk_id,
    )
    relations = {(r.source, r.target): r for r in sink.neighbourhood("Bob", hops=2, limit=100).relations}
    assert relations[("bob", "hub")].source_chunk_ids == (
        before["doc_1"][1].chunk_id,
        after["doc_2"][1].chunk_id,
    )
    assert ("ada", "hub") not in relations  # stated only in a replaced chunk
    assert ("acme", "carl") in relations and ("hub", "oslo") in relations
    assert sink.entity("Carl").source_chunk_ids == (after["doc_2"][2].chunk_id,)
    dangling = graph_backend.run(
        "MATCH (e:Entity)-[:MENTIONED_IN]->(c:Chunk) WHERE c.chunk_id IN $ids RETURN count(e) AS n",
        {"ids": sorted(stale)},
        write=False,
    )
    assert dangling[0]["n"] == 0


def test_writing_the_same_batch_again_changes_nothing(graph_backend: GraphBackend, make_doc) -> None:
    docs = _docs(make_doc, BATCH)
    sink = KnowledgeGraphSink(graph_backend, _Rules())
    prepared = sink.prepare(docs)
    sink.write(prepared)
    once = _dump(graph_backend)
    sink.write(prepared)
    assert _dump(graph_backend) == once
    sink.write(sink.prepare(docs))  # prepared afresh: the same rows
    assert _dump(graph_backend) == once
    # A document given twice in one batch is written once (FalkorDB must not see its key twice).
    doc, chunks = docs[1]
    assert sink.write(sink.prepare([docs[0], (doc, chunks), (doc, chunks)])) == 2 + 3 + 3
    assert _dump(graph_backend)["chunks"] == once["chunks"]


def _documents(make_doc, n: int, suffix: str = "") -> list[tuple[Document, list[Chunk]]]:
    return [
        make_doc(f"doc_{i}", [f"Acme hired Ada number {i}.", f"Ada met Bob at Hub {i}{suffix}."])
        for i in range(n)
    ]


def test_statements_per_batch_do_not_grow_with_documents(graph_backend: GraphBackend, make_doc) -> None:
    counts = {}
    for n in (1, 20):
        graph_backend.clear()
        counting = _Counting(graph_backend)
        sink = KnowledgeGraphSink(counting, _Rules())
        counting.calls.clear()
        sink.write(sink.prepare(_documents(make_doc, n)))
        fresh = len(counting.calls)
        counting.calls.clear()
        sink.write(sink.prepare(_documents(make_doc, n, suffix=" again")))  # every second chunk replaced
        counts[n] = (fresh, len(counting.calls))
        assert sink.stats()["Chunk"] == 2 * n and sink.stats()["Entity"] == 4
    assert counts[1] == counts[20]
    # documents, a read of the chunks stored before, chunks, changed chunks, links, unlink, mentions,
    # entities, relations, a read of the chunks stored after; then the six statements trimming what the
    # kept chunks no longer contribute and removing the replaced chunks.
    assert counts[20] == (10, 10 + 6)


def test_statements_are_cut_at_batch_size_and_never_repeat_a_merge_key(
    graph_backend: GraphBackend, make_doc
) -> None:
    counting = _Counting(graph_backend)
    sink = KnowledgeGraphSink(counting, _Rules(), batch_size=7)
    counting.calls.clear()
    docs = _documents(make_doc, 20)
    sink.write(sink.prepare(docs))
    sizes = [len(next(iter(params.values()))) for _, params in counting.calls]
    assert max(sizes) == 7 and len(counting.calls) > 9
    names = [r["name"] for q, p in counting.calls if q == UPSERT_ENTITIES for r in p["rows"]]
    pairs = [
        (r["source"], r["target"]) for q, p in counting.calls if q == UPSERT_RELATIONS for r in p["rows"]
    ]
    assert sorted(names) == ["acme", "ada", "bob", "hub"]
    assert sorted(pairs) == [("acme", "ada"), ("ada", "bob"), ("bob", "hub")]
    expected = _one_by_one(graph_backend, docs)
    KnowledgeGraphSink(graph_backend, _Rules(), batch_size=7).write(sink.prepare(docs))
    assert _dump(graph_backend) == expected


def _chunk_index_max_doc_id(backend: GraphBackend) -> int:
    rows = backend.run("CALL db.indexes() YIELD label, info RETURN label, info", write=False)
    return next(int(r["info"]["maxDocId"]) for r in rows if r["label"] == "Chunk")


def test_an_existing_chunk_is_updated_only_where_it_changed(graph_backend: GraphBackend, make_doc) -> None:
    sink = KnowledgeGraphSink(graph_backend, _Rules())
    doc, chunks = make_doc("doc_1", ["Acme hired Ada.", "Ada met Bob at Hub."])
    sink.upsert(doc, chunks)
    falkordb = isinstance(graph_backend, FalkorDBBackend)
    if falkordb:  # FalkorDB re-indexes a node on any SET, even an unchanged one: none may run
        indexed = _chunk_index_max_doc_id(graph_backend)
        sink.upsert(doc, chunks)
        assert _chunk_index_max_doc_id(graph_backend) == indexed

    # Earlier text grew: the second chunk keeps its ID (same index and content) but moves.
    doc2, chunks2 = make_doc("doc_1", ["Acme hired Ada today.", "Ada met Bob at Hub."])
    assert chunks2[1].chunk_id == chunks[1].chunk_id and chunks2[1].start_char == chunks[1].start_char + 6
    sink.upsert(doc2, chunks2)
    stored = graph_backend.run(
        "MATCH (c:Chunk) RETURN c.chunk_id AS id, c.start_char AS s, c.end_char AS e, c.document_id AS d",
        write=False,
    )
    assert sorted((r["id"], r["s"], r["e"], r["d"]) for r in stored) == sorted(
        (c.chunk_id, c.start_char, c.end_char, "doc_1") for c in chunks2
    )
    # A property the rows did not carry before (the index generation) is added to the existing chunks.
    KnowledgeGraphSink(graph_backend, _Rules(), generation="g7").upsert(doc2, chunks2)
    rows = graph_backend.run("MATCH (c:Chunk) RETURN c.generation AS g", write=False)
    assert [r["g"] for r in rows] == ["g7", "g7"]
    # A chunk that lost its document_id (never expected) is found by ID and repaired by the next write.
    graph_backend.run("MATCH (c:Chunk {chunk_id: $id}) SET c.document_id = null", {"id": chunks2[0].chunk_id})
    sink.upsert(doc2, chunks2)
    assert sink.chunk_ids("doc_1") == {c.chunk_id for c in chunks2}
    if falkordb:
        indexed = _chunk_index_max_doc_id(graph_backend)
        sink.upsert(doc2, chunks2)
        assert _chunk_index_max_doc_id(graph_backend) == indexed
