"""The knowledge graph as a retriever (`unichunk.retrieval.graph_search`) on real stores: the graph on the
session's FalkorDB, chunk records from a BM25Sink on a temp file. A scripted extractor says exactly which
entities and relations each chunk teaches (so ranks can be stated), and one test goes through real spaCy."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.retrieval.graph_search import GraphScoring, GraphSearch, QueryEntities, ngram_keys, query_words
from unichunk.retrieval.ranking import GRAPH_WEIGHT, RetrievalError, RetrievalSettings, retrieve
from unichunk.retrieval.readers import Readers
from unichunk.retrieval.search import SearchOptions, search
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.backends import FalkorDBBackend
from unichunk.sinks.graph.extraction import (
    EntityExtractor,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    SpacyExtractor,
)
from unichunk.sinks.graph.sink import KnowledgeGraphSink
from unichunk.sinks.keywords.bm25 import BM25Sink

# chunk text -> (entities as (name, type), relations as (source, target, keywords, weight))
Script = Mapping[str, tuple[Sequence[tuple[str, str]], Sequence[tuple[str, str, str, float]]]]
HARBOUR, ZEPHYR, OKAFOR = ("Harbour Authority", "ORG"), ("Zephyr Line", "ORG"), ("Margaret Okafor", "PERSON")
PUBLIC: Script = {
    "She signed the grant for the new laboratory in March.": ([OKAFOR, HARBOUR], []),
    "The board approved the budget after a long meeting.": ([HARBOUR], []),
    "Ships queued outside the breakwater all afternoon.": ([HARBOUR], []),
    "A small ferry company ran the night crossing.": (
        [ZEPHYR, HARBOUR],
        [("Zephyr Line", "Harbour Authority", "charter", 3.0)],
    ),
    "Nobody remembered who painted the old lighthouse.": ([HARBOUR], []),
    "The crew rested before the return trip.": ([ZEPHYR, HARBOUR], []),
    "Timetables changed when winter came.": ([ZEPHYR], []),
}
ZEPHYR_CHUNKS = {t for t, (ents, _) in PUBLIC.items() if ZEPHYR in ents}
READER = {"labels": ["public"]}  # a reader of the public document only
SECRET: Script = {"Quiet plans were drawn up for a takeover.": ([ZEPHYR], [])}


class ScriptedExtractor(EntityExtractor):
    """Entities and relations as `script` lists them for each chunk text (none for another text)."""

    name = "scripted"

    def __init__(self, script: Script) -> None:
        self.script = script

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        out = []
        for chunk in chunks:
            entities, relations = self.script.get(chunk.content, ((), ()))
            out.append(
                Extraction(
                    chunk.chunk_id,
                    tuple(ExtractedEntity(n, t, chunk.content, chunk.chunk_id) for n, t in entities),
                    tuple(
                        ExtractedRelation(a, b, kw, chunk.content, w, chunk.chunk_id)
                        for a, b, kw, w in relations
                    ),
                )
            )
        return out


def _document(document_id: str, pieces: Sequence[str], labels: Sequence[str]) -> tuple[Document, list[Chunk]]:
    document = Document(document_id=document_id, text=" ".join(pieces), metadata={"labels": list(labels)})
    spans, start = [], 0
    for piece in pieces:
        spans.append(Span(start, start + len(piece), token_count=len(piece.split())))
        start += len(piece) + 1
    return document, chunks_from_spans(document, spans)


class Index:
    def __init__(self, graph: KnowledgeGraphSink, keywords: BM25Sink, chunks: dict[str, Chunk]) -> None:
        self.graph, self.keywords, self.chunks = graph, keywords, chunks
        self.search = GraphSearch(graph, keywords, QueryEntities(None))  # n-grams only: exact cases

    def id(self, text: str) -> str:
        return self.chunks[text].chunk_id

    def ranked(self, query: str, k: int = 10, filter=None) -> list[str]:  # type: ignore[no-untyped-def]
        return [hit.content for hit in self.search.search(query, k, filter)]


@pytest.fixture(scope="module")
def index(falkordb_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    tmp = tmp_path_factory.mktemp("graph_search")
    graph = KnowledgeGraphSink(
        FalkorDBBackend(falkordb_url, f"test_{uuid.uuid4().hex[:12]}"),
        ScriptedExtractor({**PUBLIC, **SECRET}),
    )
    keywords = BM25Sink(SinkSettings(data_dir=tmp), path=tmp / "bm25.sqlite")
    chunks: dict[str, Chunk] = {}
    for document_id, script, labels in (("doc_graphpublic00001", PUBLIC, ["public"]), ("doc_graphsecret00001", SECRET, ["secret"])):  # fmt: skip
        document, made = _document(document_id, list(script), labels)
        graph.upsert(document, made)
        keywords.upsert(document, made)
        chunks |= {c.content: c for c in made}
    yield Index(graph, keywords, chunks)
    graph.backend.clear()
    graph.close()
    keywords.close()


def test_a_named_entity_reaches_its_chunk_that_shares_no_word_with_the_query(index: Index) -> None:
    query = "Who is Margaret Okafor?"
    granted = "She signed the grant for the new laboratory in March."
    assert not {w.lower() for w in query_words(query)} & {w.lower().strip(".") for w in granted.split()}
    assert granted not in [h.content for h in index.keywords.search(query, 10)]  # BM25 cannot find it
    assert index.ranked(query) == [granted]
    hit = index.search.search(query, 1)[0]
    assert hit.chunk_id == index.id(granted) and hit.start_char == index.chunks[granted].start_char
    assert hit.score > 0


def test_rarer_entities_outrank_common_ones_and_relations_add_weight(index: Index) -> None:
    ranked = index.ranked("Zephyr Line and the Harbour Authority", k=20, filter=READER)
    both_related, both, zephyr_only = (
        "A small ferry company ran the night crossing.",
        "The crew rested before the return trip.",
        "Timetables changed when winter came.",
    )
    # both entities and the relation stated; both; Zephyr (3 chunks) alone; Harbour (6 chunks) alone
    assert ranked[:3] == [both_related, both, zephyr_only]
    assert set(ranked[3:]) == {
        t for t, (ents, _) in PUBLIC.items() if ents == [HARBOUR] or ents == [OKAFOR, HARBOUR]
    }
    scores = {
        h.content: h.score for h in index.search.search("Zephyr Line and the Harbour Authority", 20, READER)
    }
    assert scores[zephyr_only] > scores["The board approved the budget after a long meeting."]


def test_relation_keywords_in_the_query_lead_to_the_chunk_stating_the_relation(index: Index) -> None:
    stated = "A small ferry company ran the night crossing."
    plain = {h.content: h.score for h in index.search.search("Tell me about the Zephyr Line", 10)}
    assert len(set(plain.values())) == 1  # three chunks naming Zephyr alike: nothing tells them apart
    asked = index.search.search("Whom did the Zephyr Line charter?", 10)
    assert asked[0].content == stated and asked[0].score > asked[1].score


@pytest.mark.parametrize(
    "query",
    [
        "MARGARET OKAFOR",
        "margaret okafor's grant",
        "Margaret Okafor’s laboratory",
        "what did the margaret okafors sign",
        "Dr Margaret Okafor, please",
    ],
)
def test_case_plural_and_possessive_variants_find_the_entity(index: Index, query: str) -> None:
    assert index.ranked(query) == ["She signed the grant for the new laboratory in March."]


def test_plural_and_possessive_of_an_organisation(index: Index) -> None:
    def found(query: str) -> set[tuple[str, float]]:  # as a set: "timetable" reorders the ties
        return {(h.content, h.score) for h in index.search.search(query, 10)}

    expected = found("Zephyr Line")
    assert len(expected) == 4
    assert found("the Zephyr Lines") == expected
    assert found("ZEPHYR LINE'S timetable") == expected


def test_a_query_naming_nothing_known_gives_nothing_and_leaves_hybrid_unchanged(index: Index) -> None:
    query = "the weather over the breakwater was calm"
    assert index.search.search(query, 10) == []
    sinks = {"keywords": index.keywords, "graph": index.search}
    without = retrieve(sinks, query, 5, RetrievalSettings(weights={"keywords": 1.0, "graph": 0.0}))
    with_graph = retrieve(sinks, query, 5, RetrievalSettings(weights={"keywords": 1.0, "graph": 1.0}))
    assert without.hits and [(h.chunk_id, h.score) for h in with_graph.hits] == [
        (h.chunk_id, h.score) for h in without.hits
    ]
    # and a query naming an entity does change hybrid once the graph is weighted
    named = "Margaret Okafor"
    weighted = retrieve(sinks, named, 3, RetrievalSettings(weights={"keywords": 1.0, "graph": 1.0}))
    assert weighted.hits[0].ranks.get("graph") == 1


def test_the_readers_filter_goes_into_every_graph_read(index: Index) -> None:
    secret = "Quiet plans were drawn up for a takeover."
    assert secret in index.ranked("Zephyr Line")  # unfiltered: the check can fail
    public = index.ranked("Zephyr Line", filter=READER)
    assert secret not in public and len(public) == 3
    assert index.ranked("Zephyr Line", filter={"labels": ["secret"]}) == [secret]
    assert index.ranked("Zephyr Line", filter={"labels": []}) == []
    # the entity's specificity is counted from the chunks the reader may see (3 of them, not 4)
    everyone = index.search.search("Zephyr Line", 1)[0].score
    readers = index.search.search("Zephyr Line", 1, READER)[0].score
    assert readers > everyone


def test_graph_mode_through_retrieve_and_search(index: Index) -> None:
    readers = Readers(keywords=index.keywords, graph=index.graph)
    assert "graph" in readers.rankers()
    found = retrieve(readers.rankers(), "Margaret Okafor", 5, RetrievalSettings(mode="graph"))
    assert found.route == "graph" and [h.chunk_id for h in found.hits] == [
        index.id("She signed the grant for the new laboratory in March.")
    ]
    assert found.hits[0].ranks == {"graph": 1}
    result = search(readers, "Margaret Okafor", 5, SearchOptions(mode="graph", graph=False))
    assert result.route == "graph" and [h.chunk_id for h in result.hits] == [h.chunk_id for h in found.hits]
    assert result.context is not None and "She signed the grant" in result.context.text
    with pytest.raises(RetrievalError, match="graph mode needs"):
        retrieve(
            Readers(keywords=index.keywords).rankers(), "Margaret Okafor", 5, RetrievalSettings(mode="graph")
        )
    # hybrid by default leaves the graph out until the fusion measurement weighs it in
    assert RetrievalSettings().weights["graph"] == GRAPH_WEIGHT
    assert RetrievalSettings(mode="graph").uses_graph()
    assert RetrievalSettings().uses_graph() == (GRAPH_WEIGHT > 0)


def test_query_ngrams_skip_stop_words_alone() -> None:
    stop = QueryEntities().stop_words()  # BM25's and spaCy's lists
    keys = {k.key for k in ngram_keys(query_words("Who is the head of the U.S.A. office?"), stop)}
    assert "usa" in keys and "head of the usa" in keys
    assert not keys & {"who", "is", "the", "who is", "of the", "is the"}


@pytest.fixture
def spacy_index(falkordb_url: str, tmp_path) -> Iterator[GraphSearch]:  # type: ignore[no-untyped-def]
    graph = KnowledgeGraphSink(
        FalkorDBBackend(falkordb_url, f"test_{uuid.uuid4().hex[:12]}"), SpacyExtractor()
    )
    keywords = BM25Sink(SinkSettings(data_dir=tmp_path), path=tmp_path / "bm25.sqlite")
    document, chunks = _document(
        "doc_graphspacy000001",
        [
            "Ada Lovelace wrote to Charles Babbage about the engine.",
            "Michael Faraday lectured at the Royal Institution every Friday.",
            "The weather in Madrid was hot that summer, said Isabel Perez.",
        ],
        ["public"],
    )
    graph.upsert(document, chunks)
    keywords.upsert(document, chunks)
    yield GraphSearch(graph, keywords)
    graph.backend.clear()
    graph.close()
    keywords.close()


def test_through_real_spacy_a_named_person_reaches_their_chunk(spacy_index) -> None:  # type: ignore[no-untyped-def]
    searcher = spacy_index
    query = "What did Dr. Faraday's colleague, Michael Faraday, do?"
    named = [k.key for k in searcher.query_keys(query) if k.start == -1]  # what the NER found
    assert "michael faraday" in named
    found = searcher.search(query, 5)
    assert [h.content for h in found] == ["Michael Faraday lectured at the Royal Institution every Friday."]
    assert searcher.search("isabel perez", 5)[0].content.endswith("said Isabel Perez.")
    assert searcher.search("What about the weather?", 5) == []


_NAMES = st.sampled_from(["Zephyr Line", "zephyr lines", "MARGARET OKAFOR'S", "Harbour Authority", "U.S.A."])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(
        st.one_of(
            _NAMES,
            st.text(max_size=12),
            st.sampled_from(["'", "’s", ".", "the", " ", "\ud800", "\x00", "O\u0301"]),
        ),
        max_size=8,
    ),
    k=st.integers(1, 12),
)
def test_any_query_text_ranks_or_finds_nothing(index: Index, parts: list[str], k: int) -> None:
    """Whatever the query holds (punctuation, control and combining characters, lone surrogates, names
    cut anywhere), the graph answers a ranked list of stored chunks, best first, or nothing; and the chunks
    of a name it knows, standing alone among the words, are found."""
    query = " ".join(parts)
    searcher = GraphSearch(index.graph, index.keywords)  # with NER on the query (real spaCy)
    found = searcher.search(query, k)
    assert len(found) <= k
    assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)
    assert all(h.score > 0 and index.chunks[h.content].chunk_id == h.chunk_id for h in found)
    if "Zephyr Line" in parts:  # with room for every chunk
        assert {h.content for h in searcher.search(query, len(index.chunks))} >= ZEPHYR_CHUNKS


# -- GraphScoring: common entities, chunks matching only them, ties, the list's length ----------------------

BOTH_RELATED, BOTH, ZEPHYR_ONLY = (
    "A small ferry company ran the night crossing.",
    "The crew rested before the return trip.",
    "Timetables changed when winter came.",
)


def _scored(index: Index, scoring: GraphScoring) -> GraphSearch:
    return GraphSearch(index.graph, index.keywords, QueryEntities(None), scoring)


def test_a_common_entity_is_dropped_above_its_share_and_floor(index: Index) -> None:
    # Harbour Authority: 6 of the graph's 8 chunks; Zephyr Line: 4
    drop = _scored(index, GraphScoring(common_share=0.6, common_floor=0))
    hits = drop.search("Zephyr Line and the Harbour Authority", 20, READER)
    assert {h.content for h in hits} == ZEPHYR_CHUNKS
    # Harbour counts as not named: no weight in the chunks naming both, no relation to it
    assert len({h.score for h in hits}) == 1
    assert drop.search("Harbour Authority", 20) == []
    # under the floor (more than 10 chunks needed), the same entity is kept
    kept = _scored(index, GraphScoring(common_share=0.6, common_floor=10))
    assert len(kept.search("Harbour Authority", 20, READER)) == 6


def test_a_chunk_matching_only_a_common_entity_is_not_listed(index: Index) -> None:
    solo = _scored(index, GraphScoring(solo_share=0.6, common_floor=0))
    ranked = [h.content for h in solo.search("Zephyr Line and the Harbour Authority", 20, READER)]
    # the chunks naming both keep Harbour's weight; those naming Harbour alone are gone
    assert ranked == [BOTH_RELATED, BOTH, ZEPHYR_ONLY]
    assert index.ranked("Zephyr Line and the Harbour Authority", 20, READER)[3:]  # listed when shipped as is
    # a query naming only the common entity lists nothing, whatever the tie rule
    for ties in (False, True):
        rules = GraphScoring(solo_share=0.6, common_floor=0, tie_by_terms=ties)
        assert _scored(index, rules).search("the Harbour Authority", 5) == []


@pytest.mark.parametrize(
    ("query", "first"),
    [("Zephyr Line timetables in winter", ZEPHYR_ONLY), ("the Zephyr Line crew rested", BOTH)],
)
def test_ties_break_by_the_query_terms_in_the_text_then_by_position(
    index: Index, query: str, first: str
) -> None:
    ties = index.search  # the shipped rule
    assert GraphScoring().tie_by_terms
    hits = ties.search(query, 10, READER)
    assert len({h.score for h in hits}) == 1  # three chunks naming Zephyr alike
    rest = [t for t in (BOTH_RELATED, BOTH, ZEPHYR_ONLY) if t != first]  # in document order
    assert [h.content for h in hits] == [first, *rest]
    assert [h.content for h in ties.search(query, 1, READER)] == [first]  # the cut reads every tie


def test_the_list_is_capped(index: Index) -> None:
    assert len(index.search.search("Zephyr Line", 10)) == 4
    assert len(_scored(index, GraphScoring(limit=2)).search("Zephyr Line", 10)) == 2
