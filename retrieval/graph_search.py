"""The knowledge graph as a retriever: the entities a query names lead to the chunks they were learnt from.

LightRAG's "local" retrieval, on the graph the graph sink writes (`unichunk.sinks.graph`):

1. Keys: the entities spaCy finds in the query (the model the extractor uses, loaded once per process by
   `load_spacy`) and the query's word n-grams up to `MAX_NGRAM` words (n-grams of stop words alone
   skipped), each written as the write side writes entity keys (`names.base_key`: case, possessive, dotted
   acronyms, a person's titles), plus its singular ("Okafors" -> "okafor").
2. One `find_entities` call (two statements: by key, by the indexed alias) finds the entities they name.
3. Each entity weighs its IDF over the graph's chunks (`chunk_count`): a rare entity says more about a
   chunk than one named everywhere. Found only through its alias (a surname, an acronym), or through an
   n-gram inside a longer n-gram that names an entity itself ("york" in "new york"), it weighs a little less.
4. A chunk scores the weights of the found entities it mentions, plus, for the relations among them and
   for their relations whose keywords share a stem with the query (`strongest_relations`), a share
   that grows with the relation's weight.

The chunk records come from the chunk store (`get_chunks`), so a graph hit is a `ScoredChunk` like a BM25
or vector hit, and `retrieve` fuses the three ranked lists alike. The reader's filter goes into every read
(entities, relations, chunks): what a reader may not see neither finds nor scores a chunk.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from unichunk.sinks.base import ChunkSearch, GraphEntity, GraphReader, ScoredChunk, SearchFilter, StoredChunk
from unichunk.sinks.graph.extraction import (
    DEFAULT_ENTITY_LABELS,
    DEFAULT_SPACY_MODEL,
    ExtractionError,
    deferred_pipes,
    load_spacy,
)
from unichunk.sinks.graph.names import base_key, strip_possessive

if TYPE_CHECKING:
    from spacy.language import Language

    from unichunk.sinks.keywords.analyzer import Analyzer

logger = logging.getLogger(__name__)

MAX_NGRAM = 4  # words per n-gram: longer entity names are found by the query's NER
MAX_QUERY_WORDS = 64  # a longer query's n-grams past these are not looked up (NER still reads it all)
ALIAS_FACTOR = 0.8  # an entity found only through its alias (a surname, an acronym)
PARTIAL_FACTOR = 0.7  # found only through an n-gram inside a longer n-gram that names an entity
RELATION_FACTOR = 0.5  # a relation's share of its ends' weights, at full relation weight
RELATION_LIMIT = 20  # heaviest relations read per found entity
TIE_READ = 400  # chunks read at most to break the ties at the list's cut by their text


@dataclass(frozen=True)
class GraphScoring:
    """How the graph list treats common entities, ties and length (measured for issue 27 by
    `benchmarks.ranker_tuning`; benchmarks/README.md). An entity is *common* when more than `common_share`
    of the graph's chunks, and more than `common_floor` chunks, mention it: it is dropped (None: never).
    A chunk whose one match is an entity in more than `solo_share` of the chunks (and `common_floor`) is
    not listed (None: always listed). Chunks of equal graph score are ordered by how many of the query's
    stems their text holds (`tie_by_terms`), then by position in their document, never by chunk ID (at most
    `TIE_READ` tied chunks are read, the first by chunk ID past that). At most `limit` chunks are listed
    (None: `k`). Measured on the tune half of ../shared/eval, the tie rule raised the graph list alone from
    43.8 to 49.3 mean recall (35.8 to 42.7 on the held-out half); dropping common entities or their lone
    chunks cost recall at every share tried, so both are off (None)."""

    common_share: float | None = None
    solo_share: float | None = None
    common_floor: int = 20
    tie_by_terms: bool = True
    limit: int | None = None


GRAPH_SCORING = GraphScoring()
# Characters that end a word of the query; apostrophes, full stops, hyphens and "&" stay inside names.
_WORD = re.compile(r"[^\s,;:!?()\[\]{}<>\"“”«»/|]+")
_EDGE = "'\"‘’`.-*_"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class QueryKey:
    """A key the query names, with the query words it spans (`start`, `end`: word positions; an NER key
    has none, -1, so no n-gram counts as inside it)."""

    key: str
    start: int
    end: int


def query_words(query: str) -> list[str]:
    """The query's words: whitespace- and punctuation-separated, edge quotes and full stops removed,
    inner ones kept ("O'Brien", "AT&T", "IBM's"), a dotted acronym without its dots ("U.S.A." -> "USA")."""
    words = []
    for raw in _WORD.findall(query):
        word = raw.lstrip(_EDGE).rstrip(_EDGE.replace("'", "").replace("’", ""))
        if _is_dotted(raw):  # "U.S.A." -> "USA", as `base_key` writes a dotted acronym
            word = raw.strip("'\"‘’`").replace(".", "")
        if word:
            words.append(word)
    return words[:MAX_QUERY_WORDS]


def _is_dotted(word: str) -> bool:
    letters = word.strip("'\"‘’`").split(".")
    return len(letters) > 2 and all(len(p) <= 1 for p in letters)


def _singular(key: str) -> str | None:
    """The key with its last word made singular the simple way ("okafors" -> "okafor", "companies" ->
    "company"); None when it does not end in a plural "s"."""
    head, _, last = key.rpartition(" ")
    if len(last) < 4 or not last.endswith("s") or last.endswith(("ss", "us", "is")):
        return None
    single = last[:-3] + "y" if last.endswith("ies") else last[:-1]
    return f"{head} {single}" if head else single


def _english_stopwords() -> frozenset[str]:
    """BM25's stop words, imported on first use: the analyzer imports bm25s, which a process that reads
    no store (an ingest with nothing to do imports this module through the readers) must not load."""
    from unichunk.sinks.keywords.analyzer import ENGLISH_STOPWORDS

    return ENGLISH_STOPWORDS


def ngram_keys(words: Sequence[str], stop: frozenset[str] | None = None) -> list[QueryKey]:
    """Every n-gram of `words` up to `MAX_NGRAM` words that is not `stop` words alone, as keys
    (`base_key`, as written and singular)."""
    stop = _english_stopwords() if stop is None else stop
    keys: list[QueryKey] = []
    plain = [strip_possessive(w).casefold() for w in words]
    for start in range(len(words)):
        for end in range(start + 1, min(start + MAX_NGRAM, len(words)) + 1):
            if all(w in stop or not w for w in plain[start:end]):
                continue
            key = base_key(" ".join(words[start:end]))
            for variant in (key, _singular(key)):
                if variant:
                    keys.append(QueryKey(variant, start, end))
    return keys


class QueryEntities:
    """spaCy NER on the query, with the model the spaCy extractor uses (loaded once per process); a
    model that is not installed leaves the n-grams to find the names (said once in the log)."""

    def __init__(
        self, model: str | None = DEFAULT_SPACY_MODEL, labels: Iterable[str] = DEFAULT_ENTITY_LABELS
    ) -> None:
        self.model = model
        self.labels = frozenset(labels)
        self._missing = model is None
        self._stop: frozenset[str] | None = None

    def _nlp(self) -> Language | None:
        if self._missing:
            return None
        try:
            return load_spacy(self.model)  # type: ignore[arg-type]
        except ExtractionError as exc:
            self._missing = True
            logger.warning("graph retrieval without NER on the query: %s", exc)
            return None

    def keys(self, query: str) -> list[str]:
        """The keys of the entities the model finds in `query` (as typed, and as untyped names)."""
        nlp = self._nlp()
        if nlp is None:
            return []
        found = []
        for ent in nlp(query, disable=deferred_pipes(nlp)).ents:
            if ent.label_ in self.labels:
                found += [k for k in (base_key(ent.text, ent.label_), base_key(ent.text)) if k]
        return list(dict.fromkeys(found))

    def stop_words(self) -> frozenset[str]:
        """BM25's stop words, and the model's (spaCy's English list) when it is there."""
        if self._stop is None:
            nlp = self._nlp()
            if nlp is None:
                return _english_stopwords()
            self._stop = _english_stopwords() | frozenset(nlp.Defaults.stop_words)
        return self._stop

    def warm(self) -> None:
        """Load the model now (a service's start), so the first query does not pay for it."""
        self.keys("warm up")


QUERY_ENTITIES = QueryEntities()  # one per process: a missing model is said once


class GraphSearch:
    """`ChunkSearch` over the knowledge graph: `search` ranks chunks by the entities the query names
    (module docstring); chunk records, by ID or by position, are the chunk store's."""

    name: ClassVar[str] = "graph"

    def __init__(
        self,
        graph: GraphReader,
        chunks: ChunkSearch,
        entities: QueryEntities | None = None,
        scoring: GraphScoring | None = None,
    ) -> None:
        self.graph = graph
        self.chunks = chunks
        self.entities = entities if entities is not None else QUERY_ENTITIES
        self.scoring = scoring if scoring is not None else GRAPH_SCORING
        self._stems: Analyzer | None = None

    def _analyzer(self) -> Analyzer:
        """BM25's analyzer (stems), made on first use (see `_english_stopwords`)."""
        if self._stems is None:
            from unichunk.sinks.keywords.analyzer import Analyzer

            self._stems = Analyzer()
        return self._stems

    def query_keys(self, query: str) -> list[QueryKey]:
        """The keys looked up for `query`: its NER entities first, then its n-grams. A lone surrogate
        (no stored name holds one, and spaCy cannot encode it) separates words like a space."""
        query = _LONE_SURROGATE.sub(" ", query)
        named = [QueryKey(k, -1, -1) for k in self.entities.keys(query)]
        return named + ngram_keys(query_words(query), self.entities.stop_words())

    def scores(self, query: str, filter: SearchFilter | None = None) -> dict[str, float]:
        """chunk_id -> graph score for `query` (chunks of no entity the query names are absent, and
        those `GraphScoring` leaves out)."""
        keys = self.query_keys(query)
        found = self.graph.find_entities(sorted({k.key for k in keys}), filter=filter) if keys else {}
        if not found:
            return {}
        total = max(self.graph.chunk_count(), 1)
        rules = self.scoring

        def above(share: float | None, df: int) -> bool:
            return share is not None and df > rules.common_floor and df > share * total

        found = {
            key: kept
            for key, entities in found.items()
            if (kept := tuple(e for e in entities if not above(rules.common_share, len(e.source_chunk_ids))))
        }
        if not found:
            return {}
        # n-grams that name an entity by its key: an n-gram strictly inside one of them is partial
        naming = [k for k in keys if any(e.name == k.key for e in found.get(k.key, ()))]
        weights: dict[str, float] = {}
        entities: dict[str, GraphEntity] = {}
        for qk in keys:
            partial = any(
                o.start <= qk.start and qk.end <= o.end and (o.end - o.start) > (qk.end - qk.start)
                for o in naming
            )
            for entity in found.get(qk.key, ()):
                factor = (1.0 if entity.name == qk.key else ALIAS_FACTOR) * (
                    PARTIAL_FACTOR if partial else 1.0
                )
                weight = factor * _idf(len(entity.source_chunk_ids), total)
                if weight > weights.get(entity.name, 0.0):
                    weights[entity.name] = weight
                    entities[entity.name] = entity
        scores: dict[str, float] = {}
        matches: dict[str, int] = {}  # entities and relations that scored each chunk
        for name, entity in entities.items():
            for chunk_id in entity.source_chunk_ids:
                scores[chunk_id] = scores.get(chunk_id, 0.0) + weights[name]
                matches[chunk_id] = matches.get(chunk_id, 0) + 1
        self._add_relations(query, weights, scores, matches, filter)
        solo = {
            c
            for name, entity in entities.items()
            if above(rules.solo_share, len(entity.source_chunk_ids))
            for c in entity.source_chunk_ids
            if matches[c] == 1
        }
        return {c: s for c, s in scores.items() if c not in solo}

    def _add_relations(
        self,
        query: str,
        weights: dict[str, float],
        scores: dict[str, float],
        matches: dict[str, int],
        filter: SearchFilter | None,
    ) -> None:
        """Relations among the found entities, and theirs whose keywords share a stem with the query, add
        to the chunks stating them: `RELATION_FACTOR` x the found ends' mean weight x w/(1+w) (relation
        weight w), times the keywords' share of query stems when only one end was found."""
        context = self.graph.strongest_relations(sorted(weights), limit=RELATION_LIMIT, filter=filter)
        terms = set(self._analyzer()(query))
        for relation in context.relations:
            ends = [weights[e] for e in (relation.source, relation.target) if e in weights]
            if not ends:
                continue
            share = 1.0
            if len(ends) == 1:
                stems = set(self._analyzer()(relation.keywords))
                share = len(stems & terms) / len(stems) if stems else 0.0
                if not share:
                    continue
            strength = relation.weight / (1.0 + relation.weight) if relation.weight > 0 else 0.0
            bonus = RELATION_FACTOR * share * strength * sum(ends) / len(ends)
            for chunk_id in relation.source_chunk_ids:
                scores[chunk_id] = scores.get(chunk_id, 0.0) + bonus
                matches[chunk_id] = matches.get(chunk_id, 0) + 1

    def search(self, query: str, k: int = 10, filter: SearchFilter | None = None) -> list[ScoredChunk]:
        """The `k` chunks the graph ranks best for `query` (at most `GraphScoring.limit`), best first;
        [] when the query names no entity the reader may see. Equal scores: see `GraphScoring`."""
        if self.scoring.limit is not None:
            k = min(k, self.scoring.limit)
        if k <= 0 or not query.strip():
            return []
        scores = self.scores(query, filter)
        if not scores:
            return []
        if not self.scoring.tie_by_terms:
            ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
            return self._records(ranked, k, filter)
        # every chunk scoring at least the k-th score is read, so ties at the cut are broken by text too
        ordered = sorted(scores.values(), reverse=True)
        cut = ordered[min(k, len(ordered)) - 1]
        tied = sorted(((c, s) for c, s in scores.items() if s >= cut), key=lambda i: (-i[1], i[0]))
        tied = tied[: max(TIE_READ, k)]
        terms = set(self._analyzer()(query))
        found = self._records(tied, len(tied), filter)
        held = {h.chunk_id: len(terms & set(self._analyzer()(h.content))) for h in found}
        found.sort(key=lambda h: (-h.score, -held[h.chunk_id], h.document_id, h.chunk_index))
        return found[:k]

    def _records(
        self, ranked: Sequence[tuple[str, float]], k: int, filter: SearchFilter | None
    ) -> list[ScoredChunk]:
        """The first `k` of `ranked` (chunk ID, score) that the chunk store holds, as `ScoredChunk`s."""
        out: list[ScoredChunk] = []
        # the chunk store holds every chunk the graph does; a few spare IDs cover one it left out
        for start in range(0, len(ranked), 2 * k):
            part = ranked[start : start + 2 * k]
            records = self.chunks.get_chunks([c for c, _ in part], filter=filter)
            out += [_scored(records[c], s) for c, s in part if c in records]
            if len(out) >= k:
                break
        return out[:k]

    def get_chunks(
        self, chunk_ids: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, StoredChunk]:
        return self.chunks.get_chunks(chunk_ids, filter=filter)

    def chunks_at(
        self, document_id: str, indexes: Iterable[int], filter: SearchFilter | None = None
    ) -> list[StoredChunk]:
        return self.chunks.chunks_at(document_id, indexes, filter=filter)


def _idf(df: int, total: int) -> float:
    """BM25's IDF (always positive): ln(1 + (N - df + 0.5) / (df + 0.5))."""
    return math.log(1.0 + (max(total - df, 0) + 0.5) / (df + 0.5))


def _scored(chunk: StoredChunk, score: float) -> ScoredChunk:
    return ScoredChunk(
        chunk.chunk_id,
        chunk.document_id,
        chunk.chunk_index,
        chunk.start_char,
        chunk.end_char,
        chunk.content,
        tuple(chunk.heading_chain),
        chunk.extra,
        score=score,
    )
