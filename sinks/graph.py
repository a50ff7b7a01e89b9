"""The LightRAG-style knowledge graph: documents, chunks, entities and relations, in Cypher written once.

Schema: (:Document)<-[:FROM_DOCUMENT]-(:Chunk)-[:NEXT_CHUNK]->(:Chunk), (:Entity)-[:MENTIONED_IN]->(:Chunk),
(:Entity)-[:RELATED]->(:Entity), the relation stored once per pair, from the smaller name to the larger.

What an entity or relation learnt is kept per source chunk in parallel lists (`source_chunk_ids[i]` goes
with `chunk_descriptions[i]`, ...), and the shown `type`, `description`, `keywords` and `weight` are
derived from them in the same statement. That is what lets a deleted or re-chunked document take back
exactly its own contribution from an entity other documents still mention.

FalkorDB runs each statement atomically but nothing across statements, so every write is a sequence of
statements each safe to repeat: a crash half-way is repaired by writing (or deleting) again. Each batch
is aggregated by its MERGE key in Python before it is sent, and no query filters after a write.
A batch of documents is written as one sequence: each kind of statement is sent once for all of them
(cut at `batch_size` rows), with their rows merged by MERGE key across documents.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from chunking.models import Chunk, Document
from sinks.base import DocumentChunks, Prepared, Sink, SinkError, group_batch
from sinks.config import SinkSettings
from sinks.extraction import EntityExtractor, Extraction, SpacyExtractor, display_name, entity_key
from sinks.graph_backends import GraphBackend, open_backend

UNKNOWN_TYPE = "UNKNOWN"
MAX_HOPS = 3


def _join_first(values: str, limit: int, separator: str, scan: int = 50) -> str:
    """Cypher joining the first `limit` non-empty strings of a list (duplicates are blanked in Python)."""
    kept = f"[y IN {values}[0..{scan}] WHERE y <> ''][0..{limit}]"
    return f"reduce(s = '', v IN {kept} | s + CASE WHEN s = '' THEN '' ELSE '{separator}' END + v)"


_NEWLINE = "\\n"  # a Cypher string escape, spelled out for Python 3.11 f-strings
# Every derived value is computed in a WITH and the SET only assigns variables. Two FalkorDB 4.16 traps
# (both reproduced here): later SET items read the old property values, and list expressions evaluated
# inside a SET corrupt the server's memory (it segfaults a statement or two later). Each element picked
# from a stored parallel list is coalesced: if the lists ever disagree in length (seen once in a 500-document
# benchmark run), a null would make every later write of that entity fail ("Property values can only be
# of primitive types"), so the write proceeds and the lists come out aligned again.
_ENTITY_SET = (
    f"WITH e, ids, ts, ds, dn, coalesce(ts[0], e.type) AS t, {_join_first('ds', 3, _NEWLINE)} AS d\n"
    "SET e.source_chunk_ids = ids, e.chunk_types = ts, e.chunk_descriptions = ds, e.type = t, e.description = d, "
    "e.display_name = dn"
)
_RELATION_SET = (
    "WITH x, ids, ws, ks, ds, reduce(t = 0.0, w IN ws | t + w) AS w, "
    f"{_join_first('ks', 10, ', ')} AS k, {_join_first('ds', 3, _NEWLINE)} AS d\n"
    "SET x.source_chunk_ids = ids, x.chunk_weights = ws, x.chunk_keywords = ks, x.chunk_descriptions = ds, "
    "x.weight = w, x.keywords = k, x.description = d"
)

UPSERT_DOCUMENTS = """
UNWIND $rows AS r
MERGE (d:Document {document_id: r.document_id})
SET d.title = r.title, d.content_hash = r.content_hash
"""

# A chunk ID embeds its document ID and content hash, so a stored chunk's properties rarely change. FalkorDB
# re-adds a node to every index of its label whenever a SET runs on it, even one that changes nothing
# (measured: the index's maxDocId grows by one per node), and that RediSearch churn is where it once
# crashed under load. So properties are set in full only when the node is created, and an existing chunk
# is updated only where a property differs (offsets move when earlier text of the document changed).
_CHUNK_PROPS = (
    "chunk_index",
    "document_id",
    "start_char",
    "end_char",
    "token_count",
    "content_hash",
    "content",
    "generation",
)
UPSERT_CHUNKS = """
UNWIND $rows AS r
MERGE (d:Document {document_id: r.document_id})
MERGE (c:Chunk {chunk_id: r.chunk_id})
ON CREATE SET c += r.props
MERGE (c)-[:FROM_DOCUMENT]->(d)
"""

# A key absent from `props` (content not stored, no generation) never counts as a difference.
UPDATE_CHANGED_CHUNKS = f"""
UNWIND $rows AS r
MATCH (c:Chunk {{chunk_id: r.chunk_id}})
WHERE {" OR ".join(f"NOT coalesce(c.{k} = r.props.{k}, r.props.{k} IS NULL)" for k in _CHUNK_PROPS)}
SET c += r.props
"""

LINK_NEXT_CHUNKS = """
UNWIND $rows AS r
MATCH (a:Chunk {chunk_id: r.a})
MATCH (b:Chunk {chunk_id: r.b})
MERGE (a)-[:NEXT_CHUNK]->(b)
"""

# One row per document with all of its current links: the filter runs before the DELETE, never after.
UNLINK_STALE_NEXT_CHUNKS = """
UNWIND $rows AS r
MATCH (a:Chunk {document_id: r.document_id})-[n:NEXT_CHUNK]->(b:Chunk)
WHERE NOT (a.chunk_id + '|' + b.chunk_id) IN r.links
DELETE n
"""

# Entities are created with their MENTIONED_IN edge, so even one left half-written by a crash is
# reachable from its chunk and gets trimmed when that chunk goes.
MERGE_MENTIONS = """
UNWIND $rows AS r
MATCH (c:Chunk {chunk_id: r.chunk_id})
MERGE (e:Entity {name: r.name})
MERGE (e)-[:MENTIONED_IN]->(c)
"""

UPSERT_ENTITIES = f"""
UNWIND $rows AS r
MERGE (e:Entity {{name: r.name}})
WITH e, r, coalesce(e.source_chunk_ids, []) AS ids, coalesce(e.chunk_types, []) AS ts,
     coalesce(e.chunk_descriptions, []) AS ds
WITH e, r, ids, ts, ds, [i IN range(0, size(ids) - 1) WHERE NOT ids[i] IN r.chunk_ids] AS keep
WITH e, [i IN keep | ids[i]] + r.chunk_ids AS ids, [i IN keep | coalesce(ts[i], 'UNKNOWN')] + r.types AS ts,
     [i IN keep | coalesce(ds[i], '')] + r.descriptions AS ds, coalesce(e.display_name, r.display_name) AS dn
{_ENTITY_SET}
"""

UPSERT_RELATIONS = f"""
UNWIND $rows AS r
MATCH (a:Entity {{name: r.source}})
MATCH (b:Entity {{name: r.target}})
MERGE (a)-[x:RELATED]->(b)
WITH x, r, coalesce(x.source_chunk_ids, []) AS ids, coalesce(x.chunk_weights, []) AS ws,
     coalesce(x.chunk_keywords, []) AS ks, coalesce(x.chunk_descriptions, []) AS ds
WITH x, r, ids, ws, ks, ds, [i IN range(0, size(ids) - 1) WHERE NOT ids[i] IN r.chunk_ids] AS keep
WITH x, [i IN keep | ids[i]] + r.chunk_ids AS ids, [i IN keep | coalesce(ws[i], 0.0)] + r.weights AS ws,
     [i IN keep | coalesce(ks[i], '')] + r.keywords AS ks, [i IN keep | coalesce(ds[i], '')] + r.descriptions AS ds
{_RELATION_SET}
"""

# Removing chunks: trim what they contributed, drop what is left with no source, then the chunks
# themselves last, because they are how the next run (after a crash) finds what still needs trimming.
TRIM_ENTITIES = f"""
UNWIND $chunk_ids AS id
MATCH (c:Chunk {{chunk_id: id}})
MATCH (e:Entity)-[:MENTIONED_IN]->(c)
WITH DISTINCT e
WITH e, coalesce(e.source_chunk_ids, []) AS ids, coalesce(e.chunk_types, []) AS ts,
     coalesce(e.chunk_descriptions, []) AS ds
WITH e, ids, ts, ds, [i IN range(0, size(ids) - 1) WHERE NOT ids[i] IN $chunk_ids] AS keep
WHERE e.source_chunk_ids IS NULL OR size(keep) < size(ids)
WITH e, [i IN keep | ids[i]] AS ids, [i IN keep | coalesce(ts[i], 'UNKNOWN')] AS ts, [i IN keep | coalesce(ds[i], '')] AS ds,
     e.display_name AS dn
{_ENTITY_SET}
"""

TRIM_RELATIONS = f"""
UNWIND $chunk_ids AS id
MATCH (c:Chunk {{chunk_id: id}})
MATCH (e:Entity)-[:MENTIONED_IN]->(c)
MATCH (e)-[x:RELATED]-(:Entity)
WITH DISTINCT x
WITH x, coalesce(x.source_chunk_ids, []) AS ids, coalesce(x.chunk_weights, []) AS ws,
     coalesce(x.chunk_keywords, []) AS ks, coalesce(x.chunk_descriptions, []) AS ds
WITH x, ids, ws, ks, ds, [i IN range(0, size(ids) - 1) WHERE NOT ids[i] IN $chunk_ids] AS keep
WHERE size(keep) < size(ids)
WITH x, [i IN keep | ids[i]] AS ids, [i IN keep | coalesce(ws[i], 0.0)] AS ws, [i IN keep | coalesce(ks[i], '')] AS ks,
     [i IN keep | coalesce(ds[i], '')] AS ds
{_RELATION_SET}
"""

DELETE_ORPHAN_RELATIONS = """
UNWIND $chunk_ids AS id
MATCH (c:Chunk {chunk_id: id})
MATCH (e:Entity)-[:MENTIONED_IN]->(c)
MATCH (e)-[x:RELATED]-(:Entity)
WITH DISTINCT x
WHERE size(coalesce(x.source_chunk_ids, [])) = 0
DELETE x
"""

DELETE_ORPHAN_ENTITIES = """
UNWIND $chunk_ids AS id
MATCH (c:Chunk {chunk_id: id})
MATCH (e:Entity)-[:MENTIONED_IN]->(c)
WITH DISTINCT e
WHERE size(coalesce(e.source_chunk_ids, [])) = 0
DETACH DELETE e
"""

DELETE_CHUNKS = """
UNWIND $chunk_ids AS id
MATCH (c:Chunk {chunk_id: id})
DETACH DELETE c
"""

DELETE_DOCUMENT = """
MATCH (d:Document {document_id: $document_id})
DETACH DELETE d
"""

# A Chunk node without a chunk_id can be neither found nor removed by key: never expected, but if one ever
# shows up (it was seen once after a heavily loaded run), the next write of its document removes it.
DELETE_UNKEYED_CHUNKS = """
UNWIND $document_ids AS id
MATCH (c:Chunk {document_id: id})
WHERE c.chunk_id IS NULL
DETACH DELETE c
"""

DOCUMENTS_CHUNK_IDS = """
UNWIND $document_ids AS id
MATCH (c:Chunk {document_id: id})
RETURN id AS document_id, c.chunk_id AS chunk_id
"""
ALL_CHUNK_IDS = "MATCH (c:Chunk) RETURN c.chunk_id AS chunk_id"

_ENTITY_FIELDS = (
    "e.name AS name, e.display_name AS display_name, e.type AS type, e.description AS description, "
    "e.source_chunk_ids AS source_chunk_ids"
)
_RELATION_FIELDS = (
    "a.name AS source, b.name AS target, x.keywords AS keywords, x.description AS description, "
    "x.weight AS weight, x.source_chunk_ids AS source_chunk_ids"
)

ENTITIES_OF_CHUNKS = f"""
UNWIND $chunk_ids AS id
MATCH (c:Chunk {{chunk_id: id}})
MATCH (e:Entity)-[:MENTIONED_IN]->(c)
WITH DISTINCT e
RETURN {_ENTITY_FIELDS}
"""

RELATIONS_OF_CHUNKS = f"""
UNWIND $names AS name
MATCH (a:Entity {{name: name}})-[x:RELATED]->(b:Entity)
WHERE b.name IN $names AND any(id IN x.source_chunk_ids WHERE id IN $chunk_ids)
RETURN {_RELATION_FIELDS}
ORDER BY x.weight DESC, a.name, b.name
"""

ENTITIES_BY_NAME = f"""
UNWIND $names AS name
MATCH (e:Entity {{name: name}})
RETURN {_ENTITY_FIELDS}
"""

# Variable-length bounds cannot be parameters, hence one query per allowed depth.
NEIGHBOURS = {
    hops: f"""
MATCH (s:Entity {{name: $name}})-[:RELATED*1..{hops}]-(o:Entity)
WHERE o.name <> $name
RETURN DISTINCT o.name AS name
"""
    for hops in range(1, MAX_HOPS + 1)
}

RELATIONS_AMONG = f"""
UNWIND $names AS name
MATCH (a:Entity {{name: name}})-[x:RELATED]->(b:Entity)
WHERE b.name IN $names
RETURN {_RELATION_FIELDS}
ORDER BY x.weight DESC, a.name, b.name
LIMIT $limit
"""

COUNT_NODES = "MATCH (n:{label}) RETURN count(n) AS n"
COUNT_RELATIONSHIPS = "MATCH ()-[r:{type}]->() RETURN count(r) AS n"


@dataclass(frozen=True, slots=True)
class GraphEntity:
    name: str  # normalised key
    display_name: str
    type: str
    description: str
    source_chunk_ids: tuple[str, ...]


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


@dataclass
class _DocumentGraph:
    """One document's (or, merged, one batch's) extraction, one row per MERGE key (FalkorDB must not see a
    key twice in one statement)."""

    mentions: list[dict[str, str]] = field(default_factory=list)
    entities: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)


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
    ) -> None:
        self.backend = backend
        self.generation = generation  # recorded on every Chunk node
        self.extractor = extractor or SpacyExtractor()
        self.store_content = store_content
        self.batch_size = batch_size
        try:
            backend.setup_schema()
        except Exception as exc:
            raise SinkError(self.name, f"schema setup failed on {backend.name}: {exc}") from exc

    @classmethod
    def from_settings(
        cls, settings: SinkSettings | None = None, *, extractor: EntityExtractor | None = None
    ) -> KnowledgeGraphSink:
        """Backend and extractor as configured (Neo4j / FalkorDB URL / embedded FalkorDB; spaCy / LLM)."""
        settings = settings or SinkSettings()
        if extractor is None and settings.extractor == "llm":
            from sinks.llm_extraction import LLMExtractor

            extractor = LLMExtractor.from_settings(settings)
        return cls(open_backend(settings), extractor, generation=settings.generation)

    # -- writing -----------------------------------------------------------------------------------

    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        documents, chunks = group_batch(batch)
        everything = [c for doc_chunks in chunks.values() for c in doc_chunks]
        try:
            extractions = self.extractor.extract(everything)
        except Exception as exc:
            raise SinkError(self.name, f"entity extraction failed: {exc}") from exc
        if [x.chunk_id for x in extractions] != [c.chunk_id for c in everything]:
            raise SinkError(self.name, "the extractor did not return one extraction per chunk, in order")
        by_chunk = dict(zip((c.chunk_id for c in everything), extractions, strict=True))
        payload = {
            doc_id: _aggregate([by_chunk[c.chunk_id] for c in doc_chunks])
            for doc_id, doc_chunks in chunks.items()
        }
        stats = {
            "entity_mentions": float(sum(len(g.mentions) for g in payload.values())),
            "relations": float(sum(len(g.relations) for g in payload.values())),
        }
        return Prepared(self.name, documents, chunks, payload, stats)

    def write(self, prepared: Prepared) -> int:
        """Store the whole batch with each kind of statement sent once (cut at `batch_size` rows).

        Round trips cost client and server CPU (taken from the embedding model on a small machine) and,
        against a remote Neo4j, latency: a batch of 64 one-chunk documents used to take ~500 statements.
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
        graphs: Mapping[str, _DocumentGraph],
    ) -> None:
        """The steps of one document's write, each run for all documents at once and in the same order."""
        doc_ids = [d.document_id for d in documents]
        rows = [self._chunk_row(c) for d in doc_ids for c in chunks[d]]  # validated before anything is sent
        ids = {d: [c.chunk_id for c in chunks[d]] for d in doc_ids}
        graph = _merge_graphs([graphs[d] for d in doc_ids])
        self._batched(
            UPSERT_DOCUMENTS,
            [
                {"document_id": d.document_id, "title": _clean(d.title), "content_hash": d.content_hash}
                for d in documents
            ],
        )
        self._batched(UPSERT_CHUNKS, rows)
        self._batched(UPDATE_CHANGED_CHUNKS, rows)
        links = {d: list(pairwise(ids[d])) for d in doc_ids}
        self._batched(LINK_NEXT_CHUNKS, [{"a": a, "b": b} for d in doc_ids for a, b in links[d]])
        self._batched(
            UNLINK_STALE_NEXT_CHUNKS,
            [{"document_id": d, "links": [f"{a}|{b}" for a, b in links[d]]} for d in doc_ids],
        )
        self._batched(MERGE_MENTIONS, graph.mentions)
        self._batched(UPSERT_ENTITIES, graph.entities)
        self._batched(UPSERT_RELATIONS, graph.relations)
        stored = self._stored_chunk_ids_of(doc_ids)
        if unkeyed := [d for d in doc_ids if None in stored[d]]:
            self._batched(DELETE_UNKEYED_CHUNKS, unkeyed, key="document_ids")
        for d in unkeyed:
            stored[d].discard(None)
        # The write is idempotent: failing before anything is removed lets a retry repair it.
        if lost := {d: missing for d in doc_ids if (missing := sorted(set(ids[d]) - stored[d]))}:
            first, missing = next(iter(lost.items()))
            where = first if len(lost) == 1 else f"{len(lost)} documents (first {first})"
            count = sum(len(m) for m in lost.values())
            raise SinkError(self.name, f"{count} chunk(s) of {where} not stored: {missing[:3]}")
        self._remove_chunks(sorted(c for d in doc_ids for c in stored[d] - set(ids[d])))

    def delete(self, document_id: str) -> int:
        try:
            stored = self._stored_chunk_ids(document_id)
            if None in stored:  # a chunk node that lost its ID cannot be removed by key
                self.backend.run(DELETE_UNKEYED_CHUNKS, {"document_ids": [document_id]})
            ids = sorted(c for c in stored if c is not None)
            self._remove_chunks(ids)
            self.backend.run(DELETE_DOCUMENT, {"document_id": document_id})
        except Exception as exc:
            raise SinkError(
                self.name, f"delete of {document_id} failed on {self.backend.name}: {exc}"
            ) from exc
        return len(ids)

    def _remove_chunks(self, chunk_ids: list[str]) -> None:
        if not chunk_ids:
            return
        for query in (
            TRIM_ENTITIES,
            TRIM_RELATIONS,
            DELETE_ORPHAN_RELATIONS,
            DELETE_ORPHAN_ENTITIES,
            DELETE_CHUNKS,
        ):
            for start in range(0, len(chunk_ids), self.batch_size):
                self.backend.run(query, {"chunk_ids": chunk_ids[start : start + self.batch_size]})

    def _batched(self, query: str, rows: Sequence[Any], key: str = "rows") -> None:
        for start in range(0, len(rows), self.batch_size):
            self.backend.run(query, {key: rows[start : start + self.batch_size]})

    def _chunk_row(self, chunk: Chunk) -> dict[str, Any]:
        """The MERGE key and the other properties; `props` leaves out chunk_id so `SET +=` cannot touch it."""
        if not isinstance(chunk.chunk_id, str) or not chunk.chunk_id:
            raise SinkError(self.name, f"chunk {chunk.chunk_index} of {chunk.document_id} has no chunk_id")
        props: dict[str, Any] = {
            "chunk_index": chunk.chunk_index,
            "document_id": chunk.document_id,
            "start_char": chunk.start_char,
            "end_char": chunk.end_char,
            "token_count": chunk.token_count,
            "content_hash": chunk.content_hash,
        }
        if self.store_content:
            props["content"] = _clean(chunk.content)
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
            for row in self.backend.run(DOCUMENTS_CHUNK_IDS, {"document_ids": part}, write=False):
                stored[row["document_id"]].add(row["chunk_id"])
        return stored

    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        if document_id is not None:
            return self._stored_chunk_ids(document_id)  # type: ignore[return-value]  # None shows a broken node
        return {r["chunk_id"] for r in self.backend.run(ALL_CHUNK_IDS, write=False)}

    def context_for_chunks(self, chunk_ids: Iterable[str]) -> GraphContext:
        """Entities mentioned in these chunks, and the relations between them stated in these chunks."""
        ids = sorted(set(chunk_ids))
        if not ids:
            return GraphContext()
        entities = [_entity(r) for r in self.backend.run(ENTITIES_OF_CHUNKS, {"chunk_ids": ids}, write=False)]
        names = sorted(e.name for e in entities)
        rows = (
            self.backend.run(RELATIONS_OF_CHUNKS, {"names": names, "chunk_ids": ids}, write=False)
            if names
            else []
        )
        return GraphContext(tuple(sorted(entities, key=lambda e: e.name)), tuple(_relation(r) for r in rows))

    def neighbourhood(self, entity_name: str, hops: int = 1, limit: int = 50) -> GraphContext:
        """Entities within `hops` RELATED steps of one entity, with the strongest relations among them."""
        if not 1 <= hops <= MAX_HOPS:
            raise ValueError(f"hops must be between 1 and {MAX_HOPS}")
        key = entity_key(entity_name)
        rows = self.backend.run(NEIGHBOURS[hops], {"name": key}, write=False)
        names = sorted({key} | {r["name"] for r in rows})
        relations = [
            _relation(r)
            for r in self.backend.run(RELATIONS_AMONG, {"names": names, "limit": int(limit)}, write=False)
        ]
        keep = {key} | {r.source for r in relations} | {r.target for r in relations}
        entities = [
            _entity(r) for r in self.backend.run(ENTITIES_BY_NAME, {"names": sorted(keep)}, write=False)
        ]
        entities.sort(key=lambda e: (e.name != key, e.name))
        return GraphContext(tuple(entities), tuple(relations))

    def entity(self, name: str) -> GraphEntity | None:
        """One entity by any spelling of its name."""
        rows = self.backend.run(ENTITIES_BY_NAME, {"names": [entity_key(name)]}, write=False)
        return _entity(rows[0]) if rows else None

    def stats(self) -> dict[str, int]:
        """Node counts per label and relationship counts per type (for monitoring and tests)."""
        counts = {}
        for label in ("Document", "Chunk", "Entity"):
            counts[label] = int(self.backend.run(COUNT_NODES.format(label=label), write=False)[0]["n"])
        for rel in ("FROM_DOCUMENT", "NEXT_CHUNK", "MENTIONED_IN", "RELATED"):
            counts[rel] = int(self.backend.run(COUNT_RELATIONSHIPS.format(type=rel), write=False)[0]["n"])
        return counts

    def close(self) -> None:
        self.backend.close()

    def drop(self) -> None:
        """Delete every node and relationship of this graph (FalkorDB: the graph key itself)."""
        self.backend.clear()


def _aggregate(extractions: Sequence[Extraction]) -> _DocumentGraph:
    """Fold per-chunk extractions into one row per entity key and per relation pair, lists in chunk order."""
    entities: dict[str, dict[str, Any]] = {}
    relations: dict[tuple[str, str], dict[str, Any]] = {}
    mentions: dict[tuple[str, str], dict[str, str]] = {}

    def add_entity(name: str, entity_type: str, description: str, chunk_id: str) -> str | None:
        shown = display_name(name)
        key = entity_key(shown)
        if not key:
            return None
        row = entities.setdefault(
            key, {"name": key, "display_name": shown, "chunk_ids": [], "types": [], "descriptions": []}
        )
        if (key, chunk_id) not in mentions:
            mentions[(key, chunk_id)] = {"name": key, "chunk_id": chunk_id}
            row["chunk_ids"].append(chunk_id)
            row["types"].append(_clean(entity_type) or UNKNOWN_TYPE)
            row["descriptions"].append(_unseen(_clean(description), row["descriptions"]))
        return key

    for extraction in extractions:
        chunk_id = extraction.chunk_id
        for ent in extraction.entities:
            add_entity(ent.name, ent.type, ent.description, chunk_id)
        for rel in extraction.relations:
            a = add_entity(rel.source, UNKNOWN_TYPE, "", chunk_id)
            b = add_entity(rel.target, UNKNOWN_TYPE, "", chunk_id)
            if a is None or b is None or a == b:
                continue
            source, target = sorted((a, b))
            weight = rel.weight if math.isfinite(rel.weight) and rel.weight > 0 else 1.0
            row = relations.setdefault(
                (source, target),
                {
                    "source": source,
                    "target": target,
                    "chunk_ids": [],
                    "weights": [],
                    "keywords": [],
                    "descriptions": [],
                },
            )
            if row["chunk_ids"] and row["chunk_ids"][-1] == chunk_id:
                row["weights"][-1] += float(weight)
                continue
            row["chunk_ids"].append(chunk_id)
            row["weights"].append(float(weight))
            row["keywords"].append(_unseen(_clean(rel.keywords), row["keywords"]))
            row["descriptions"].append(_unseen(_clean(rel.description), row["descriptions"]))
    return _DocumentGraph(list(mentions.values()), list(entities.values()), list(relations.values()))


_LISTS = {
    "entities": ("chunk_ids", "types", "descriptions"),
    "relations": ("chunk_ids", "weights", "keywords", "descriptions"),
}


def _merge_graphs(graphs: Sequence[_DocumentGraph]) -> _DocumentGraph:
    """One row per MERGE key for the whole batch: an entity or relation several documents mention gets
    their parallel lists concatenated in batch order, which is what writing them one by one would store
    (chunk IDs are scoped to a document, so no chunk repeats). The documents' rows are not modified."""
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
    return _DocumentGraph(
        list(mentions.values()), list(merged["entities"].values()), list(merged["relations"].values())
    )


def _last_occurrences(documents: Sequence[Document]) -> list[Document]:
    """Each document once, where it last appears: a repeated document was written again, moving its
    contribution to the end of every list, and FalkorDB must not see its MERGE key twice."""
    last = {d.document_id: i for i, d in enumerate(documents)}
    return [d for i, d in enumerate(documents) if last[d.document_id] == i]


def _unseen(text: str | None, earlier: list[str]) -> str:
    """Blank a value the same document already gave (kept as "" so the lists stay parallel)."""
    return "" if not text or text in earlier else text


def _clean(text: str | None) -> str | None:
    """Strip what neither store accepts in a string: NUL characters and lone surrogates."""
    if text is None:
        return None
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


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
