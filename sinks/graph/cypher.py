"""Every Cypher statement of the knowledge graph, written once for Neo4j and FalkorDB alike.

Schema: (:Document)<-[:FROM_DOCUMENT]-(:Chunk)-[:NEXT_CHUNK]->(:Chunk), (:Entity)-[:MENTIONED_IN]->(:Chunk),
(:Entity)-[:RELATED]->(:Entity), the relation stored once per pair, from the smaller name to the larger.

What an entity or relation learnt is kept per source chunk in parallel lists (`source_chunk_ids[i]` goes
with `chunk_descriptions[i]`, ...), and the shown `type`, `description`, `keywords` and `weight` are
derived from them in the same statement. That is what lets a deleted or re-chunked document take back
exactly its own contribution from an entity other documents still mention. Every statement is safe to
repeat, so a sequence interrupted half-way is repaired by running it again.
"""

from __future__ import annotations

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

# A key absent from `props` (content not stored, no generation) never counts as a difference. The one
# exception is `content_encoding`, the marker of escaped content (see sink.py): null for content stored as
# is, so whenever a row carries content a marker left on the node is a difference, and `SET +=` with the
# null removes it (in Neo4j and FalkorDB alike).
UPDATE_CHANGED_CHUNKS = f"""
UNWIND $rows AS r
MATCH (c:Chunk {{chunk_id: r.chunk_id}})
WHERE {" OR ".join(f"NOT coalesce(c.{k} = r.props.{k}, r.props.{k} IS NULL)" for k in _CHUNK_PROPS)}
   OR (r.props.content IS NOT NULL AND coalesce(c.content_encoding, '') <> coalesce(r.props.content_encoding, ''))
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

# The stored form of chunks' content, to be decoded in Python (sink.decode_content).
CHUNK_CONTENTS = """
UNWIND $chunk_ids AS id
MATCH (c:Chunk {chunk_id: id})
RETURN c.chunk_id AS chunk_id, c.content AS content, c.content_encoding AS content_encoding
"""

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

# Each named entity's `$limit` heaviest relations, either direction, in one statement (graph context asks
# for several entities per search). Sorted before `collect`, which keeps that order (Neo4j's manual shows
# sorting before collect; FalkorDB does the same), so the slice keeps the heaviest of each entity.
RELATIONS_OF_ENTITIES = """
UNWIND $names AS hub
MATCH (:Entity {name: hub})-[x:RELATED]-(:Entity)
WITH hub, x, startNode(x) AS a, endNode(x) AS b
ORDER BY x.weight DESC, a.name, b.name
WITH hub, collect({source: a.name, target: b.name, keywords: x.keywords, description: x.description,
                   weight: x.weight, source_chunk_ids: x.source_chunk_ids})[..$limit] AS top
UNWIND top AS r
RETURN r.source AS source, r.target AS target, r.keywords AS keywords, r.description AS description,
       r.weight AS weight, r.source_chunk_ids AS source_chunk_ids
"""

COUNT_NODES = "MATCH (n:{label}) RETURN count(n) AS n"
COUNT_RELATIONSHIPS = "MATCH ()-[r:{type}]->() RETURN count(r) AS n"
