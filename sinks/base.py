"""What every store promises: the write side the pipeline fans chunks out to, and the read side search uses.

Write side (`Sink`), two-phase so that a failure while computing writes nothing anywhere: `prepare` computes
(embeddings, terms, entities) and touches no store, `write` only stores what was prepared. `write` replaces a
document's chunks with exactly the given ones (new ones upserted first, so readers never see it absent) and
`delete` removes every trace; both are safe to re-run after a crash half-way. Every store holds each chunk's
content exactly and `content_hashes` hashes what it reads back; `group_batch` refuses a lone surrogate, which
no store can hold, before any store is written.

Read side (`ChunkSearch`, `GraphReader`), protocols in the manner of LlamaIndex's `vector_stores/types.py`:
retrieval depends on these alone, and every store returns one record type, `StoredChunk` (`ScoredChunk` when
ranked), so hits from BM25 and from Qdrant compare by chunk ID. docs/design.md has the details.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, get_args, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from unichunk.chunking.errors import UnichunkError
from unichunk.chunking.models import Chunk, Document

DocumentChunks = tuple[Document, Sequence[Chunk]]

SinkName = Literal["vectors", "keywords", "graph"]
SINK_NAMES: tuple[SinkName, ...] = get_args(SinkName)

# A search filter: field -> value or list of values (any of them). Every store filters on `document_id`
# and on `labels` (LABELS_FILTER: a chunk matches when it carries at least one of the listed access labels,
# `unichunk.chunking.access_labels`; an empty list matches nothing).
SearchFilter = Mapping[str, str | Sequence[str]]
LABELS_FILTER = "labels"

# What `content_hashes` reports for a chunk whose content a store does not hold in readable form (absent, or
# an encoding it cannot decode): it matches no chunk ID's hash, so the alignment check reports it altered.
NO_CONTENT_HASH = ""

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class SinkError(UnichunkError):
    """A store failed; `sink` names which one, so the pipeline can report and retry it."""

    def __init__(self, sink: str, message: str) -> None:
        super().__init__(f"[{sink}] {message}")
        self.sink = sink


def redacted_url(url: str) -> str:
    """`url` with its password, if any, shown as `***` (`redis://:***@host:6379`), fit for a message."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}"))


class InvalidRequest(SinkError, ValueError):
    """A store was asked for something it cannot do (a filter key it does not index, a batch prepared by
    another sink, a chunk filed under the wrong document): retrying will not help, the caller must change."""


# --- records ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredChunk:
    """A chunk as a store holds it: identity, exact offsets into its document, text and heading chain.

    `extra` is whatever else the store keeps beside the chunk (Qdrant: the document's title, source and
    path, the index generation; BM25: nothing). It never takes part in equality.
    """

    chunk_id: str
    document_id: str
    chunk_index: int
    start_char: int
    end_char: int
    content: str
    heading_chain: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def title(self) -> str | None:
        """The document's title as the store knows it (title, else source ID, else path), if it keeps one."""
        for key in ("title", "source_id", "path"):
            if value := self.extra.get(key):
                return str(value)
        return None


@dataclass(frozen=True)
class ScoredChunk(StoredChunk):
    """A stored chunk ranked by one store for one query; `score` is that store's own (BM25, cosine)."""

    score: float = 0.0


@dataclass(frozen=True, slots=True)
class GraphEntity:
    name: str  # normalised key
    display_name: str
    type: str
    description: str
    source_chunk_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EntitySource:
    """One source chunk of an entity, as the graph keeps it: where it is (`document_id`, the document's
    `title`), the name the chunk wrote (`written`: '' where it wrote only a merged form) and the keys its
    names had before resolution made them this entity (`merged_from`: a surname, an acronym, a title or
    possessive form; empty where nothing was merged there)."""

    chunk_id: str
    document_id: str
    title: str
    written: str
    merged_from: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GraphRelation:
    source: str  # normalised keys, source < target
    target: str
    keywords: str
    description: str
    weight: float
    source_chunk_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GraphContext:
    """Entities and relations handed to a generator beside (or instead of) retrieved chunks."""

    entities: tuple[GraphEntity, ...] = ()
    relations: tuple[GraphRelation, ...] = ()

    @property
    def chunk_ids(self) -> set[str]:
        """Every chunk the context was learnt from (to fetch the supporting text)."""
        ids = {c for e in self.entities for c in e.source_chunk_ids}
        return ids | {c for r in self.relations for c in r.source_chunk_ids}

    def to_text(self) -> str:
        """A compact plain-text rendering for a prompt."""
        names = {e.name: e.display_name for e in self.entities}
        lines = ["Entities:"] + [f"- {e.display_name} ({e.type}): {e.description}" for e in self.entities]
        lines.append("Relations:")
        lines += [
            f"- {names.get(r.source, r.source)} -- {names.get(r.target, r.target)} "
            f"[{r.keywords}] (weight {r.weight:g}): {r.description}"
            for r in self.relations
        ]
        return "\n".join(lines)


# --- read side -------------------------------------------------------------------------------------------


@runtime_checkable
class ChunkSearch(Protocol):
    """A store that ranks chunks for a query and hands back stored chunks by ID or by position."""

    name: ClassVar[str]

    def search(self, query: str, k: int = 10, filter: SearchFilter | None = None) -> list[ScoredChunk]:
        """The `k` best chunks for `query`, best first; [] when nothing matches."""
        ...

    def get_chunks(
        self, chunk_ids: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, StoredChunk]:
        """Stored chunks by ID (absent IDs, and those `filter` excludes, are left out)."""
        ...

    def chunks_at(
        self, document_id: str, indexes: Iterable[int], filter: SearchFilter | None = None
    ) -> list[StoredChunk]:
        """A document's chunks at these `chunk_index` positions that `filter` lets through, in index order
        (neighbour expansion)."""
        ...


@runtime_checkable
class TextScorer(Protocol):
    """A keyword store that scores texts it does not hold by its own statistics (passages of its chunks)."""

    def score_texts(self, query: str, texts: Sequence[str]) -> list[float]:
        """Each text's score for `query`, on the scale of the store's chunk scores."""
        ...


@runtime_checkable
class AliasedCollection(Protocol):
    """A store whose live generation outside readers find under one stable name (Qdrant's alias)."""

    def point_alias(self, alias: str) -> None:
        """Make `alias` name this store's own collection, atomically."""
        ...


@runtime_checkable
class GraphReader(Protocol):
    """The knowledge graph's read side: what the graph learnt from chunks, and around an entity.

    With a `filter` (`labels`, `document_id`), an entity or relation is shown only if one of its source
    chunks passes it, and its description, keywords, weight and sources come from those chunks alone."""

    def context_for_chunks(
        self, chunk_ids: Iterable[str], filter: SearchFilter | None = None
    ) -> GraphContext:
        """Entities mentioned in these chunks, and the relations between them stated in these chunks."""
        ...

    def neighbourhood(
        self, entity_name: str, hops: int = 1, limit: int = 50, filter: SearchFilter | None = None
    ) -> GraphContext:
        """Entities within `hops` relation steps of one entity, with the strongest relations among them."""
        ...

    def strongest_relations(
        self, entity_names: Iterable[str], limit: int = 50, filter: SearchFilter | None = None
    ) -> GraphContext:
        """Each entity's `limit` heaviest relations (either direction), heaviest first, with the entities at
        their ends."""
        ...

    def find_entities(
        self, keys: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, tuple[GraphEntity, ...]]:
        """The entities each key names, by their key or their alias (surname, acronym); absent keys left out."""
        ...

    def chunk_count(self) -> int:
        """How many chunks the graph holds."""
        ...

    def entity_sources(
        self, names: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, tuple[EntitySource, ...]]:
        """Each entity's source chunks (by key, in chunk-ID order) with what resolution merged there; under
        a `filter`, only the passing chunks; entities without one left out."""
        ...


# --- write side ------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    """What one sink computed for a batch, ready to write. `payload` is private to that sink."""

    sink: str
    documents: list[Document]
    chunks: dict[str, list[Chunk]]  # document_id -> its chunks, in order
    payload: Any = None
    stats: dict[str, float] = field(default_factory=dict)  # e.g. {"truncated_chunks": 2}

    @property
    def chunk_count(self) -> int:
        return sum(len(c) for c in self.chunks.values())


class Sink(ABC):
    """A store of chunks keyed by the shared chunk IDs."""

    name: ClassVar[SinkName]

    @abstractmethod
    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        """Compute everything needed to store `batch`; must not write to the store."""

    @abstractmethod
    def write(self, prepared: Prepared) -> int:
        """Store a prepared batch, replacing each document's previous chunks; returns chunks written."""

    @abstractmethod
    def delete(self, document_id: str) -> int:
        """Remove every trace of the document; returns how many chunks were removed (0 if absent)."""

    @abstractmethod
    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        """All stored chunk IDs, or those of one document."""

    @abstractmethod
    def content_hashes(self, document_id: str | None = None) -> dict[str, str]:
        """chunk_id -> SHA-256 hex of the content the store holds for it, read back (and decoded) from the
        store, for all stored chunks or those of one document; `NO_CONTENT_HASH` where it holds none.

        Never the hash recorded at write time: the point is to catch content a store altered."""

    def relabel(self, document_id: str, labels: Sequence[str]) -> int:
        """Set the access labels of every chunk of the document to `labels` (normalised), without
        re-embedding or re-extracting anything; returns how many chunks changed. Safe to re-run.

        Not abstract only so that a store without labels yet still opens: it says so here."""
        raise NotImplementedError(f"the {self.name} store keeps no access labels")

    def relabel_many(self, labels: Mapping[str, Sequence[str]]) -> int:
        """`relabel` for several documents (document_id -> labels); returns chunks changed. A store that
        can do it in one pass (one flush, one transaction) does; this default relabels one by one."""
        return sum(self.relabel(document_id, found) for document_id, found in labels.items())

    def chunk_labels(self, document_id: str | None = None) -> dict[str, tuple[str, ...]]:
        """chunk_id -> access labels as stored (sorted), for all stored chunks or those of one document:
        what `verify` compares with the records (a store that raises NotImplementedError is skipped)."""
        raise NotImplementedError(f"the {self.name} store keeps no access labels")

    @abstractmethod
    def drop(self) -> None:
        """Delete the whole store (collection, index file, graph): a retired index generation going away."""

    def upsert(self, document: Document, chunks: Sequence[Chunk]) -> int:
        """Prepare and write one document (the two phases in one call)."""
        return self.write(self.prepare([(document, chunks)]))

    def close(self) -> None:  # noqa: B027 - optional hook, most sinks hold a client to release
        """Release clients, files and locks."""

    @property
    def location(self) -> str | None:
        """Where the store lives, for messages: its server's URL with any password hidden
        (`redacted_url`); None for a store in files under the data dir."""
        return None

    def optimize(self) -> bool:
        """Reorganise the store after a run's writes (build search indexes, reclaim deleted entries'
        space); True when it changed something. The pipeline calls it once per run, after the last write,
        because it can take long. Most stores organise themselves as they write: nothing to do."""
        return False

    def check_prepared(self, prepared: Prepared) -> None:
        """Refuse a batch another sink prepared (its payload would mean nothing here)."""
        if prepared.sink != self.name:
            raise InvalidRequest(self.name, f"cannot write a batch prepared by sink {prepared.sink!r}")

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def group_batch(sink: str, batch: Sequence[DocumentChunks]) -> tuple[list[Document], dict[str, list[Chunk]]]:
    """Split a batch into its documents and a document_id -> chunks map, checking chunks belong to it and
    that every store can hold them exactly (`check_storable`)."""
    documents: list[Document] = []
    chunks: dict[str, list[Chunk]] = {}
    for document, doc_chunks in batch:
        for chunk in doc_chunks:
            if chunk.document_id != document.document_id:
                raise InvalidRequest(
                    sink, f"chunk {chunk.chunk_id} does not belong to document {document.document_id}"
                )
            check_storable(sink, chunk)
        documents.append(document)
        chunks[document.document_id] = list(doc_chunks)
    return documents, chunks


def check_storable(sink: str, chunk: Chunk) -> None:
    """Refuse a chunk whose text holds a lone surrogate (see the module docstring): the stores cannot hold
    it, and dropping or replacing it would store other content than the chunk ID's hash names."""
    for where, text in (("content", chunk.content), *(("heading", h) for h in chunk.heading_chain)):
        if text.isascii():
            continue
        if found := _LONE_SURROGATE.search(text):
            raise InvalidRequest(
                sink,
                f"chunk {chunk.chunk_id}: its {where} holds a lone surrogate U+{ord(found.group()):04X} at "
                f"character {found.start()}, which is not a Unicode character and has no UTF-8 form: the stores "
                "cannot hold it exactly",
            )


def matches_nothing(values: Mapping[str, Sequence[str]]) -> bool:
    """Whether a filter (as `filter_values` gives it) lists no accepted value for some field: then no
    chunk matches (a principal with no labels reads nothing), and the store need not be asked."""
    return any(not accepted for accepted in values.values())


def filter_values(
    sink: str, filter: SearchFilter | None, supported: Iterable[str] | None = None
) -> dict[str, list[str]]:
    """A search filter as field -> list of accepted values. A key outside `supported` (None: any key) is
    refused rather than ignored: ignoring it would return hits the caller excluded."""
    if not filter:
        return {}
    unknown = [] if supported is None else sorted(set(filter) - set(supported))
    if unknown:
        raise InvalidRequest(
            sink, f"unsupported filter key(s) {unknown}; this store filters on {sorted(supported or ())}"
        )
    values: dict[str, list[str]] = {}
    for key, value in filter.items():
        if isinstance(value, str):
            values[key] = [value]
        elif isinstance(value, Iterable):
            values[key] = [str(v) for v in value]
        else:
            raise InvalidRequest(sink, f"filter {key} must be a string or a list of strings")
    return values
