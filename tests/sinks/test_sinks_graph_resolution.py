"""Entity resolution on the graph's write side, on a real FalkorDB server (and Neo4j when NEO4J_URI is set).

A scripted extractor fixes what each chunk names, so every alias case is exact: titles, honorifics and
possessives, a surname after the full name in one document, acronyms, two Okafors in one document and two in
two documents (never merged), a PERSON and a place of one name (never merged). Each merge is recorded per
chunk, and the graph is a function of what is stored: written in any order, or after a delete and a
re-ingest, or after an edit, it is the graph a fresh ingest of the same documents gives, every property of
every node and relationship compared.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.graph.backends import GraphBackend
from unichunk.sinks.graph.extraction import (
    EntityExtractor,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    SpacyExtractor,
)
from unichunk.sinks.graph.names import alias_key, base_key, looks_like_acronym, type_class
from unichunk.sinks.graph.resolution import aggregate
from unichunk.sinks.graph.sink import KnowledgeGraphSink

Entities = list[tuple[str, str]]  # (name, type)
Relations = list[tuple[str, str]]  # (source, target)


class _Scripted(EntityExtractor):
    """Per chunk text: the entities (name, type) and relations (source, target) it names; a chunk's
    description of each entity is the chunk's text, a relation's is "source~target: text"."""

    def __init__(self, script: dict[str, tuple[Entities, Relations]]) -> None:
        self.script = script

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        return [_extraction(c.chunk_id, c.content, *self.script.get(c.content, ([], []))) for c in chunks]


def _extraction(chunk_id: str, text: str, entities: Entities, relations: Relations) -> Extraction:
    return Extraction(
        chunk_id,
        tuple(ExtractedEntity(n, t, text, chunk_id) for n, t in entities),
        tuple(ExtractedRelation(s, t, "meets", f"{s}~{t}: {text}", 1.0, chunk_id) for s, t in relations),
    )


def _sink(backend: GraphBackend, script: dict[str, tuple[Entities, Relations]]) -> KnowledgeGraphSink:
    return KnowledgeGraphSink(backend, _Scripted(script))


def _node(sink: KnowledgeGraphSink, name: str) -> dict[str, Any] | None:
    rows = sink.backend.run(
        "MATCH (e:Entity {name: $name}) RETURN properties(e) AS p", {"name": name}, write=False
    )
    return dict(rows[0]["p"]) if rows else None


def _names(sink: KnowledgeGraphSink) -> set[str]:
    return {r["n"] for r in sink.backend.run("MATCH (e:Entity) RETURN e.name AS n", write=False)}


def _pairs(sink: KnowledgeGraphSink) -> set[tuple[str, str]]:
    rows = sink.backend.run(
        "MATCH (a:Entity)-[:RELATED]->(b:Entity) RETURN a.name AS a, b.name AS b", write=False
    )
    return {(r["a"], r["b"]) for r in rows}


def _dump(backend: GraphBackend) -> dict[str, Any]:
    """Everything stored, ordered so that equal graphs give equal dumps (list properties keep their order)."""

    def rows(query: str) -> list[dict]:
        return backend.run(query, write=False)

    def props(query: str) -> list[tuple[Any, dict]]:
        return sorted(((r["id"], dict(r["p"])) for r in rows(query)), key=lambda item: repr(item))

    def pairs(rel: str, a: str, b: str) -> list[tuple[str, str]]:
        return sorted(
            (r["a"], r["b"]) for r in rows(f"MATCH (x)-[:{rel}]->(y) RETURN x.{a} AS a, y.{b} AS b")
        )

    return {
        "documents": props("MATCH (d:Document) RETURN d.document_id AS id, properties(d) AS p"),
        "chunks": props("MATCH (c:Chunk) RETURN c.chunk_id AS id, properties(c) AS p"),
        "entities": props("MATCH (e:Entity) RETURN e.name AS id, properties(e) AS p"),
        "relations": props(
            "MATCH (a:Entity)-[x:RELATED]->(b:Entity) RETURN [a.name, b.name] AS id, properties(x) AS p"
        ),
        "from_document": pairs("FROM_DOCUMENT", "chunk_id", "document_id"),
        "next_chunk": pairs("NEXT_CHUNK", "chunk_id", "chunk_id"),
        "mentioned_in": pairs("MENTIONED_IN", "name", "chunk_id"),
    }


# --- the name rules ------------------------------------------------------------------------------------


def test_base_keys_drop_possessives_titles_dots_and_a_leading_article() -> None:
    assert base_key("IBM's", "ORG") == "ibm"
    assert base_key("Okafor’s", "PERSON") == "okafor"
    assert base_key("Dr. Margaret Okafor Jr.", "PERSON") == "margaret okafor"
    assert base_key("Mrs Okafor", "PERSON") == "okafor"
    assert base_key("U.S.A.", "GPE") == "usa"
    assert base_key("the World Health Organization", "ORG") == "world health organization"
    assert base_key("Dr. Who", "WORK_OF_ART") == "dr. who"  # titles are a person's only
    assert base_key("The", "ORG") == "the"
    assert alias_key("margaret okafor", "PERSON") == "okafor"
    assert alias_key("international business machines", "ORG") == "ibm"
    assert alias_key("okafor", "PERSON") is None and alias_key("blue sky thinking", "CONCEPT") is None
    assert looks_like_acronym("IBM") and looks_like_acronym("I.B.M.") and looks_like_acronym("BoE")
    assert not looks_like_acronym("Ibm") and not looks_like_acronym("New York")
    assert type_class("GPE") == type_class("LOC") != type_class("PERSON") != type_class("ORG")


# --- resolution inside a document ----------------------------------------------------------------------

OKAFOR_DOC = {
    "Margaret Okafor founded Acme.": (
        [("Margaret Okafor", "PERSON"), ("Acme", "ORG")],
        [("Margaret Okafor", "Acme")],
    ),
    "Dr. Okafor's lab grew.": ([("Dr. Okafor's", "PERSON")], []),
    "Later Okafor left Acme.": ([("Okafor", "PERSON"), ("Acme", "ORG")], [("Okafor", "Acme")]),
    "Okafor thanked Margaret Okafor.": (
        [("Okafor", "PERSON"), ("Margaret Okafor", "PERSON")],
        [("Okafor", "Margaret Okafor")],
    ),
}


def test_a_surname_after_the_full_name_in_one_document_is_that_person(
    graph_backend: GraphBackend, make_doc
) -> None:
    pieces = list(OKAFOR_DOC)
    sink = _sink(graph_backend, OKAFOR_DOC)
    doc, chunks = make_doc("doc_okafor", pieces)
    sink.upsert(doc, chunks)
    ids = [c.chunk_id for c in chunks]
    assert _names(sink) == {"margaret okafor", "acme"}
    okafor = _node(sink, "margaret okafor")
    assert okafor is not None
    assert okafor["source_chunk_ids"] == ids
    assert okafor["display_name"] == "Margaret Okafor" and okafor["type"] == "PERSON"
    assert okafor["alias"] == "okafor"
    # Each merge with the chunk that caused it: the keys the chunk's names had before.
    assert okafor["chunk_merged_from"] == ["", "dr. okafor's", "okafor", "okafor"]
    # "Later Okafor left Acme" relates the person; the relation of Okafor to herself is dropped.
    assert _pairs(sink) == {("acme", "margaret okafor")}
    (related,) = sink.neighbourhood("Acme").relations
    assert related.source_chunk_ids == (ids[0], ids[2]) and related.weight == 2.0
    # The same chunks in another order resolve the same way (the short name first).
    sink.delete("doc_okafor")
    doc2, chunks2 = make_doc("doc_okafor", pieces[::-1])
    sink.upsert(doc2, chunks2)
    assert _names(sink) == {"margaret okafor", "acme"}
    assert _node(sink, "margaret okafor")["chunk_merged_from"] == ["okafor", "okafor", "dr. okafor's", ""]


def test_two_okafors_in_one_document_stay_apart(graph_backend: GraphBackend, make_doc) -> None:
    script = {
        "Margaret Okafor and John Okafor met.": (
            [("Margaret Okafor", "PERSON"), ("John Okafor", "PERSON")],
            [],
        ),
        "Dr. Okafor spoke.": ([("Dr. Okafor", "PERSON")], []),
    }
    sink = _sink(graph_backend, script)
    sink.upsert(*make_doc("doc_two", list(script)))
    assert _names(sink) == {"margaret okafor", "john okafor", "okafor"}
    assert _node(sink, "okafor")["chunk_merged_from"] == ["dr. okafor"]


def test_two_people_with_one_surname_in_two_documents_do_not_merge(
    graph_backend: GraphBackend, make_doc
) -> None:
    script = {
        "Margaret Okafor runs the lab.": ([("Margaret Okafor", "PERSON")], []),
        "Dr. Okafor published.": ([("Dr. Okafor", "PERSON")], []),
        "John Okafor runs the bakery.": ([("John Okafor", "PERSON")], []),
        "Mr. Okafor baked.": ([("Mr. Okafor", "PERSON")], []),
        "Okafor won the race.": ([("Okafor", "PERSON")], []),
    }
    sink = _sink(graph_backend, script)
    lab, lab_chunks = make_doc("doc_lab", list(script)[:2])
    bakery, bakery_chunks = make_doc("doc_bakery", list(script)[2:4])
    race, race_chunks = make_doc("doc_race", list(script)[4:])
    sink.write(sink.prepare([(lab, lab_chunks), (bakery, bakery_chunks), (race, race_chunks)]))
    assert _names(sink) == {"margaret okafor", "john okafor", "okafor"}
    assert _node(sink, "margaret okafor")["source_chunk_ids"] == [c.chunk_id for c in lab_chunks]
    assert _node(sink, "john okafor")["source_chunk_ids"] == [c.chunk_id for c in bakery_chunks]
    assert _node(sink, "okafor")["source_chunk_ids"] == [race_chunks[0].chunk_id]
    # The surname finds all three (by key and by alias), each still its own entity.
    found = sink.find_entities(["okafor", "margaret okafor"])
    assert {e.name for e in found["okafor"]} == {"okafor", "john okafor", "margaret okafor"}
    assert [e.name for e in found["margaret okafor"]] == ["margaret okafor"]


def test_an_acronym_is_the_one_named_group_it_abbreviates(graph_backend: GraphBackend, make_doc) -> None:
    script = {
        "International Business Machines opened in Nairobi.": (
            [("International Business Machines", "ORG"), ("Nairobi", "GPE")],
            [("International Business Machines", "Nairobi")],
        ),
        "IBM hired; I.B.M. grew; IBM's staff.": ([("IBM", "ORG"), ("I.B.M.", "ORG"), ("IBM's", "ORG")], []),
        "The Bank of England and the BoE.": ([("the Bank of England", "ORG"), ("BoE", "ORG")], []),
        "IBM in Nairobi.": ([("IBM", "ORG"), ("Nairobi", "GPE")], [("IBM", "Nairobi")]),
        "Ibm is not written as an acronym.": ([("Ibm", "ORG")], []),
    }
    sink = _sink(graph_backend, script)
    doc, chunks = make_doc("doc_ibm", list(script))
    sink.upsert(doc, chunks)
    ids = [c.chunk_id for c in chunks]
    assert _names(sink) == {"international business machines", "nairobi", "bank of england", "ibm"}
    ibm = _node(sink, "international business machines")
    assert ibm["source_chunk_ids"] == [ids[0], ids[1], ids[3]] and ibm["alias"] == "ibm"
    assert ibm["display_name"] == "International Business Machines"
    assert ibm["chunk_merged_from"] == ["", "i.b.m\nibm\nibm's", "ibm"]
    assert _node(sink, "bank of england")["display_name"] == "the Bank of England"
    assert _node(sink, "bank of england")["chunk_merged_from"] == ["boe\nthe bank of england"]
    assert _node(sink, "ibm")["source_chunk_ids"] == [ids[4]]  # "Ibm": an ordinary word, kept apart
    (related,) = sink.neighbourhood("Nairobi").relations
    assert (related.source, related.target) == ("international business machines", "nairobi")
    assert related.source_chunk_ids == (ids[0], ids[3])


def test_a_person_and_a_place_of_one_name_do_not_merge(graph_backend: GraphBackend, make_doc) -> None:
    script = {
        "Michael Jordan visited Jordan.": ([("Michael Jordan", "PERSON"), ("Jordan", "GPE")], []),
        "Jordan scored in Amman.": ([("Jordan", "PERSON"), ("Amman", "GPE")], [("Amman", "Jordan")]),
        "The WHO and Who.": ([("World Health Organization", "ORG"), ("WHO", "PERSON")], []),
    }
    sink = _sink(graph_backend, script)
    doc, chunks = make_doc("doc_jordan", list(script))
    sink.upsert(doc, chunks)
    ids = [c.chunk_id for c in chunks]
    assert _names(sink) == {"michael jordan", "jordan", "amman", "world health organization", "who"}
    assert _node(sink, "michael jordan")["source_chunk_ids"] == [ids[0], ids[1]]
    jordan = _node(sink, "jordan")
    assert jordan["source_chunk_ids"] == [ids[0]] and jordan["type"] == "GPE" and "alias" not in jordan
    # The relation end "Jordan" in the second chunk is the PERSON that chunk names: Michael Jordan.
    assert _pairs(sink) == {("amman", "michael jordan")}
    assert _node(sink, "who")["type"] == "PERSON"  # a PERSON never stands for an ORG's initials


def test_an_untyped_relation_end_merges_with_nothing(graph_backend: GraphBackend, make_doc) -> None:
    script = {
        "Margaret Okafor met Ada Lovelace.": (
            [("Margaret Okafor", "PERSON"), ("Ada Lovelace", "PERSON")],
            [],
        ),
        "Okafor wrote to Lovelace.": ([("Lovelace", "PERSON")], [("Okafor", "Lovelace")]),
    }
    sink = _sink(graph_backend, script)
    doc, chunks = make_doc("doc_untyped", list(script))
    sink.upsert(doc, chunks)
    assert _names(sink) == {"margaret okafor", "ada lovelace", "okafor"}
    assert _node(sink, "okafor")["type"] == "UNKNOWN" and "alias" not in _node(sink, "okafor")
    assert _pairs(sink) == {("ada lovelace", "okafor")}


def test_the_alias_follows_the_type_through_trims(graph_backend: GraphBackend, make_doc) -> None:
    """The shown type (and so the alias) is the first chunk's by ID: deleting that document changes both,
    re-ingesting it restores both."""
    script = {
        "Jordan Lee Ltd trades.": ([("Jordan Lee", "ORG")], []),
        "Jordan Lee sings.": ([("Jordan Lee", "PERSON")], []),
    }
    sink = _sink(graph_backend, script)
    first = make_doc("doc_a", ["Jordan Lee Ltd trades."])
    sink.upsert(*make_doc("doc_b", ["Jordan Lee sings."]))
    assert (_node(sink, "jordan lee")["type"], _node(sink, "jordan lee")["alias"]) == ("PERSON", "lee")
    sink.upsert(*first)
    assert (_node(sink, "jordan lee")["type"], _node(sink, "jordan lee")["alias"]) == ("ORG", "jl")
    assert {e.name for e in sink.find_entities(["jl"]).get("jl", ())} == {"jordan lee"}
    sink.delete("doc_a")
    assert (_node(sink, "jordan lee")["type"], _node(sink, "jordan lee")["alias"]) == ("PERSON", "lee")
    assert sink.find_entities(["jl"]) == {}


def test_find_entities_by_surname_acronym_and_resolved_key(graph_backend: GraphBackend, make_doc) -> None:
    script = {
        "Margaret Okafor leads.": ([("Margaret Okafor", "PERSON")], []),
        "Prof. Okafor teaches.": ([("Prof. Okafor", "PERSON")], []),
        "International Business Machines sells.": ([("International Business Machines", "ORG")], []),
        "IBM buys.": ([("IBM", "ORG")], []),
    }
    sink = _sink(graph_backend, script)
    sink.upsert(*make_doc("doc_okafor", list(script)[:2]))
    sink.upsert(*make_doc("doc_long", list(script)[2:3]))
    sink.upsert(*make_doc("doc_short", list(script)[3:]))
    found = sink.find_entities(["okafor", "ibm", "margaret okafor", "prof. okafor"])
    assert [e.name for e in found["okafor"]] == ["margaret okafor"]
    assert [e.name for e in found["margaret okafor"]] == ["margaret okafor"]
    assert (
        found["okafor"][0].display_name == "Margaret Okafor" and len(found["okafor"][0].source_chunk_ids) == 2
    )
    # Across documents nothing is re-keyed: the acronym's own entity, and the long name by its alias.
    assert {e.name for e in found["ibm"]} == {"ibm", "international business machines"}
    assert "prof. okafor" not in found


# --- every merge undone with the chunks that caused it; the graph a function of what is stored ----------


def test_an_edit_undoes_exactly_the_merge_its_chunks_caused(graph_backend: GraphBackend, make_doc) -> None:
    script = {
        "Margaret Okafor founded Acme.": (
            [("Margaret Okafor", "PERSON"), ("Acme", "ORG")],
            [("Margaret Okafor", "Acme")],
        ),
        "Dr. Okafor left Acme.": ([("Dr. Okafor", "PERSON"), ("Acme", "ORG")], [("Dr. Okafor", "Acme")]),
        "Acme was founded by someone.": ([("Acme", "ORG")], []),
        "Margaret Okafor visits.": ([("Margaret Okafor", "PERSON")], []),
    }
    sink = _sink(graph_backend, script)
    other = make_doc("doc_other", ["Margaret Okafor visits."])
    before = make_doc("doc_edit", list(script)[:2])
    after = make_doc("doc_edit", ["Acme was founded by someone.", "Dr. Okafor left Acme."])
    assert after[1][1].chunk_id == before[1][1].chunk_id  # the "Dr. Okafor" chunk is kept
    sink.upsert(*other)
    sink.upsert(*before)
    kept = before[1][1].chunk_id
    assert kept in _node(sink, "margaret okafor")["source_chunk_ids"]
    sink.upsert(*after)
    edited = _dump(graph_backend)
    # The kept chunk's "Dr. Okafor" is now alone in its document: no longer Margaret Okafor.
    assert _node(sink, "margaret okafor")["source_chunk_ids"] == [other[1][0].chunk_id]
    assert _node(sink, "okafor")["source_chunk_ids"] == [kept]
    assert _pairs(sink) == {("acme", "okafor")}
    graph_backend.clear()
    fresh = _sink(graph_backend, script)
    fresh.upsert(*other)
    fresh.upsert(*after)
    assert _dump(graph_backend) == edited
    # And back: the merge returns with the chunk that causes it.
    fresh.upsert(*before)
    back = _dump(graph_backend)
    graph_backend.clear()
    _sink(graph_backend, script).write(fresh.prepare([before, other]))
    assert _dump(graph_backend) == back


CORPUS = {
    "doc_1": ["Margaret Okafor joined International Business Machines.", "Dr. Okafor and IBM in Lagos."],
    "doc_2": ["John Okafor bakes in Lagos.", "Mr. Okafor's bread.", "IBM's bakery contract."],
    "doc_3": ["International Business Machines in Lagos.", "Okafor met the press."],
    "doc_4": ["Lagos hosts IBM and Acme.", "Acme hired Margaret Okafor."],
}
CORPUS_SCRIPT: dict[str, tuple[Entities, Relations]] = {
    CORPUS["doc_1"][0]: (
        [("Margaret Okafor", "PERSON"), ("International Business Machines", "ORG")],
        [("Margaret Okafor", "International Business Machines")],
    ),
    CORPUS["doc_1"][1]: (
        [("Dr. Okafor", "PERSON"), ("IBM", "ORG"), ("Lagos", "GPE")],
        [("Dr. Okafor", "IBM"), ("IBM", "Lagos")],
    ),
    CORPUS["doc_2"][0]: ([("John Okafor", "PERSON"), ("Lagos", "GPE")], [("John Okafor", "Lagos")]),
    CORPUS["doc_2"][1]: ([("Mr. Okafor's", "PERSON")], []),
    CORPUS["doc_2"][2]: ([("IBM's", "ORG")], [("Okafor", "IBM")]),
    CORPUS["doc_3"][0]: (
        [("International Business Machines", "PRODUCT"), ("Lagos", "LOC")],
        [("International Business Machines", "Lagos")],
    ),
    CORPUS["doc_3"][1]: ([("Okafor", "PERSON")], []),
    CORPUS["doc_4"][0]: (
        [("Lagos", "GPE"), ("IBM", "ORG"), ("Acme", "ORG")],
        [("IBM", "Lagos"), ("Acme", "Lagos")],
    ),
    CORPUS["doc_4"][1]: ([("Acme", "ORG"), ("Margaret Okafor", "PERSON")], [("Acme", "Margaret Okafor")]),
}


def _corpus(make_doc) -> dict[str, tuple[Document, list[Chunk]]]:
    return {doc_id: make_doc(doc_id, pieces) for doc_id, pieces in CORPUS.items()}


def test_ingest_delete_reingest_gives_the_same_graph(graph_backend: GraphBackend, make_doc) -> None:
    docs = _corpus(make_doc)
    sink = _sink(graph_backend, CORPUS_SCRIPT)
    for doc in docs.values():
        sink.upsert(*doc)
    first = _dump(graph_backend)
    assert {name for name, _ in first["entities"]} == {
        "margaret okafor",  # with doc_1's "Dr. Okafor" (and doc_4's full name)
        "john okafor",  # with doc_2's "Mr. Okafor's"
        "okafor",  # doc_2's untyped relation end, doc_3's "Okafor": no full name in their documents
        "international business machines",  # with doc_1's "IBM"
        "ibm",  # doc_2's and doc_4's: no long form in their documents
        "lagos",
        "acme",
    }
    for doc_id in docs:
        sink.delete(doc_id)
        assert _dump(graph_backend) != first
        sink.upsert(*docs[doc_id])
        assert _dump(graph_backend) == first, doc_id


def test_the_write_order_does_not_change_the_graph(graph_backend: GraphBackend, make_doc) -> None:
    docs = _corpus(make_doc)
    reference = None
    orders = [list(p) for p in itertools.permutations(docs)][::7]  # 4 of the 24 orders, reversed among them
    for order in orders:
        graph_backend.clear()
        sink = _sink(graph_backend, CORPUS_SCRIPT)
        for doc_id in order[:2]:
            sink.upsert(*docs[doc_id])
        sink.write(sink.prepare([docs[d] for d in order[2:]]))  # and a batch
        dump = _dump(graph_backend)
        reference = reference or dump
        assert dump == reference, order


def test_an_older_graph_without_the_new_lists_takes_writes_and_trims(
    graph_backend: GraphBackend, make_doc
) -> None:
    """Entities written before `chunk_names`, `chunk_aliases`, `chunk_merged_from` and `alias` existed:
    a write mentioning them aligns their lists, a delete trims them, and they go when nothing names them."""
    docs = _corpus(make_doc)
    sink = _sink(graph_backend, CORPUS_SCRIPT)
    sink.upsert(*docs["doc_1"])
    graph_backend.run("MATCH (e:Entity) REMOVE e.chunk_names, e.chunk_aliases, e.chunk_merged_from, e.alias")
    sink.upsert(*docs["doc_4"])
    okafor = _node(sink, "margaret okafor")
    assert len(okafor["chunk_names"]) == len(okafor["chunk_aliases"]) == len(okafor["source_chunk_ids"]) == 3
    assert okafor["chunk_merged_from"] == ["", "", ""]  # doc_1's entries read as empty
    assert okafor["alias"] == "okafor" and okafor["display_name"] == "Margaret Okafor"  # from doc_4's entry
    sink.delete("doc_4")
    assert _node(sink, "margaret okafor")["source_chunk_ids"] == [c.chunk_id for c in docs["doc_1"][1]]
    sink.delete("doc_1")
    assert _names(sink) == set()


# --- property: any small corpus, any order, delete and re-ingest --------------------------------------

_PEOPLE = ["Margaret Okafor", "John Okafor", "Okafor", "Dr. Okafor", "Ada Lovelace", "Lovelace's"]
_GROUPS = ["International Business Machines", "IBM", "I.B.M.", "Bank of England", "BoE", "Acme"]
_NAME = st.one_of(
    st.tuples(st.sampled_from(_PEOPLE), st.sampled_from(["PERSON", "PERSON", "ORG"])),
    st.tuples(st.sampled_from(_GROUPS), st.sampled_from(["ORG", "ORG", "GPE", "PERSON"])),
)
_CHUNK = st.tuples(
    st.lists(_NAME, max_size=3),
    st.lists(st.tuples(st.sampled_from(_PEOPLE + _GROUPS), st.sampled_from(_PEOPLE + _GROUPS)), max_size=2),
)
_CORPORA = st.lists(st.lists(_CHUNK, min_size=1, max_size=3), min_size=2, max_size=4)


def _script_corpus(corpus: list[list[tuple[Entities, Relations]]], make_doc) -> tuple[dict, list]:
    script: dict[str, tuple[Entities, Relations]] = {}
    docs = []
    for d, chunks in enumerate(corpus):
        pieces = []
        for c, (entities, relations) in enumerate(chunks):
            text = f"document {d} chunk {c}"
            script[text] = (entities, relations)
            pieces.append(text)
        docs.append(make_doc(f"doc_{d}", pieces))
    return script, docs


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(corpus=_CORPORA, order=st.randoms(use_true_random=False), victim=st.integers(min_value=0, max_value=3))
def test_any_corpus_in_any_order_with_a_delete_and_reingest_gives_one_graph(
    graph_backend: GraphBackend, make_doc, corpus, order, victim: int
) -> None:
    script, docs = _script_corpus(corpus, make_doc)
    graph_backend.clear()
    sink = _sink(graph_backend, script)
    sink.write(sink.prepare(docs))
    reference = _dump(graph_backend)
    graph_backend.clear()
    sink = _sink(graph_backend, script)
    shuffled = list(docs)
    order.shuffle(shuffled)
    for doc in shuffled:
        sink.upsert(*doc)
    assert _dump(graph_backend) == reference
    doc, chunks = docs[victim % len(docs)]
    sink.delete(doc.document_id)
    sink.upsert(doc, chunks)
    assert _dump(graph_backend) == reference
    for doc, _ in docs:
        sink.delete(doc.document_id)
    assert sink.stats() == dict.fromkeys(sink.stats(), 0)


def _entity_rows(extractions: list[Extraction]) -> dict[str, list[tuple]]:
    """`aggregate`'s entity rows as {key: sorted per-chunk entries}, independent of chunk order."""
    graph = aggregate(extractions)
    fields = ("chunk_ids", "types", "names", "aliases", "merged_from")
    return {row["name"]: sorted(zip(*(row[f] for f in fields), strict=True)) for row in graph.entities}


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(_CHUNK, min_size=1, max_size=6), order=st.randoms(use_true_random=False))
def test_resolution_inside_a_document_does_not_depend_on_the_order_of_its_chunks(chunks, order) -> None:
    """Descriptions aside (a document blanks a description it already gave, in its own order)."""
    extractions = [
        _extraction(f"c{i:03d}", f"chunk {i}", ents, rels) for i, (ents, rels) in enumerate(chunks)
    ]
    shuffled = list(extractions)
    order.shuffle(shuffled)
    assert _entity_rows(shuffled) == _entity_rows(extractions)
    graph = aggregate(extractions)
    assert all(a < b for a, b in ((r["source"], r["target"]) for r in graph.relations))  # no self-relation


# --- through the real extractor --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spacy_extractor() -> Iterator[SpacyExtractor]:
    yield SpacyExtractor()


def test_spacy_finds_margaret_okafor_and_later_dr_okafor_as_one_person(
    graph_backend: GraphBackend, make_doc, spacy_extractor: SpacyExtractor
) -> None:
    sink = KnowledgeGraphSink(graph_backend, spacy_extractor)
    pieces = [
        "Margaret Okafor founded the institute in Lagos in 1998.",
        "Years later, Dr. Okafor still ran its laboratory.",
    ]
    doc, chunks = make_doc("doc_spacy", pieces)
    sink.upsert(doc, chunks)
    okafor = sink.find_entities(["okafor"])["okafor"]
    assert [e.name for e in okafor] == ["margaret okafor"]
    assert okafor[0].source_chunk_ids == tuple(c.chunk_id for c in chunks)
    assert okafor[0].display_name == "Margaret Okafor" and okafor[0].type == "PERSON"
    assert "okafor" not in _names(sink)
    assert _node(sink, "margaret okafor")["chunk_merged_from"] == ["", "okafor"]


_ANY_NAME = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
_ANY_TYPE = st.sampled_from(["PERSON", "ORG", "GPE", "UNKNOWN", "", "person", "Weird Type"])


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(
        st.tuples(
            st.lists(st.tuples(_ANY_NAME, _ANY_TYPE), max_size=4),
            st.lists(st.tuples(_ANY_NAME, _ANY_NAME), max_size=3),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_names_give_well_formed_rows(chunks) -> None:
    """Whatever an extractor calls things (any code point, any type): keys a MERGE accepts (non-empty, no
    space at either end), parallel lists of one length, relations between two different keys."""
    extractions = [
        _extraction(f"c{i:03d}", f"chunk {i}", ents, rels) for i, (ents, rels) in enumerate(chunks)
    ]
    graph = aggregate(extractions)
    keys = {row["name"] for row in graph.entities}
    for key in keys:
        assert key and key == key.strip() and "\n" not in key
    for row in graph.entities:
        lengths = {
            len(row[f]) for f in ("chunk_ids", "types", "descriptions", "names", "aliases", "merged_from")
        }
        assert len(lengths) == 1
    for row in graph.relations:
        assert row["source"] < row["target"] and {row["source"], row["target"]} <= keys
    assert {(m["name"], m["chunk_id"]) for m in graph.mentions} == {
        (row["name"], c) for row in graph.entities for c in row["chunk_ids"]
    }


def test_a_name_is_found_as_typed_or_as_resolution_stored_it(graph_backend: GraphBackend, make_doc) -> None:
    """`entity` and `neighbourhood` take a name as a person types it: "Dr. Margaret Okafor", "IBM's"."""
    text = "Margaret Okafor joined IBM."
    sink = _sink(
        graph_backend, {text: ([("Margaret Okafor", "PERSON"), ("IBM", "ORG")], [("Margaret Okafor", "IBM")])}
    )
    doc, chunks = make_doc("doc_s", [text])
    sink.write(sink.prepare([(doc, chunks)]))
    assert sink.entity("Dr. Margaret Okafor").name == "margaret okafor"
    assert sink.entity("IBM's").name == "ibm"
    assert sink.entity("ibm").name == "ibm"
    assert sink.entity("Nobody") is None and sink.entity("") is None
    near = sink.neighbourhood("Dr. Margaret Okafor")
    assert near.entities[0].name == "margaret okafor"
    assert {(r.source, r.target) for r in near.relations} == {("ibm", "margaret okafor")}
    assert sink.neighbourhood("").entities == ()
