"""The knowledge-graph sink on a real FalkorDB server (and Neo4j when NEO4J_URI is set), real spaCy NER."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import pairwise

import pytest

from unichunk.chunking.models import Chunk
from unichunk.sinks.base import GraphContext, SinkError
from unichunk.sinks.graph.backends import GraphBackend
from unichunk.sinks.graph.extraction import (
    EntityExtractor,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    entity_key,
)
from unichunk.sinks.graph.sink import KnowledgeGraphSink

DOC_A = [
    "Apple Inc. hired Tim Cook in California.",
    "Tim Cook met Zoë Müller at Microsoft in Berlin.",
    "Satya Nadella runs Microsoft from Redmond.",
]
DOC_B = ["Apple Inc hired Tim O'Reilly in Paris.", "Tim O'Reilly founded O'Reilly Media in Sebastopol."]


@pytest.fixture
def sink(graph_backend: GraphBackend) -> KnowledgeGraphSink:
    return KnowledgeGraphSink(graph_backend)


def _relations(sink: KnowledgeGraphSink) -> set[tuple[str, str]]:
    rows = sink.backend.run("MATCH (a:Entity)-[x:RELATED]->(b:Entity) RETURN a.name AS a, b.name AS b")
    return {(r["a"], r["b"]) for r in rows}


def _entity_names(sink: KnowledgeGraphSink) -> set[str]:
    return {r["n"] for r in sink.backend.run("MATCH (e:Entity) RETURN e.name AS n")}


def test_reupsert_is_idempotent(sink: KnowledgeGraphSink, make_doc) -> None:
    doc, chunks = make_doc("doc_a", DOC_A, title="A")
    assert sink.upsert(doc, chunks) == 3
    first = sink.stats()
    entity_before = sink.entity("Tim Cook")
    assert sink.upsert(doc, chunks) == 3
    assert sink.stats() == first
    assert first["Chunk"] == 3 and first["Document"] == 1 and first["FROM_DOCUMENT"] == 3
    assert first["Entity"] == len(_entity_names(sink))  # names are unique keys
    assert sink.entity("Tim Cook") == entity_before
    assert sink.entity("tim cook").source_chunk_ids == (chunks[0].chunk_id, chunks[1].chunk_id)
    assert sink.chunk_ids("doc_a") == {c.chunk_id for c in chunks}
    # "Apple Inc." and "Apple Inc" are one entity across documents.
    doc_b, chunks_b = make_doc("doc_b", DOC_B)
    sink.upsert(doc_b, chunks_b)
    apple = sink.entity("APPLE INC.")
    assert apple is not None and apple.source_chunk_ids == (chunks[0].chunk_id, chunks_b[0].chunk_id)
    assert sink.chunk_ids() == {c.chunk_id for c in chunks + chunks_b}


def test_relations_are_stored_once_per_pair_in_canonical_order(sink: KnowledgeGraphSink, make_doc) -> None:
    doc, chunks = make_doc("doc_a", DOC_A)
    sink.upsert(doc, chunks)
    pairs = _relations(sink)
    assert ("apple inc", "tim cook") in pairs and ("tim cook", "apple inc") not in pairs
    assert all(a < b for a, b in pairs)


def test_next_chunk_chain_follows_chunk_order(sink: KnowledgeGraphSink, make_doc) -> None:
    pieces = [f"Part {i} of the story." for i in range(6)]
    doc, chunks = make_doc("doc_chain", pieces)
    sink.upsert(doc, chunks)
    rows = sink.backend.run(
        "MATCH (a:Chunk)-[:NEXT_CHUNK]->(b:Chunk) RETURN a.chunk_index AS a, b.chunk_index AS b, "
        "a.document_id AS d"
    )
    assert sorted((r["a"], r["b"]) for r in rows) == [(i, i + 1) for i in range(5)]
    # Re-chunked into fewer pieces: the chain is rebuilt without dangling links.
    doc2, chunks2 = make_doc("doc_chain", [*pieces[:2], "A new ending."])
    sink.upsert(doc2, chunks2)
    rows = sink.backend.run(
        "MATCH (a:Chunk)-[:NEXT_CHUNK]->(b:Chunk) RETURN a.chunk_id AS a, b.chunk_id AS b"
    )
    ids = [c.chunk_id for c in chunks2]
    assert sorted((r["a"], r["b"]) for r in rows) == sorted(pairwise(ids))
    stored = sink.backend.run(
        "MATCH (c:Chunk)-[:FROM_DOCUMENT]->(d:Document {document_id: 'doc_chain'}) "
        "RETURN c.chunk_index AS i, c.start_char AS s, c.end_char AS e, c.content AS t, c.token_count AS n"
    )
    assert sorted((r["i"], r["s"], r["e"], r["t"], r["n"]) for r in stored) == [
        (c.chunk_index, c.start_char, c.end_char, c.content, c.token_count) for c in chunks2
    ]


def test_changed_document_replaces_old_chunks_and_trims_entities(sink: KnowledgeGraphSink, make_doc) -> None:
    doc, chunks = make_doc("doc_a", DOC_A)
    sink.upsert(doc, chunks)
    assert sink.entity("Satya Nadella") is not None
    edited = [DOC_A[0], "Tim Cook visited Zoë Müller in Munich."]
    doc2, chunks2 = make_doc("doc_a", edited)
    sink.upsert(doc2, chunks2)

    assert sink.chunk_ids("doc_a") == {c.chunk_id for c in chunks2}
    assert sink.stats()["Chunk"] == 2
    assert (
        sink.entity("Satya Nadella") is None and sink.entity("Redmond") is None
    )  # only in the removed chunk
    assert sink.entity("Berlin") is None  # its chunk changed
    assert sink.entity("Munich").source_chunk_ids == (chunks2[1].chunk_id,)
    tim = sink.entity("Tim Cook")
    assert tim.source_chunk_ids == (chunks2[0].chunk_id, chunks2[1].chunk_id)
    assert "Berlin" not in tim.description and "Munich" in tim.description
    microsoft_pairs = {p for p in _relations(sink) if "microsoft" in p or "satya nadella" in p}
    assert sink.entity("Microsoft") is None and microsoft_pairs == set()
    dangling = sink.backend.run(
        "MATCH (e:Entity)-[:MENTIONED_IN]->(c:Chunk) WHERE NOT c.chunk_id IN $ids RETURN count(e) AS n",
        {"ids": [c.chunk_id for c in chunks2]},
    )
    assert dangling[0]["n"] == 0


def test_delete_keeps_shared_entities_with_the_other_documents_contribution(
    sink: KnowledgeGraphSink, make_doc
) -> None:
    doc_a, chunks_a = make_doc("doc_a", DOC_A)
    doc_b, chunks_b = make_doc(
        "doc_b", ["Apple Inc. hired Tim Cook in Texas.", "Microsoft opened an office in Oslo."]
    )
    sink.upsert(doc_a, chunks_a)
    sink.upsert(doc_b, chunks_b)
    shared_relation = sink.neighbourhood("Apple Inc").relations
    hired = next(r for r in shared_relation if (r.source, r.target) == ("apple inc", "tim cook"))
    assert hired.source_chunk_ids == (chunks_a[0].chunk_id, chunks_b[0].chunk_id) and hired.weight == 2.0

    assert sink.delete("doc_a") == 3
    assert sink.chunk_ids("doc_a") == set() and sink.chunk_ids() == {c.chunk_id for c in chunks_b}
    apple = sink.entity("Apple Inc")
    assert apple.source_chunk_ids == (chunks_b[0].chunk_id,)
    assert apple.description == "Apple Inc. hired Tim Cook in Texas."
    assert sink.entity("Tim Cook").description == "Apple Inc. hired Tim Cook in Texas."
    assert sink.entity("Microsoft").source_chunk_ids == (chunks_b[1].chunk_id,)
    for gone in ("California", "Zoë Müller", "Berlin", "Satya Nadella", "Redmond"):
        assert sink.entity(gone) is None, gone
    relations = {(r.source, r.target): r for r in sink.neighbourhood("Tim Cook", hops=2).relations}
    hired = relations[("apple inc", "tim cook")]
    assert hired.source_chunk_ids == (chunks_b[0].chunk_id,) and hired.weight == 1.0
    assert hired.description == "Apple Inc. hired Tim Cook in Texas."
    assert all(entity_key(n) in _entity_names(sink) for pair in _relations(sink) for n in pair)
    assert ("california", "tim cook") not in _relations(sink)
    assert sink.stats()["Document"] == 1

    assert sink.delete("doc_a") == 0  # deleting again is harmless
    assert sink.delete("doc_b") == 2
    assert sink.stats() == dict.fromkeys(sink.stats(), 0)


class _Scripted(EntityExtractor):
    """Returns fixed entities/relations per chunk text: storage tests independent of what NER finds."""

    def __init__(self, script: dict[str, tuple[list[tuple[str, str, str]], list[tuple[str, str, str, str]]]]):
        self.script = script

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        out = []
        for c in chunks:
            ents, rels = self.script.get(c.content, ([], []))
            out.append(
                Extraction(
                    c.chunk_id,
                    tuple(ExtractedEntity(n, t, d, c.chunk_id) for n, t, d in ents),
                    tuple(ExtractedRelation(s, t, k, d, 2.5, c.chunk_id) for s, t, k, d in rels),
                )
            )
        return out


AWKWARD = [
    ("O'Reilly", "ORG", "It's O'Reilly's \"book\" on C:\\path\\to\nnew lines"),
    ('Zoë "Z" Müller', "PERSON", "Zoë said: 'hello' \\ \"bye\" 🎉"),
    ("東京大学", "ORG", "東京大学は日本の大学です。\tTabbed"),
    ("Back\\slash", "THING", "ends with a backslash \\"),
    ("Nul\x00Byte", "THING", "nul \x00 inside"),
]


def test_unicode_quotes_backslashes_and_newlines_round_trip(graph_backend: GraphBackend, make_doc) -> None:
    text = "Awkward names everywhere."
    script = {
        text: (AWKWARD, [("O'Reilly", 'Zoë "Z" Müller', 'quote\'s, "keys"', "O'Reilly\nmet Zoë \\ 東京")])
    }
    sink = KnowledgeGraphSink(graph_backend, _Scripted(script))
    doc, chunks = make_doc("doc_u", [text])
    sink.upsert(doc, chunks)
    sink.upsert(doc, chunks)
    for name, entity_type, description in AWKWARD[:4]:
        stored = sink.entity(name)
        assert stored is not None, name
        assert (
            stored.display_name == name and stored.type == entity_type and stored.description == description
        )
    assert sink.entity("Nul Byte").description == "nul  inside"
    ctx = sink.context_for_chunks([chunks[0].chunk_id])
    assert len(ctx.entities) == 5
    (relation,) = ctx.relations
    assert relation.keywords == 'quote\'s, "keys"' and relation.description == "O'Reilly\nmet Zoë \\ 東京"
    assert relation.weight == 2.5
    assert ctx.chunk_ids == {chunks[0].chunk_id}
    assert "東京大学" in ctx.to_text()
    sink.delete("doc_u")
    assert sink.stats()["Entity"] == 0


def test_context_and_neighbourhood(sink: KnowledgeGraphSink, make_doc) -> None:
    doc, chunks = make_doc("doc_a", DOC_A)
    doc_b, chunks_b = make_doc("doc_b", DOC_B)
    sink.write(sink.prepare([(doc, chunks), (doc_b, chunks_b)]))
    ctx = sink.context_for_chunks([chunks[2].chunk_id])
    assert {e.name for e in ctx.entities} == {"satya nadella", "microsoft", "redmond"}
    assert {(r.source, r.target) for r in ctx.relations} == {
        ("microsoft", "satya nadella"),
        ("microsoft", "redmond"),
        ("redmond", "satya nadella"),
    }
    # Relations between these entities stated only in other chunks are not this chunk's context.
    ctx0 = sink.context_for_chunks([chunks[1].chunk_id])
    assert all(chunks[1].chunk_id in r.source_chunk_ids for r in ctx0.relations)
    assert sink.context_for_chunks([]) == sink.context_for_chunks(["no-such-chunk"])

    near = sink.neighbourhood("tim cook.")
    assert near.entities[0].name == "tim cook"
    names = {e.name for e in near.entities}
    assert {"apple inc", "zoë müller", "microsoft"} <= names and "satya nadella" not in names
    weights = [r.weight for r in near.relations]
    assert weights == sorted(weights, reverse=True)
    far = sink.neighbourhood("Tim Cook", hops=2, limit=100)
    assert {"satya nadella", "tim o'reilly"} <= {e.name for e in far.entities}
    assert len(sink.neighbourhood("Tim Cook", hops=2, limit=3).relations) == 3
    assert sink.neighbourhood("Nobody At All").relations == ()
    with pytest.raises(ValueError):
        sink.neighbourhood("Tim Cook", hops=9)


def test_strongest_relations_are_each_entitys_heaviest_in_one_read(sink: KnowledgeGraphSink) -> None:
    """Against the relations computed here from every stored one: for each entity its `limit` heaviest
    (ties by source then target name), either direction; many equal weights test the tie-break."""
    rng = random.Random(16)
    names = [f"entity {i:02d}" for i in range(25)]
    pairs = {tuple(sorted(rng.sample(names, 2))) for _ in range(90)}
    sink.backend.run("UNWIND $names AS n CREATE (:Entity {name: n, display_name: n})", {"names": names})
    rows = [
        {"a": a, "b": b, "w": float(rng.randint(1, 4)), "k": f"{a}/{b}", "c": [f"chunk {a} {b}"]}
        for a, b in sorted(pairs)
    ]
    sink.backend.run(
        "UNWIND $rows AS r MATCH (a:Entity {name: r.a}), (b:Entity {name: r.b}) "
        "CREATE (a)-[:RELATED {weight: r.w, keywords: r.k, description: '', source_chunk_ids: r.c}]->(b)",
        {"rows": rows},
    )
    order = sorted(rows, key=lambda r: (-r["w"], r["a"], r["b"]))
    for hubs, limit in ((["entity 03"], 3), (["Entity 03", "entity 07", "entity 11"], 4), (names[:6], 50)):
        keys = {entity_key(h) for h in hubs}
        expected = set()
        for key in keys:
            expected |= {(r["a"], r["b"]) for r in [r for r in order if key in (r["a"], r["b"])][:limit]}
        found = sink.strongest_relations(hubs, limit=limit)
        assert [(r.source, r.target) for r in found.relations] == [
            (r["a"], r["b"]) for r in order if (r["a"], r["b"]) in expected
        ]
        assert all(r.keywords == f"{r.source}/{r.target}" for r in found.relations)  # each its own record
        ends = {n for r in found.relations for n in (r.source, r.target)}
        assert {e.name for e in found.entities} == keys | ends
    assert sink.strongest_relations(["nobody at all"]) == GraphContext()
    assert sink.strongest_relations([]) == GraphContext()


class _Failing(EntityExtractor):
    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        raise RuntimeError("model exploded")


def test_failed_extraction_writes_nothing(graph_backend: GraphBackend, make_doc) -> None:
    sink = KnowledgeGraphSink(graph_backend, _Failing())
    doc, chunks = make_doc("doc_a", DOC_A)
    with pytest.raises(SinkError, match="model exploded"):
        sink.upsert(doc, chunks)
    assert sink.chunk_ids() == set()
    assert sink.stats()["Document"] == 0


class _CrashAfter(GraphBackend):
    """The real backend, interrupted after `limit` statements: a process dying half-way through a write."""

    name = "crashing"

    def __init__(self, inner: GraphBackend, limit: int) -> None:
        self.inner, self.limit = inner, limit

    def run(self, query, params=None, *, write=True):  # type: ignore[no-untyped-def]
        if write and self.limit <= 0:
            raise ConnectionError("process died")
        self.limit -= write
        return self.inner.run(query, params, write=write)

    def setup_schema(self) -> None:
        self.inner.setup_schema()

    def clear(self) -> None:
        self.inner.clear()


@pytest.mark.parametrize("crash_after", [1, 3, 5, 7, 8, 9, 10, 11])
def test_rerun_after_a_crash_half_way_converges(
    graph_backend: GraphBackend, make_doc, crash_after: int
) -> None:
    doc_b, chunks_b = make_doc("doc_b", ["Apple Inc. hired Tim Cook in Texas."])
    doc, chunks = make_doc("doc_a", DOC_A)
    doc2, chunks2 = make_doc("doc_a", [DOC_A[0], "Tim Cook visited Zoë Müller in Munich."])
    clean = KnowledgeGraphSink(graph_backend)
    clean.upsert(doc_b, chunks_b)
    clean.upsert(doc, chunks)
    clean.upsert(doc2, chunks2)
    expected = (clean.stats(), _entity_names(clean), _relations(clean), clean.entity("Tim Cook"))
    clean.delete("doc_a")

    clean.upsert(doc, chunks)
    crashing = KnowledgeGraphSink(_CrashAfter(graph_backend, crash_after))
    with pytest.raises(SinkError, match="process died"):
        crashing.upsert(doc2, chunks2)
        crashing.delete("doc_a")  # reached only if the write had fewer statements than the limit
    clean.upsert(doc2, chunks2)
    assert (clean.stats(), _entity_names(clean), _relations(clean), clean.entity("Tim Cook")) == expected

    crashing = KnowledgeGraphSink(_CrashAfter(graph_backend, min(crash_after, 5)))
    with pytest.raises(SinkError, match="process died"):
        crashing.delete("doc_a")
    clean.delete("doc_a")
    assert clean.chunk_ids() == {chunks_b[0].chunk_id}
    assert sink_entity_sources(clean, "Tim Cook") == (chunks_b[0].chunk_id,)
    assert _entity_names(clean) == {"apple inc", "tim cook", "texas"}


def sink_entity_sources(sink: KnowledgeGraphSink, name: str) -> tuple[str, ...]:
    entity = sink.entity(name)
    assert entity is not None
    return entity.source_chunk_ids


def _null_chunk_ids(sink: KnowledgeGraphSink) -> int:
    rows = sink.backend.run("MATCH (c:Chunk) WHERE c.chunk_id IS NULL RETURN count(c) AS n", write=False)
    return int(rows[0]["n"])


def test_rewrite_removes_a_chunk_node_that_lost_its_chunk_id(sink: KnowledgeGraphSink, make_doc) -> None:
    """The state seen once after a loaded benchmark run: a Chunk without chunk_id, its ID missing."""
    doc, chunks = make_doc("doc_a", DOC_A)
    doc_b, chunks_b = make_doc("doc_b", DOC_B)
    sink.upsert(doc, chunks)
    sink.upsert(doc_b, chunks_b)
    sink.backend.run("MATCH (c:Chunk {chunk_id: $id}) SET c.chunk_id = null", {"id": chunks[2].chunk_id})
    assert _null_chunk_ids(sink) == 1 and None in sink.chunk_ids()

    edited, edited_chunks = make_doc("doc_a", [*DOC_A[:2], DOC_A[2] + " An edited closing line."])
    sink.upsert(edited, edited_chunks)
    assert _null_chunk_ids(sink) == 0
    assert sink.chunk_ids() == {c.chunk_id for c in edited_chunks + chunks_b}
    assert sink.stats()["Chunk"] == 5 and sink.stats()["NEXT_CHUNK"] == 3


def test_delete_removes_a_chunk_node_that_lost_its_chunk_id(sink: KnowledgeGraphSink, make_doc) -> None:
    doc, chunks = make_doc("doc_a", DOC_A)
    doc_b, chunks_b = make_doc("doc_b", DOC_B)
    sink.upsert(doc, chunks)
    sink.upsert(doc_b, chunks_b)
    sink.backend.run("MATCH (c:Chunk {chunk_id: $id}) SET c.chunk_id = null", {"id": chunks[1].chunk_id})
    assert sink.delete("doc_a") == 2  # the two chunks it could name; the unkeyed one goes too
    assert _null_chunk_ids(sink) == 0
    assert sink.chunk_ids() == {c.chunk_id for c in chunks_b}


def test_a_chunk_without_id_is_rejected_before_anything_is_written(
    sink: KnowledgeGraphSink, make_doc
) -> None:
    doc, chunks = make_doc("doc_a", DOC_A)
    broken = [chunks[0], chunks[1].model_copy(update={"chunk_id": ""}), chunks[2]]
    with pytest.raises(SinkError, match="has no chunk_id"):
        sink.write(sink.prepare([(doc, broken)]))
    assert sink.chunk_ids() == set() and sink.stats()["Document"] == 0


class _DroppingChunks(GraphBackend):
    """Acknowledges UPSERT_CHUNKS without storing the last row: a write that silently did less."""

    name = "dropping"

    def __init__(self, inner: GraphBackend) -> None:
        self.inner = inner

    def run(self, query, params=None, *, write=True):  # type: ignore[no-untyped-def]
        if "MERGE (c:Chunk" in query:
            params = {**params, "rows": params["rows"][:-1]}
        return self.inner.run(query, params, write=write)

    def setup_schema(self) -> None:
        self.inner.setup_schema()

    def clear(self) -> None:
        self.inner.clear()


def test_a_chunk_that_did_not_land_fails_the_write(graph_backend: GraphBackend, make_doc) -> None:
    doc, chunks = make_doc("doc_a", DOC_A)
    KnowledgeGraphSink(graph_backend).upsert(doc, chunks)
    edited, edited_chunks = make_doc("doc_a", [*DOC_A[:2], "A new ending."])
    with pytest.raises(SinkError, match="not stored"):
        KnowledgeGraphSink(_DroppingChunks(graph_backend)).upsert(edited, edited_chunks)
    # The old chunk was not removed before the new one existed; a clean retry converges.
    assert chunks[2].chunk_id in KnowledgeGraphSink(graph_backend).chunk_ids()
    KnowledgeGraphSink(graph_backend).upsert(edited, edited_chunks)
    assert KnowledgeGraphSink(graph_backend).chunk_ids() == {c.chunk_id for c in edited_chunks}


def test_an_entity_whose_parallel_lists_disagree_still_takes_writes(
    sink: KnowledgeGraphSink, make_doc
) -> None:
    """The state a 500-document benchmark run once left: an entity's per-chunk lists of unequal length.
    Picking a missing element gave a null inside a list property, which failed every later write of it."""
    doc, chunks = make_doc("doc_a", DOC_A)
    sink.upsert(doc, chunks)
    sink.backend.run(
        "MATCH (e:Entity {name: 'tim cook'}) SET e.chunk_types = e.chunk_types[0..1], "
        "e.chunk_descriptions = e.chunk_descriptions[0..1]"
    )
    doc_b, chunks_b = make_doc("doc_b", [*DOC_B, "Tim Cook visited Paris."])
    sink.upsert(doc_b, chunks_b)  # mentions Tim Cook: its lists are rewritten
    entity = sink.entity("Tim Cook")
    assert entity is not None and len(entity.source_chunk_ids) == 3
    lists = sink.backend.run(
        "MATCH (e:Entity {name: 'tim cook'}) RETURN size(e.chunk_types) AS t, size(e.chunk_descriptions) AS d",
        write=False,
    )
    assert lists == [{"t": 3, "d": 3}]
    sink.delete("doc_a")  # trimming works on the repaired lists
    assert sink_entity_sources(sink, "Tim Cook") == (chunks_b[2].chunk_id,)


def test_each_chunk_gets_its_own_share_of_the_graph(sink: KnowledgeGraphSink, make_doc) -> None:
    """`retrieval.graph_context.graph_by_chunk` (the /ui document view): per chunk, exactly the entities
    taken from it and the relations stated in it, in one read; an unknown chunk gets nothing."""
    from unichunk.retrieval.graph_context import graph_by_chunk

    doc, chunks = make_doc("doc_a", DOC_A)
    sink.write(sink.prepare([(doc, chunks)]))
    ids = [c.chunk_id for c in chunks]
    shares = graph_by_chunk(sink, [*ids, "no-such-chunk"])
    assert list(shares) == [*ids, "no-such-chunk"]
    for chunk_id in ids:
        alone = sink.context_for_chunks([chunk_id])
        assert {e.name for e in shares[chunk_id].entities} == {e.name for e in alone.entities}
        assert all(chunk_id in r.source_chunk_ids for r in shares[chunk_id].relations)
        assert {(r.source, r.target) for r in shares[chunk_id].relations} == {
            (r.source, r.target) for r in alone.relations
        }
    assert {e.name for e in shares[ids[2]].entities} == {"satya nadella", "microsoft", "redmond"}
    assert shares["no-such-chunk"] == GraphContext()
    assert graph_by_chunk(sink, []) == {}
