"""The no-leak property of access labels, written once for every door (Python API, HTTP, CLI, MCP, adapters).

A corpus of small documents, each with random access labels and a marker word (`mk03zq`) in every sentence,
so every chunk, context span and graph description it could lend a reader carries the marker. A reader
(`Principal`) may see a document's text only if it shares a label with it (admins see all, a document
without labels is admins' only). The checks take a door as a callable, "search as this principal", and
look at everything the door answered, whatever its shape (result objects, pydantic models, JSON dicts).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

from unichunk import Pipeline
from unichunk.access import Principal

LABELS = ("eng", "hr", "ops")
STRANGER_LABELS = ("legal",)  # a label no document carries
PEOPLE = ("Alice Johnson", "Bob Miller", "Carol Smith", "David Brown")
ORGS = ("Acme Corporation", "Globex Industries", "Initech")
CITIES = ("Berlin", "Paris", "London")
TOPICS = ("the payroll review", "the engine rewrite", "the quarterly budget", "the hiring plan", "the outage")
WORDS = ("payroll", "engine", "budget", "hiring", "outage", "review", "plan", "met")

# Search as a principal: (principal, query, k) -> whatever the door answers (a SearchResult, its JSON...).
SearchAs = Callable[[Principal, str, int], Any]


@dataclass(frozen=True)
class LabelledDocument:
    name: str  # its file name in the source
    labels: tuple[str, ...]
    marker: str  # in every sentence of `text`, and nowhere else
    text: str


@dataclass
class Corpus:
    documents: list[LabelledDocument]
    ids: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> document ID, once ingested
    server_root: str | None = None  # the folder the server keeps the documents under, once ingested

    def readable(self, principal: Principal) -> list[LabelledDocument]:
        return [d for d in self.documents if principal.may_read(d.labels)]

    def hidden(self, principal: Principal) -> list[LabelledDocument]:
        return [d for d in self.documents if not principal.may_read(d.labels)]

    def by_id(self) -> dict[str, LabelledDocument]:
        return {self.ids[d.name]: d for d in self.documents}


def make_corpus(seed: int = 26, size: int = 6) -> Corpus:
    """`size` documents: the first four with no labels, one, another and two labels (so every case is
    there whatever the seed), the rest with random subsets of `LABELS`. Each document tells the same
    people, companies and places apart (the graph learns them from several documents) in its own words."""
    rng = random.Random(seed)
    fixed = [(), ("hr",), ("eng",), ("eng", "hr")]
    label_sets = [*fixed, *(tuple(sorted(rng.sample(LABELS, rng.randint(1, 2)))) for _ in range(size))]
    documents = []
    for i, labels in enumerate(label_sets[:size]):
        marker = f"mk{i:02d}zq"
        paragraphs = []
        for _ in range(4):
            sentences = [
                f"{rng.choice(PEOPLE)} of {rng.choice(ORGS)} met {rng.choice(PEOPLE)} in {rng.choice(CITIES)} "
                f"about {rng.choice(TOPICS)} {marker}."
                for _ in range(3)
            ]
            paragraphs.append(" ".join(sentences))
        documents.append(LabelledDocument(f"doc{i:02d}.txt", labels, marker, "\n\n".join(paragraphs) + "\n"))
    return Corpus(documents)


ACCESS_CORPUS = make_corpus()  # the one the `access_index` fixture ingests


class Index:
    """An ingested corpus (`access_index`): the owner's Pipeline and each document's chunk IDs, in order."""

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
        """How many chunks `principal` may read: a search for `k` must return `min(k, this)` hits."""
        return sum(len(self.chunks[self.corpus.ids[d.name]]) for d in self.corpus.readable(principal))

    def readable(self, principal: Principal, document_id: str) -> bool:
        return principal.may_read(self.corpus.by_id()[document_id].labels)


def ghost_of(identifier: str) -> str:
    """An ID of the same shape that names nothing (its last four hex digits changed)."""
    return identifier[:-4] + ("1111" if identifier.endswith("0000") else "0000")


def answers_as_missing(answer_for: Callable[[str], Any], hidden: str, ghost: str | None = None) -> Any:
    """`answer_for(hidden)` is exactly `answer_for(ghost)` once each ID is replaced by `<ID>`: the same
    error type and message, or the same status and body, whatever the door. An exception raised counts as
    its type and message. Returns the hidden ID's answer."""

    def answer(identifier: str) -> Any:
        try:
            got = plain(answer_for(identifier))
        except Exception as exc:  # the door's refusal is the answer compared
            got = {"raised": type(exc).__name__, "message": str(exc)}
        return got

    def shape(got: Any, identifier: str) -> str:
        return repr(got).replace(identifier, "<ID>")

    ghost = ghost or ghost_of(hidden)
    seen, unknown = answer(hidden), answer(ghost)
    assert shape(seen, hidden) == shape(unknown, ghost), (seen, unknown)
    return seen


def principals() -> st.SearchStrategy[Principal]:
    """Readers with random label sets (often none, sometimes a label no document has), never admins."""
    return st.builds(
        lambda labels: Principal(name="reader", labels=tuple(labels)),
        st.lists(st.sampled_from(LABELS + STRANGER_LABELS), max_size=3, unique=True),
    )


def queries(corpus: Corpus) -> st.SearchStrategy[str]:
    """Queries of shared words, names and some document's marker (a reader may ask for hidden text)."""
    words = st.sampled_from(WORDS + PEOPLE + ORGS + CITIES + tuple(d.marker for d in corpus.documents))
    return st.lists(words, min_size=1, max_size=4).map(" ".join)


def plain(payload: Any) -> Any:
    """`payload` as JSON-like data: pydantic models, dataclasses, mappings and sequences unpacked."""
    if isinstance(payload, BaseModel):
        return plain(payload.model_dump())
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        return {f.name: plain(getattr(payload, f.name)) for f in dataclasses.fields(payload)}
    if isinstance(payload, Mapping):
        return {str(k): plain(v) for k, v in payload.items()}
    if isinstance(payload, str | bytes):
        return payload.decode() if isinstance(payload, bytes) else payload
    if isinstance(payload, Sequence | set | frozenset):
        return [plain(v) for v in payload]
    return payload


def strings(payload: Any) -> Iterator[str]:
    """Every string anywhere in `payload` (keys included)."""
    data = plain(payload)
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for k, v in data.items():
            yield k
            yield from strings(v)
    elif isinstance(data, list):
        for v in data:
            yield from strings(v)


def assert_no_leak(corpus: Corpus, principal: Principal, payload: Any, where: str) -> None:
    """No text of a document `principal` may not read, and no ID of one, anywhere in `payload`; and, for
    one that is no admin, not the server's folder (a file's `path` tells where the server keeps it)."""
    hidden = corpus.hidden(principal)
    markers = {d.marker: d.name for d in hidden}
    hidden_ids = {corpus.ids[d.name]: d.name for d in hidden if d.name in corpus.ids}
    for text in strings(payload):
        folded = text.casefold()
        for marker, name in markers.items():
            assert marker not in folded, f"{where}: text of {name} (labels hidden from {principal.labels})"
        for document_id, name in hidden_ids.items():
            assert document_id not in text, f"{where}: the ID of {name} shown to {principal.labels}"
        if corpus.server_root and not principal.admin:
            assert corpus.server_root not in text, f"{where}: the server's folder shown to {principal.labels}"


def check_search(
    corpus: Corpus, principal: Principal, search_as: SearchAs, query: str, k: int, readable_chunks: int
) -> Any:
    """Search through a door as `principal`: no hidden text anywhere in the answer (hits, context spans,
    graph entities and relations), and `min(k, readable_chunks)` hits, every one of a readable document
    (the filter is inside the store queries: hidden chunks never took a readable hit's place). Returns the
    answer as JSON-like data."""
    answer = plain(search_as(principal, query, k))
    echoed = {key: value for key, value in answer.items() if key != "query"}  # the reader's own words
    assert_no_leak(corpus, principal, echoed, f"search {query!r}")
    readable_ids = {corpus.ids[d.name] for d in corpus.readable(principal)}
    hits = answer.get("hits") or []
    assert {h["document_id"] for h in hits} <= readable_ids
    assert len(hits) == min(k, readable_chunks), (query, principal.labels, len(hits), readable_chunks)
    for span in (answer.get("context") or {}).get("spans") or []:
        assert span["document_id"] in readable_ids
    return answer


def check_graph_search(corpus: Corpus, principal: Principal, search_as: SearchAs, query: str, k: int) -> Any:
    """Search in graph mode through a door as `principal`: no hidden text anywhere in the answer, at most
    `k` hits, every one of a readable document. (The graph finds only the chunks of the entities a query
    names, so fewer than `k` readable chunks may come back.) Returns the answer as JSON-like data."""
    answer = plain(search_as(principal, query, k))
    assert answer.get("route") in (None, "graph"), answer.get("route")
    echoed = {key: value for key, value in answer.items() if key != "query"}
    assert_no_leak(corpus, principal, echoed, f"graph search {query!r}")
    readable_ids = {corpus.ids[d.name] for d in corpus.readable(principal)}
    hits = answer.get("hits") or []
    assert {h["document_id"] for h in hits} <= readable_ids
    assert len(hits) <= k
    for span in (answer.get("context") or {}).get("spans") or []:
        assert span["document_id"] in readable_ids
    return answer


# Look an entity up as a principal: (principal, name) -> the door's answer as JSON-like data, None for its
# not-found answer.
EntityAs = Callable[[Principal, str], Any]


def entity_names(corpus: Corpus) -> st.SearchStrategy[str]:
    """The people, companies and places every document names (some readers see a name in none of theirs)."""
    return st.sampled_from(PEOPLE + ORGS + CITIES)


def check_entity(
    corpus: Corpus, principal: Principal, entity_as: EntityAs, admin_view: Any, name: str
) -> None:
    """An entity looked up through a door as `principal`: no hidden text or ID anywhere in it, and exactly
    the admin's sources (`admin_view`: the owner's answer, or None) that lie in documents the principal may
    read; not found when there are none. Aliases and merges only from readable documents."""
    answer = plain(entity_as(principal, name))
    readable_ids = {corpus.ids[d.name] for d in corpus.readable(principal)}
    admin = plain(admin_view)
    expected = sorted(
        s["chunk_id"]
        for s in ((admin or {}).get("entity") or {}).get("sources", [])
        if s["document_id"] in readable_ids
    )
    if not expected:
        assert answer is None, f"{name!r} shown to {principal.labels} from hidden documents only"
        return
    assert answer is not None, f"{name!r} not shown to {principal.labels}, who may read {expected[:2]}"
    assert_no_leak(corpus, principal, {k: v for k, v in answer.items() if k != "query"}, f"entity {name!r}")
    assert sorted(s["chunk_id"] for s in answer["entity"]["sources"]) == expected
    for alias in answer["also_known_as"]:
        assert set(alias["document_ids"]) <= readable_ids
    for merge in answer["merges"]:
        assert merge["document_id"] in readable_ids
