r"""The LightRAG-style knowledge graph sink: entities and relations extracted per chunk, linked to chunk IDs.

The statements and the schema are in `cypher.py`; this module decides which to send, in what order, with
which rows. FalkorDB runs each statement atomically but nothing across statements, so every write is a
sequence of statements each safe to repeat: a crash half-way is repaired by writing (or deleting) again.
A batch of documents is one sequence: each kind of statement is sent once for all of them (cut at
`batch_size` rows), its rows aggregated by MERGE key in Python, and no query filters after a write.

Entities are resolved inside each document (`resolution.aggregate`: a surname, an acronym, titles and
possessives), never across documents. Since resolution reads the whole document, a rewrite trims from the
chunks it keeps whatever they no longer contribute, as it trims the chunks it removes.

Chunk content is stored exactly: as is, unless it holds a NUL, which FalkorDB cannot hold; then escaped under
a `content_encoding` marker that `decode_content` undoes (docs/design.md, "Identity and exactness").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from unichunk.chunking.access_labels import document_labels, normalise_labels
from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.segments import first_users, segment_chunk, segment_grouped
from unichunk.sinks.base import (
    NO_CONTENT_HASH,
    DocumentChunks,
    EntitySource,
    GraphContext,
    GraphEntity,
    GraphRelation,
    Prepared,
    SearchFilter,
    Sink,
    SinkError,
    filter_values,
    group_batch,
)
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.device import resolve_device
from unichunk.sinks.graph import cypher
from unichunk.sinks.graph.backends import GraphBackend, open_backend
from unichunk.sinks.graph.cypher import MAX_HOPS, UNKNOWN_TYPE
from unichunk.sinks.graph.extraction import (
    EntityExtractor,
    Extraction,
    SpacyExtractor,
    entity_key,
    merge_extractions,
    pack_extraction,
    unpack_extraction,
)
from unichunk.sinks.graph.extraction_worker import ProcessExtractor
from unichunk.sinks.graph.llm_extraction import LLMExtractor
from unichunk.sinks.graph.names import spellings
from unichunk.sinks.graph.resolution import PAIR_SEPARATOR, DocumentGraph, aggregate
from unichunk.sinks.graph.resolution import clean_text as _clean
from unichunk.sinks.result_cache import ResultCache

ESCAPED = "backslash"  # `content_encoding` of content stored escaped (see the module docstring)
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
_UNESCAPED = {"\\": "\\", "0": "\x00"}


@dataclass(frozen=True)
class _Scope:
    """A read filter as the graph applies it: the filter keys (`cypher.FILTER_KEYS`) and their parameters."""

    keys: tuple[str, ...]
    params: dict[str, list[str]]


class KnowledgeGraphSink(Sink):
    """Chunks, entities and relations in Neo4j or FalkorDB, keyed by the shared chunk IDs."""

    name = "graph"

    def __init__(
        self,
        backend: GraphBackend,
        extractor: EntityExtractor | None = None,
        *,
        store_content: bool = True,
        batch_size: int = 1000,
        generation: str | None = None,
        cache: ResultCache | None = None,
        segments: bool = False,
    ) -> None:
        self.backend = backend
        # read each piece between chunk boundaries once where the extractor allows (`model_input`)
        self.segments = segments
        self.cache = cache  # extractions by (extractor fingerprint, chunk text); None: none kept
        self.generation = generation  # recorded on every Chunk node
        self.extractor = extractor or SpacyExtractor()
        self.store_content = store_content
        self.batch_size = batch_size
        try:
            backend.setup_schema()
        except Exception as exc:
            raise SinkError(self.name, f"schema setup failed on {backend.name}: {exc}") from exc

    @property
    def location(self) -> str | None:
        return self.backend.location

    @classmethod
    def from_settings(
        cls, settings: SinkSettings, *, extractor: EntityExtractor | None = None
    ) -> KnowledgeGraphSink:
        """Backend and extractor as configured (Neo4j / FalkorDB URL / embedded FalkorDB; spaCy / LLM)."""
        if extractor is None and settings.extractor == "llm":
            extractor = LLMExtractor.from_settings(settings)
        elif extractor is None:
            extractor = SpacyExtractor(device=resolve_device(settings.device))
            if settings.spacy_in_worker():
                extractor = ProcessExtractor(extractor)
        fingerprint = extractor.fingerprint
        cache = ResultCache.open(settings, "extractions", fingerprint) if fingerprint else None
        return cls(
            open_backend(settings),
            extractor,
            generation=settings.generation,
            cache=cache,
            segments=settings.segmented_extraction(),
        )

    # -- writing -----------------------------------------------------------------------------------

    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        documents, chunks = group_batch(self.name, batch)
        everything = [c for doc_chunks in chunks.values() for c in doc_chunks]
        reads_code = self.extractor.reads_code
        if self.extractor.composes and (self.segments or not reads_code):
            # each piece between chunk boundaries read once, each chunk its pieces' merged extraction (or,
            # reading whole chunks, each chunk its prose's); code blocks left out where the extractor would
            # read them as prose
            segments = segment_grouped(documents, chunks, headings=False, code=reads_code, cut=self.segments)
            pieces = [segment_chunk(text) for text in segments.texts]
            made, fresh = self._extract(pieces)
            extractions = [
                merge_extractions(c.chunk_id, [made[i] for i in own])
                for c, own in zip(everything, segments.members, strict=True)
            ]
            extracted = first_users(segments.members, [p.content_hash for p in pieces], fresh)
        else:
            extractions, fresh = self._extract(everything)
            extracted = len(fresh)
        by_chunk = dict(zip((c.chunk_id for c in everything), extractions, strict=True))
        payload = {
            doc_id: aggregate([by_chunk[c.chunk_id] for c in doc_chunks])
            for doc_id, doc_chunks in chunks.items()
        }
        stats = {
            "entity_mentions": float(sum(len(g.mentions) for g in payload.values())),
            "relations": float(sum(len(g.relations) for g in payload.values())),
            "extracted_chunks": float(extracted),
            "reused_chunks": float(len(everything) - extracted),
        }
        return Prepared(self.name, documents, chunks, payload, stats)

    def _extract(self, chunks: list[Chunk]) -> tuple[list[Extraction], set[str]]:
        """One extraction per chunk, in order, and the content hashes of the texts extracted now: the
        cache's extractions are reused (rebound to each chunk's ID), and a text several chunks share is
        extracted once."""
        cache = self.cache
        held: dict[str, bytes] = cache.get([c.content_hash for c in chunks]) if cache is not None else {}
        todo: dict[str, Chunk] = {}
        for chunk in chunks:
            if chunk.content_hash not in held and chunk.content_hash not in todo:
                todo[chunk.content_hash] = chunk
        try:
            made = self.extractor.extract(list(todo.values()))
        except Exception as exc:
            raise SinkError(self.name, f"entity extraction failed: {exc}") from exc
        if [x.chunk_id for x in made] != [c.chunk_id for c in todo.values()]:
            raise SinkError(self.name, "the extractor did not return one extraction per chunk, in order")
        fresh = {key: pack_extraction(x) for key, x in zip(todo, made, strict=True)}
        if cache is not None:
            cache.put(fresh)
        by_text = held | fresh
        own = {x.chunk_id: x for x in made}  # a chunk extracted now keeps its extraction as made
        return [
            own.get(c.chunk_id) or unpack_extraction(by_text[c.content_hash], c.chunk_id) for c in chunks
        ], set(todo)

    def write(self, prepared: Prepared) -> int:
        """Store the whole batch with each kind of statement sent once (cut at `batch_size` rows).

        Round trips cost client and server CPU (taken from the embedding model on a small machine) and,
        against a remote Neo4j, latency, so statements are sent per batch, never per document.
        """
        documents = _last_occurrences(prepared.documents)
        try:
            if documents:
                self._write_batch(
                    documents,
                    prepared.chunks,
                    {d.document_id: prepared.payload[d.document_id] for d in documents},
                )
        except SinkError:
            raise
        except Exception as exc:
            raise SinkError(self.name, f"write failed on {self.backend.name}: {exc}") from exc
        return sum(len(prepared.chunks[d.document_id]) for d in prepared.documents)

    def _write_batch(
        self,
        documents: Sequence[Document],
        chunks: Mapping[str, Sequence[Chunk]],
        graphs: Mapping[str, DocumentGraph],
    ) -> None:
        """The steps of one document's write, each run for all documents at once and in the same order.

        A rewritten document's kept chunks (same ID, so same text) may contribute differently now, since
        resolution reads the whole document: what they no longer contribute is trimmed with the removed
        chunks' contributions, after everything new is written."""
        doc_ids = [d.document_id for d in documents]
        labels = {d.document_id: list(document_labels(d.metadata)) for d in documents}
        # validated before anything is sent
        rows = [self._chunk_row(c, labels[d]) for d in doc_ids for c in chunks[d]]
        ids = {d: [c.chunk_id for c in chunks[d]] for d in doc_ids}
        graph = _merge_graphs([graphs[d] for d in doc_ids])
        self._batched(
            cypher.UPSERT_DOCUMENTS,
            [
                {"document_id": d.document_id, "title": _clean(d.title), "content_hash": d.content_hash}
                for d in documents
            ],
        )
        before = self._stored_chunk_ids_of(doc_ids)  # after a write: FalkorDB refuses reads of no graph
        self._batched(cypher.UPSERT_CHUNKS, rows)
        self._batched(cypher.UPDATE_CHANGED_CHUNKS, rows)
        links = {d: list(pairwise(ids[d])) for d in doc_ids}
        self._batched(cypher.LINK_NEXT_CHUNKS, [{"a": a, "b": b} for d in doc_ids for a, b in links[d]])
        self._batched(
            cypher.UNLINK_STALE_NEXT_CHUNKS,
            [{"document_id": d, "links": [f"{a}|{b}" for a, b in links[d]]} for d in doc_ids],
        )
        self._batched(cypher.MERGE_MENTIONS, graph.mentions)
        self._batched(cypher.UPSERT_ENTITIES, graph.entities)
        self._batched(cypher.UPSERT_RELATIONS, graph.relations)
        stored = self._stored_chunk_ids_of(doc_ids)
        if unkeyed := [d for d in doc_ids if None in stored[d]]:
            self._batched(cypher.DELETE_UNKEYED_CHUNKS, unkeyed, key="document_ids")
        for d in unkeyed:
            stored[d].discard(None)
        # The write is idempotent: failing before anything is removed lets a retry repair it.
        if lost := {d: missing for d in doc_ids if (missing := sorted(set(ids[d]) - stored[d]))}:
            first, missing = next(iter(lost.items()))
            where = first if len(lost) == 1 else f"{len(lost)} documents (first {first})"
            count = sum(len(m) for m in lost.values())
            raise SinkError(self.name, f"{count} chunk(s) of {where} not stored: {missing[:3]}")
        existed = {c for d in doc_ids for c in before[d]}
        kept = [row for row in graph.chunks if row["chunk_id"] in existed]
        self._remove_chunks(sorted(c for d in doc_ids for c in stored[d] - set(ids[d])), kept)

    def delete(self, document_id: str) -> int:
        try:
            stored = self._stored_chunk_ids(document_id)
            if None in stored:  # a chunk node that lost its ID cannot be removed by key
                self.backend.run(cypher.DELETE_UNKEYED_CHUNKS, {"document_ids": [document_id]})
            ids = sorted(c for c in stored if c is not None)
            self._remove_chunks(ids)
            self.backend.run(cypher.DELETE_DOCUMENT, {"document_id": document_id})
        except Exception as exc:
            raise SinkError(
                self.name, f"delete of {document_id} failed on {self.backend.name}: {exc}"
            ) from exc
        return len(ids)

    def relabel(self, document_id: str, labels: Sequence[str]) -> int:
        """Set the access labels of every chunk of the document, in one statement (nothing is extracted
        again: what the graph learnt stays, only who may read it changes); returns the chunks changed, 0
        on a re-run."""
        wanted = list(normalise_labels(labels))
        try:
            rows = self.backend.run(cypher.RELABEL_CHUNKS, {"document_id": document_id, "labels": wanted})
        except Exception as exc:
            raise SinkError(
                self.name, f"relabel of {document_id} failed on {self.backend.name}: {exc}"
            ) from exc
        return int(rows[0]["n"]) if rows else 0

    def chunk_labels(self, document_id: str | None = None) -> dict[str, tuple[str, ...]]:
        """Chunk ID -> the access labels its Chunk node holds (for verify), of one document or all."""
        try:
            rows = (
                self.backend.run(cypher.ALL_CHUNK_LABELS, write=False)
                if document_id is None
                else self.backend.run(cypher.DOCUMENT_CHUNK_LABELS, {"document_id": document_id}, write=False)
            )
        except Exception as exc:
            raise SinkError(self.name, f"reading chunk labels failed on {self.backend.name}: {exc}") from exc
        return {r["chunk_id"]: tuple(r["labels"] or ()) for r in rows if r["chunk_id"] is not None}

    def _remove_chunks(self, chunk_ids: list[str], kept: Sequence[Mapping[str, Any]] = ()) -> None:
        """Remove `chunk_ids` with everything only they taught the graph, and trim from the `kept` chunks
        (rows of `DocumentGraph.chunks`) whatever they no longer contribute (`cypher.TRIM_ENTITIES`)."""
        if not chunk_ids and not kept:
            return
        rows = [*kept, *({"chunk_id": c, "names": [], "pairs": []} for c in chunk_ids)]
        touched = sorted(r["chunk_id"] for r in rows)
        self._batched(cypher.TRIM_RELATIONS, rows)
        self._batched(cypher.TRIM_ENTITIES, rows)
        self._batched(cypher.DELETE_ORPHAN_RELATIONS, touched, key="chunk_ids")
        self._batched(cypher.DELETE_ORPHAN_ENTITIES, touched, key="chunk_ids")
        self._batched(cypher.DELETE_STALE_MENTIONS, list(kept))
        self._batched(cypher.DELETE_CHUNKS, chunk_ids, key="chunk_ids")

    def _batched(self, query: str, rows: Sequence[Any], key: str = "rows") -> None:
        for start in range(0, len(rows), self.batch_size):
            self.backend.run(query, {key: rows[start : start + self.batch_size]})

    def _chunk_row(self, chunk: Chunk, labels: list[str]) -> dict[str, Any]:
        """The MERGE key and the other properties; `props` leaves out chunk_id so `SET +=` cannot touch it.
        `labels` are the document's access labels (an empty list for none, so a removed label is unset)."""
        if not isinstance(chunk.chunk_id, str) or not chunk.chunk_id:
            raise SinkError(self.name, f"chunk {chunk.chunk_index} of {chunk.document_id} has no chunk_id")
        props: dict[str, Any] = {
            "chunk_index": chunk.chunk_index,
            "document_id": chunk.document_id,
            "start_char": chunk.start_char,
            "end_char": chunk.end_char,
            "token_count": chunk.token_count,
            "content_hash": chunk.content_hash,
            "labels": labels,
        }
        if self.store_content:  # a null encoding is sent too: it removes a marker left by an older write
            props["content"], props["content_encoding"] = encode_content(chunk.content)
        if self.generation is not None:
            props["generation"] = self.generation
        return {"chunk_id": chunk.chunk_id, "document_id": chunk.document_id, "props": props}

    # -- reading -----------------------------------------------------------------------------------

    def _stored_chunk_ids(self, document_id: str) -> set[str | None]:
        return self._stored_chunk_ids_of([document_id])[document_id]

    def _stored_chunk_ids_of(self, document_ids: Sequence[str]) -> dict[str, set[str | None]]:
        """Stored chunk IDs per document (None for a Chunk node that lost its ID), one read per slice."""
        stored: dict[str, set[str | None]] = {d: set() for d in document_ids}
        for start in range(0, len(document_ids), self.batch_size):
            part = list(document_ids[start : start + self.batch_size])
            for row in self.backend.run(cypher.DOCUMENTS_CHUNK_IDS, {"document_ids": part}, write=False):
                stored[row["document_id"]].add(row["chunk_id"])
        return stored

    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        if document_id is not None:
            return self._stored_chunk_ids(document_id)  # type: ignore[return-value]  # None shows a broken node
        return {r["chunk_id"] for r in self.backend.run(cypher.ALL_CHUNK_IDS, write=False)}

    def content_hashes(self, document_id: str | None = None) -> dict[str, str]:
        """SHA-256 of each Chunk node's content, read back with Cypher and decoded, `batch_size` chunks per
        statement. With `store_content=False` the graph keeps no text, and reports no chunk."""
        if not self.store_content:
            return {}
        try:
            ids = sorted(c for c in self.chunk_ids(document_id) if c is not None)
            hashes: dict[str, str] = {}
            for start in range(0, len(ids), self.batch_size):
                part = ids[start : start + self.batch_size]
                for row in self.backend.run(cypher.CHUNK_CONTENTS, {"chunk_ids": part}, write=False):
                    hashes[row["chunk_id"]] = _content_hash(row.get("content"), row.get("content_encoding"))
        except Exception as exc:
            raise SinkError(self.name, f"reading chunk content failed on {self.backend.name}: {exc}") from exc
        return hashes

    def _scope(self, filter: SearchFilter | None) -> _Scope | None:
        """The filter as Cypher parameters (None: unfiltered). Only `labels` and `document_id` are
        understood; another key is refused (`InvalidRequest`) rather than ignored."""
        values = filter_values(self.name, filter, cypher.FILTER_KEYS)
        if not values:
            return None
        keys = tuple(sorted(values))
        return _Scope(keys, {cypher.FILTER_PARAMS[k]: values[k] for k in keys})

    def _read(self, query: str, params: Mapping[str, Any], scope: _Scope | None = None) -> list[dict]:
        return self.backend.run(query, {**params, **(scope.params if scope else {})}, write=False)

    def context_for_chunks(
        self, chunk_ids: Iterable[str], filter: SearchFilter | None = None
    ) -> GraphContext:
        """Entities mentioned in these chunks, and the relations between them stated in these chunks.

        With a `filter` (`labels`, `document_id`), only those of the chunks that pass it count, and each
        entity and relation is derived from its passing source chunks alone (`cypher.filtered_*`)."""
        ids = sorted(set(chunk_ids))
        scope = self._scope(filter)
        if scope is not None and ids:
            ids = sorted(
                r["chunk_id"]
                for r in self._read(cypher.passing_chunk_ids(scope.keys), {"chunk_ids": ids}, scope)
            )
        if not ids:
            return GraphContext()
        entities_query = (
            cypher.ENTITIES_OF_CHUNKS if scope is None else cypher.filtered_entities_of_chunks(scope.keys)
        )
        entities = [_entity(r) for r in self._read(entities_query, {"chunk_ids": ids}, scope)]
        names = sorted(e.name for e in entities)
        relations_query = (
            cypher.RELATIONS_OF_CHUNKS if scope is None else cypher.filtered_relations_of_chunks(scope.keys)
        )
        rows = self._read(relations_query, {"names": names, "chunk_ids": ids}, scope) if names else []
        return GraphContext(tuple(sorted(entities, key=lambda e: e.name)), tuple(_relation(r) for r in rows))

    def neighbourhood(
        self, entity_name: str, hops: int = 1, limit: int = 50, filter: SearchFilter | None = None
    ) -> GraphContext:
        """Entities within `hops` RELATED steps of one entity, with the strongest relations among them.
        With a `filter`, only relations with a passing source chunk are stepped along and shown, and an
        entity without one is as absent as an unknown one."""
        if not 1 <= hops <= MAX_HOPS:
            raise ValueError(f"hops must be between 1 and {MAX_HOPS}")
        key = self._stored_key(entity_name)
        scope = self._scope(filter)
        if scope is None:
            rows = self._read(cypher.NEIGHBOURS[hops], {"name": key})
            names = sorted({key} | {r["name"] for r in rows})
        elif not self._read(cypher.filtered_entities_by_name(scope.keys), {"names": [key]}, scope):
            return GraphContext()
        else:
            names = self._filtered_reach(key, hops, scope)
        relations_query = (
            cypher.RELATIONS_AMONG if scope is None else cypher.filtered_relations_among(scope.keys)
        )
        relations = [
            _relation(r) for r in self._read(relations_query, {"names": names, "limit": int(limit)}, scope)
        ]
        keep = {key} | {r.source for r in relations} | {r.target for r in relations}
        entities = self._entities_by_name(sorted(keep), scope)
        entities.sort(key=lambda e: (e.name != key, e.name))
        return GraphContext(tuple(entities), tuple(relations))

    def _filtered_reach(self, key: str, hops: int, scope: _Scope) -> list[str]:
        """Entities within `hops` steps of `key` along relations that pass the filter, one statement a hop."""
        seen, frontier = {key}, [key]
        for _ in range(hops):
            if not frontier:
                break
            rows = self._read(
                cypher.filtered_neighbours(scope.keys), {"names": frontier, "seen": sorted(seen)}, scope
            )
            frontier = sorted({r["name"] for r in rows} - seen)
            seen.update(frontier)
        return sorted(seen)

    def _entities_by_name(self, names: list[str], scope: _Scope | None) -> list[GraphEntity]:
        query = cypher.ENTITIES_BY_NAME if scope is None else cypher.filtered_entities_by_name(scope.keys)
        return [_entity(r) for r in self._read(query, {"names": names}, scope)]

    def strongest_relations(
        self, entity_names: Iterable[str], limit: int = 50, filter: SearchFilter | None = None
    ) -> GraphContext:
        """Each entity's `limit` heaviest relations (either direction), deduplicated and heaviest first, with
        the entities at their ends: two statements for any number of entities (a search's graph context
        expands several; one `neighbourhood` each took three). With a `filter`, only relations with a
        passing source chunk, weighed by those chunks alone."""
        keys = sorted({entity_key(name) for name in entity_names})
        if not keys:
            return GraphContext()
        scope = self._scope(filter)
        query = (
            cypher.RELATIONS_OF_ENTITIES
            if scope is None
            else cypher.filtered_relations_of_entities(scope.keys)
        )
        rows = self._read(query, {"names": keys, "limit": int(limit)}, scope)
        relations = {(r.source, r.target): r for r in map(_relation, rows)}
        ordered = sorted(relations.values(), key=lambda r: (-r.weight, r.source, r.target))
        ends = {name for r in ordered for name in (r.source, r.target)}
        entities = self._entities_by_name(sorted(set(keys) | ends), scope)
        return GraphContext(tuple(sorted(entities, key=lambda e: e.name)), tuple(ordered))

    def find_entities(
        self, keys: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, tuple[GraphEntity, ...]]:
        """The entities each key names: those whose key (`name`) it is, then those whose `alias` (a
        person's surname, an acronym) it is, each once per key; keys that find none are left out. With a
        `filter`, only entities with a passing source chunk, derived from those chunks alone."""
        lookup = sorted({k for k in keys if k})
        if not lookup:
            return {}
        scope = self._scope(filter)
        found: dict[str, dict[str, GraphEntity]] = {}
        for prop in cypher.LOOKUP_PROPERTIES:
            query = (
                cypher.ENTITIES_BY_KEY[prop]
                if scope is None
                else cypher.filtered_entities_by_key(scope.keys, prop)
            )
            for row in self._read(query, {"lookup": lookup}, scope):
                found.setdefault(row["key"], {}).setdefault(row["name"], _entity(row))
        return {key: tuple(entities.values()) for key, entities in sorted(found.items())}

    def chunk_count(self) -> int:
        """How many chunks the graph holds (what an entity's share of them is measured against)."""
        return int(self._read(cypher.COUNT_CHUNKS, {})[0]["n"])

    def entity_sources(
        self, names: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, tuple[EntitySource, ...]]:
        """Each entity's source chunks by key, in chunk-ID order, with its document, the name the chunk
        wrote and the keys resolution merged into the entity there (`chunk_merged_from`); with a `filter`,
        only the chunks that pass it, and an entity with none is left out."""
        wanted = sorted({n for n in names if n})
        if not wanted:
            return {}
        scope = self._scope(filter)
        query = cypher.ENTITY_SOURCES if scope is None else cypher.filtered_entity_sources(scope.keys)
        found: dict[str, list[EntitySource]] = {}
        for row in self._read(query, {"names": wanted}, scope):
            merged = tuple(k for k in (row.get("merged_from") or "").split(PAIR_SEPARATOR) if k)
            found.setdefault(row["name"], []).append(
                EntitySource(
                    chunk_id=row["chunk_id"],
                    document_id=row.get("document_id") or "",
                    title=row.get("title") or "",
                    written=row.get("written") or "",
                    merged_from=merged,
                )
            )
        return {name: tuple(sources) for name, sources in found.items()}

    def entity(self, name: str, filter: SearchFilter | None = None) -> GraphEntity | None:
        """One entity by any spelling of its name (under a `filter`: as the reader may see it)."""
        candidates = spellings(name)
        found = {e.name: e for e in self._entities_by_name(candidates, self._scope(filter))}
        return next((found[k] for k in candidates if k in found), None)

    def _stored_key(self, name: str) -> str:
        """The key a name is stored under: as typed ("IBM"), or as resolution writes it ("IBM's",
        "Dr. Margaret Okafor"); the first spelling the graph holds, else the plain key."""
        candidates = spellings(name)
        if not candidates:
            return ""
        held = {r["name"] for r in self._read(cypher.ENTITIES_BY_NAME, {"names": candidates})}
        return next((k for k in candidates if k in held), candidates[0])

    def stats(self) -> dict[str, int]:
        """Node counts per label and relationship counts per type (for monitoring and tests)."""
        counts = {}
        for label in ("Document", "Chunk", "Entity"):
            counts[label] = int(self.backend.run(cypher.COUNT_NODES.format(label=label), write=False)[0]["n"])
        for rel in ("FROM_DOCUMENT", "NEXT_CHUNK", "MENTIONED_IN", "RELATED"):
            counts[rel] = int(
                self.backend.run(cypher.COUNT_RELATIONSHIPS.format(type=rel), write=False)[0]["n"]
            )
        return counts

    def close(self) -> None:
        self.extractor.close()
        self.backend.close()

    def drop(self) -> None:
        """Delete every node and relationship of this graph (FalkorDB: the graph key itself)."""
        self.backend.clear()


_LISTS = {
    "entities": ("chunk_ids", "types", "descriptions", "names", "aliases", "merged_from"),
    "relations": ("chunk_ids", "weights", "keywords", "descriptions"),
}


def _merge_graphs(graphs: Sequence[DocumentGraph]) -> DocumentGraph:
    """One row per MERGE key for the whole batch: an entity or relation several documents mention gets
    their parallel lists concatenated (the statements store them in chunk-ID order, whatever the order
    here; chunk IDs are scoped to a document, so no chunk repeats). The documents' rows are not modified."""
    mentions = {(m["name"], m["chunk_id"]): m for g in graphs for m in g.mentions}
    merged: dict[str, dict[Any, dict[str, Any]]] = {"entities": {}, "relations": {}}
    for g in graphs:
        for kind, rows in (("entities", g.entities), ("relations", g.relations)):
            for row in rows:
                key = row["name"] if kind == "entities" else (row["source"], row["target"])
                into = merged[kind].get(key)
                if into is None:
                    merged[kind][key] = {**row, **{f: list(row[f]) for f in _LISTS[kind]}}
                else:
                    for f in _LISTS[kind]:
                        into[f].extend(row[f])
    return DocumentGraph(
        list(mentions.values()),
        list(merged["entities"].values()),
        list(merged["relations"].values()),
        [c for g in graphs for c in g.chunks],
    )


def _last_occurrences(documents: Sequence[Document]) -> list[Document]:
    """Each document once, where it last appears: a repeated document was written again, moving its
    contribution to the end of every list, and FalkorDB must not see its MERGE key twice."""
    last = {d.document_id: i for i, d in enumerate(documents)}
    return [d for i, d in enumerate(documents) if last[d.document_id] == i]


def encode_content(text: str) -> tuple[str, str | None]:
    r"""(`content`, `content_encoding`) to store for a chunk's text: as is (encoding None) unless it holds
    a NUL, which no FalkorDB string can; then escaped, `\\` for a backslash and `\0` for NUL."""
    if "\x00" not in text:
        return text, None
    return text.replace("\\", "\\\\").replace("\x00", "\\0"), ESCAPED


def decode_content(stored: str, encoding: str | None) -> str:
    """The exact chunk text from its stored form; ValueError for a form `encode_content` never writes."""
    if encoding is None:
        return stored
    if encoding != ESCAPED:
        raise ValueError(f"unknown content_encoding {encoding!r}")

    def unescape(match: re.Match[str]) -> str:
        try:
            return _UNESCAPED[match.group(1)]
        except KeyError:
            raise ValueError(f"invalid escape {match.group()!r} in escaped content") from None

    return _ESCAPE.sub(unescape, stored)


def _content_hash(stored: Any, encoding: Any) -> str:
    """The hash of the text a node holds; `NO_CONTENT_HASH` when it holds none, or none it can decode."""
    if not isinstance(stored, str) or not (encoding is None or isinstance(encoding, str)):
        return NO_CONTENT_HASH
    try:
        return sha256_hex(decode_content(stored, encoding))
    except ValueError:
        return NO_CONTENT_HASH


def _entity(row: Mapping[str, Any]) -> GraphEntity:
    return GraphEntity(
        name=row["name"],
        display_name=row.get("display_name") or row["name"],
        type=row.get("type") or UNKNOWN_TYPE,
        description=row.get("description") or "",
        source_chunk_ids=tuple(row.get("source_chunk_ids") or ()),
    )


def _relation(row: Mapping[str, Any]) -> GraphRelation:
    return GraphRelation(
        source=row["source"],
        target=row["target"],
        keywords=row.get("keywords") or "",
        description=row.get("description") or "",
        weight=float(row.get("weight") or 0.0),
        source_chunk_ids=tuple(row.get("source_chunk_ids") or ()),
    )
