"""Access labels in the knowledge graph, on a real FalkorDB (and Neo4j when NEO4J_URI is set).

An entity or relation several documents taught the graph is shown to a reader only as the chunks that
reader may read taught it: its description, keywords, weight and sources from those chunks alone, and not
at all when none is readable. Every `HIDDEN` string below comes only from chunks the eng reader may not read.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from documents import make_document
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.base import GraphContext, InvalidRequest
from unichunk.sinks.graph.backends import GraphBackend
from unichunk.sinks.graph.extraction import EntityExtractor, ExtractedEntity, ExtractedRelation, Extraction
from unichunk.sinks.graph.sink import KnowledgeGraphSink

HIDDEN = "SECRET"
HR_TEXT = "Acme payroll note."
HR_TEXT_2 = "Carol and Erin in HR."
ENG_TEXT = "Acme engine note."
BOTH_TEXT = "Open note on Acme."
BARE_TEXT = "Unlabelled note."
# chunk text -> (entities (name, type, description), relations (source, target, keywords, description))
SCRIPT = {
    HR_TEXT: (
        [("Acme", "ORG", f"Acme cuts pay ({HIDDEN} hr)"), ("Payroll", "THING", f"{HIDDEN} payroll")],
        [
            ("Acme", "Bob", f"fired {HIDDEN}", f"Acme fired Bob {HIDDEN}"),
            ("Acme", "Dana", f"salary {HIDDEN}", f"Dana's salary at Acme {HIDDEN}"),
        ],
    ),
    HR_TEXT_2: ([], [("Carol", "Erin", f"review {HIDDEN}", f"Carol reviews Erin {HIDDEN}")]),
    ENG_TEXT: (
        [("Acme", "ORG", "Acme ships the engine")],
        [
            ("Acme", "Carol", "builds", "Carol builds the engine"),
            ("Acme", "Dana", "codes", "Dana codes at Acme"),
        ],
    ),
    BARE_TEXT: ([("Acme", "ORG", f"Acme unlabelled {HIDDEN}")], []),
}


class _Scripted(EntityExtractor):
    """Fixed entities and relations per chunk text (weight 2.0 each): what is stored is known exactly."""

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        out = []
        for c in chunks:
            ents, rels = SCRIPT.get(c.content, ([], []))
            out.append(
                Extraction(
                    c.chunk_id,
                    tuple(ExtractedEntity(n, t, d, c.chunk_id) for n, t, d in ents),
                    tuple(ExtractedRelation(s, t, k, d, 2.0, c.chunk_id) for s, t, k, d in rels),
                )
            )
        return out


def _labelled(document_id: str, pieces: list[str], labels: list[str] | None) -> tuple[Document, list[Chunk]]:
    doc, chunks = make_document(document_id, pieces)
    if labels is not None:
        doc = doc.model_copy(update={"metadata": {"labels": labels}})
    return doc, chunks


@pytest.fixture
def graph(graph_backend: GraphBackend) -> tuple[KnowledgeGraphSink, dict[str, list[str]]]:
    """The four documents stored; returns the sink and each document's chunk IDs."""
    sink = KnowledgeGraphSink(graph_backend, _Scripted())
    docs = [
        _labelled("hr_doc", [HR_TEXT, HR_TEXT_2], ["hr"]),
        _labelled("eng_doc", [ENG_TEXT], ["eng"]),
        _labelled("open_doc", [BOTH_TEXT], ["eng", "hr"]),
        _labelled("bare_doc", [BARE_TEXT], None),
    ]
    sink.write(sink.prepare(docs))
    return sink, {d.document_id: [c.chunk_id for c in chunks] for d, chunks in docs}


ENG = {"labels": ["eng"]}


def _all_ids(ids: dict[str, list[str]]) -> list[str]:
    return [c for chunk_ids in ids.values() for c in chunk_ids]


def _assert_nothing_hidden(context: GraphContext) -> None:
    assert HIDDEN not in context.to_text()
    assert HIDDEN not in repr(context)


def test_chunks_carry_their_documents_labels(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    labels = sink.chunk_labels()
    assert labels == {
        **dict.fromkeys(ids["hr_doc"], ("hr",)),
        ids["eng_doc"][0]: ("eng",),
        ids["open_doc"][0]: ("eng", "hr"),
        ids["bare_doc"][0]: (),
    }
    assert sink.chunk_labels("eng_doc") == {ids["eng_doc"][0]: ("eng",)}
    assert sink.chunk_labels("no_such_doc") == {}


def test_an_eng_reader_sees_only_what_eng_chunks_taught(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    context = sink.context_for_chunks(_all_ids(ids), filter=ENG)
    _assert_nothing_hidden(context)
    entities = {e.name: e for e in context.entities}
    # Acme was named in HR, eng and unlabelled chunks: the eng reader gets the eng description only.
    assert entities["acme"].description == "Acme ships the engine"
    assert entities["acme"].source_chunk_ids == (ids["eng_doc"][0],)
    # Only HR chunks name Payroll and Bob, only an HR chunk relates Carol and Erin: absent.
    assert {"payroll", "bob", "erin"}.isdisjoint(entities)
    relations = {(r.source, r.target): r for r in context.relations}
    assert set(relations) == {("acme", "carol"), ("acme", "dana")}
    dana = relations[("acme", "dana")]
    assert (dana.description, dana.keywords, dana.weight) == ("Dana codes at Acme", "codes", 2.0)
    assert dana.source_chunk_ids == (ids["eng_doc"][0],)

    # The unfiltered (admin) view is what the graph learnt from all of them, as before.
    everything = sink.context_for_chunks(_all_ids(ids))
    acme = {e.name: e for e in everything.entities}["acme"]
    assert HIDDEN in acme.description and len(acme.source_chunk_ids) == 3
    assert {(r.source, r.target): r for r in everything.relations}[("acme", "dana")].weight == 4.0


def test_hr_chunks_asked_for_by_an_eng_reader_give_nothing(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    assert sink.context_for_chunks(ids["hr_doc"] + ids["bare_doc"], filter=ENG) == GraphContext()


def test_a_reader_of_both_labels_sees_both_and_no_unlabelled_text(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    context = sink.context_for_chunks(_all_ids(ids), filter={"labels": ["eng", "hr"]})
    acme = {e.name: e for e in context.entities}["acme"]
    # per-chunk entries in chunk-ID order: eng_doc's before hr_doc's, whatever order they were written in
    assert acme.description.split("\n") == ["Acme ships the engine", f"Acme cuts pay ({HIDDEN} hr)"]
    assert "unlabelled" not in context.to_text()  # a document without labels: admins only


def test_no_labels_read_nothing(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    nothing = {"labels": []}
    assert sink.context_for_chunks(_all_ids(ids), filter=nothing) == GraphContext()
    assert sink.neighbourhood("Acme", hops=3, filter=nothing) == GraphContext()
    assert sink.strongest_relations(["Acme", "Carol"], filter=nothing) == GraphContext()
    assert sink.entity("Acme", filter=nothing) is None


def test_neighbourhood_steps_only_along_readable_relations(graph) -> None:  # type: ignore[no-untyped-def]
    sink, _ = graph
    around = sink.neighbourhood("Acme", hops=3, filter=ENG)
    _assert_nothing_hidden(around)
    assert [e.name for e in around.entities] == ["acme", "carol", "dana"]  # Erin only via an HR relation
    assert {(r.source, r.target) for r in around.relations} == {("acme", "carol"), ("acme", "dana")}
    assert sink.neighbourhood("Payroll", filter=ENG) == GraphContext()
    assert sink.neighbourhood("Bob", hops=2, filter=ENG) == GraphContext()
    unfiltered = sink.neighbourhood("Acme", hops=3)
    assert {"bob", "erin", "payroll"} - {e.name for e in unfiltered.entities} == {"payroll"}


def test_strongest_relations_are_weighed_by_readable_chunks(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    found = sink.strongest_relations(["Acme", "Bob", "Carol"], limit=1, filter=ENG)
    _assert_nothing_hidden(found)
    # unfiltered, Acme's heaviest is Acme-Dana (4.0, HR and eng); for eng readers both weigh 2.0
    assert sink.strongest_relations(["Acme"], limit=1).relations[0].target == "dana"
    relations = {(r.source, r.target): r for r in found.relations}
    assert set(relations) == {("acme", "carol")}  # each hub's 1 heaviest: Acme's and Carol's, Bob has none
    assert {e.name for e in found.entities} == {"acme", "carol"}
    assert sink.entity("Acme", filter=ENG).source_chunk_ids == (ids["eng_doc"][0],)


def test_relabel_changes_who_reads_without_extracting_again(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    sink.extractor = None  # type: ignore[assignment]  # relabel must not extract
    assert sink.relabel("hr_doc", ["ENG", "hr"]) == 2
    assert sink.relabel("hr_doc", ["eng", "hr"]) == 0  # safe to re-run: nothing left to change
    assert sink.chunk_labels("hr_doc") == dict.fromkeys(ids["hr_doc"], ("eng", "hr"))
    context = sink.context_for_chunks(_all_ids(ids), filter=ENG)
    assert {"payroll", "bob", "erin"} <= {e.name for e in context.entities}
    assert sink.relabel("hr_doc", []) == 2  # no labels: admins only
    assert sink.context_for_chunks(ids["hr_doc"], filter={"labels": ["hr", "eng"]}) == GraphContext()
    assert sink.relabel("no_such_doc", ["eng"]) == 0


def test_a_rewrite_with_new_labels_updates_the_chunks(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    sink.write(sink.prepare([_labelled("eng_doc", [ENG_TEXT], ["ops"])]))
    assert sink.chunk_labels("eng_doc") == {ids["eng_doc"][0]: ("ops",)}
    assert sink.entity("Acme", filter=ENG) is None  # the open document names no entity
    assert sink.entity("Acme", filter={"labels": ["ops"]}).description == "Acme ships the engine"


def test_document_filter_and_unknown_keys(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    only_eng_doc = sink.context_for_chunks(_all_ids(ids), filter={"document_id": "eng_doc"})
    assert {e.name for e in only_eng_doc.entities} == {"acme", "carol", "dana"}
    both = sink.context_for_chunks(_all_ids(ids), filter={"document_id": ["hr_doc"], "labels": ["eng"]})
    assert both == GraphContext()
    with pytest.raises(InvalidRequest, match="unsupported filter"):
        sink.context_for_chunks(_all_ids(ids), filter={"source_id": "x"})


# --- the property: random documents, labels, extractions and readers --------------------------------------

POOL = [f"Thing {i}" for i in range(5)]
TAGS = ["a", "b", "c"]


class _Drawn(EntityExtractor):
    """Entities and relations per chunk as drawn; every description names its document (`doc3`)."""

    def __init__(self, plan: dict[str, tuple[list[int], list[tuple[int, int, float]]]]) -> None:
        self.plan = plan

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        out = []
        for c in chunks:
            names, pairs = self.plan[c.content]
            tag = c.content.split()[0]  # "doc3c1"
            out.append(
                Extraction(
                    c.chunk_id,
                    tuple(
                        ExtractedEntity(POOL[n], "THING", f"{tag} on {POOL[n]}", c.chunk_id) for n in names
                    ),
                    tuple(
                        ExtractedRelation(POOL[s], POOL[t], f"kw {tag}", f"{tag} links", w, c.chunk_id)
                        for s, t, w in pairs
                        if s != t
                    ),
                )
            )
        return out


_chunk_plan = st.tuples(
    st.lists(st.integers(0, len(POOL) - 1), max_size=3, unique=True),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.sampled_from([0.5, 1.0, 2.0])), max_size=2),
)
_documents = st.lists(
    st.tuples(
        st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
        st.lists(_chunk_plan, min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=4,
)


def _tags_in(text: str) -> set[int]:
    """The documents a shown text came from (`doc3c1 links` -> 3)."""
    return {int(word[3:].split("c")[0]) for word in text.replace(",", " ").split() if word.startswith("doc")}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents=_documents, reader=st.lists(st.sampled_from([*TAGS, "z"]), max_size=3, unique=True))
def test_no_graph_read_shows_what_unreadable_chunks_taught(
    graph_backend: GraphBackend, documents: list, reader: list[str]
) -> None:
    graph_backend.clear()
    plan, batch, chunk_doc = {}, [], {}
    for d, (labels, chunk_plans) in enumerate(documents):
        pieces = [f"doc{d}c{i} text." for i in range(len(chunk_plans))]
        plan.update(zip(pieces, chunk_plans, strict=True))
        doc, chunks = _labelled(f"doc{d}", pieces, labels)
        batch.append((doc, chunks))
        chunk_doc.update({c.chunk_id: d for c in chunks})
    sink = KnowledgeGraphSink(graph_backend, _Drawn(plan))
    sink.write(sink.prepare(batch))
    readable = {d for d, (labels, _) in enumerate(documents) if set(labels) & set(reader)}
    flt = {"labels": reader}

    # what the readable chunks taught: entity -> its readable mentions, relation -> readable weight
    taught: dict[str, set[str]] = {}
    weights: dict[tuple[str, str], float] = {}
    for doc, chunks in batch:
        d = int(doc.document_id[3:])
        for c in chunks:
            names, pairs = plan[c.content]
            pair_names = {(POOL[s], POOL[t]) for s, t, _ in pairs if s != t}
            if d not in readable:
                continue
            for n in [*(POOL[n] for n in names), *(x for p in pair_names for x in p)]:
                taught.setdefault(n.casefold(), set()).add(c.chunk_id)
            per_chunk: dict[tuple[str, str], float] = {}
            for s, t, w in pairs:
                if s != t:
                    key = tuple(sorted((POOL[s].casefold(), POOL[t].casefold())))
                    per_chunk[key] = per_chunk.get(key, 0.0) + w
            for key, w in per_chunk.items():
                weights[key] = weights.get(key, 0.0) + w

    everything = list(chunk_doc)
    views = [
        sink.context_for_chunks(everything, filter=flt),
        sink.strongest_relations(POOL, limit=100, filter=flt),
        *(sink.neighbourhood(name, hops=2, limit=100, filter=flt) for name in POOL),
    ]
    for view in views:
        for e in view.entities:
            assert _tags_in(e.description) <= readable
            assert set(e.source_chunk_ids) == taught[e.name]
        for r in view.relations:
            assert _tags_in(r.description) | _tags_in(r.keywords) <= readable
            assert {chunk_doc[c] for c in r.source_chunk_ids} <= readable
            assert r.weight == pytest.approx(weights[(r.source, r.target)])
    direct = views[0]
    assert {e.name for e in direct.entities} == set(taught)
    assert {(r.source, r.target) for r in direct.relations} == set(weights)


def test_the_retrievers_look_up_finds_entities_as_the_reader_may_see_them(graph) -> None:  # type: ignore[no-untyped-def]
    sink, ids = graph
    found = sink.find_entities(["acme", "payroll", "nobody", ""])
    assert set(found) == {"acme", "payroll"}
    (acme,) = found["acme"]
    assert len(acme.source_chunk_ids) == 3 and HIDDEN in acme.description
    seen = sink.find_entities(["acme", "payroll", "bob"], filter=ENG)
    assert set(seen) == {"acme"}  # Payroll and Bob only HR chunks name
    (acme,) = seen["acme"]
    assert acme.source_chunk_ids == (ids["eng_doc"][0],) and acme.description == "Acme ships the engine"
    assert sink.find_entities([]) == {} and sink.chunk_count() == 5
