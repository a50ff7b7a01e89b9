"""Every Cypher statement of the knowledge graph, written once for Neo4j and FalkorDB alike.

Schema: (:Document)<-[:FROM_DOCUMENT]-(:Chunk)-[:NEXT_CHUNK]->(:Chunk), (:Entity)-[:MENTIONED_IN]->(:Chunk),
(:Entity)-[:RELATED]->(:Entity), the relation stored once per pair, from the smaller name to the larger. Each
Chunk carries its document's access `labels` (a list, empty for none).

What an entity or relation learnt is kept per source chunk in parallel lists (`source_chunk_ids[i]` goes
with `chunk_descriptions[i]`, ...), and the shown `type`, `description`, `display_name`, `alias`, `keywords`
and `weight` are derived from them in the same statement. That is what lets a deleted or re-chunked
document take back exactly its own contribution from an entity other documents still mention. The lists
are kept in chunk-ID order (sorted in the statement), so the graph is a function of what is stored, not
of the order documents were written in. Every statement is safe to repeat, so a sequence interrupted
half-way is repaired by running it again.

An entity's key (`name`) is `names.base_key` of its name after resolution inside its document
(`resolution.py`); `chunk_merged_from[i]` lists, newline-separated, the keys chunk i's names had before
(a surname, an acronym, a title or possessive form), which is why two names are one; `chunk_names[i]` is
the name as chunk i wrote it ('' where it only wrote a merged form); `chunk_aliases[i]` is
`names.alias_key(name, chunk_types[i])`, the shown `alias` that of the shown type (an indexed second key:
a surname or an acronym finds the entity without merging entities of two documents).

The same per-chunk lists make the filtered reads (`filtered`): an entity or relation is shown to a reader only
if one of its source chunks passes the reader's filter, with its description, keywords, weight and sources
derived, in the statement, from those chunks' entries alone (docs/access.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

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
# of primitive types"), so the write proceeds and the lists come out aligned again. The same coalesce lets
# an entity written before a list existed (`chunk_names`, `chunk_aliases`, `chunk_merged_from`) take
# writes and trims: its older entries read as empty, and it shows its stored `display_name` until an entry
# with a name is written.

# The per-chunk lists, as (variable in the statements, stored property, field of a written row, default
# for a missing element); the chunk IDs first.
_ENTITY_LISTS = (
    ("ids", "source_chunk_ids", "chunk_ids", "''"),
    ("ts", "chunk_types", "types", f"'{UNKNOWN_TYPE}'"),
    ("ds", "chunk_descriptions", "descriptions", "''"),
    ("ns", "chunk_names", "names", "''"),
    ("als", "chunk_aliases", "aliases", "''"),
    ("ms", "chunk_merged_from", "merged_from", "''"),
)
_RELATION_LISTS = (
    ("ids", "source_chunk_ids", "chunk_ids", "''"),
    ("ws", "chunk_weights", "weights", "0.0"),
    ("ks", "chunk_keywords", "keywords", "''"),
    ("ds", "chunk_descriptions", "descriptions", "''"),
)


def _stored(var: str, lists: tuple[tuple[str, str, str, str], ...], carry: str) -> str:
    """WITH: the stored lists of `var` (empty where absent)."""
    return (
        f"WITH {carry}, " + ", ".join(f"coalesce({var}.{prop}, []) AS {v}" for v, prop, _, _ in lists) + "\n"
    )


def _kept_entries(
    var: str, lists: tuple[tuple[str, str, str, str], ...], gone: str, new: str | None, where: str = ""
) -> str:
    """WITH: the stored entries whose chunk is not in `gone` (rows passing `where`, which sees `keep`), each
    element coalesced, then (`new`: a row variable) that row's entries appended."""
    names = ", ".join(v for v, _, _, _ in lists)
    parts = [
        f"[i IN keep | coalesce({v}[i], {default})]" + (f" + {new}.{row}" if new else "") + f" AS {v}"
        for v, _, row, default in lists
    ]
    return (
        f"WITH {var}, {new + ', ' if new else ''}{names}, "
        f"[i IN range(0, size(ids) - 1) WHERE NOT ids[i] IN {gone}] AS keep\n"
        + (f"WHERE {where}\n" if where else "")
        + f"WITH {var}, "
        + ", ".join(parts)
        + "\n"
    )


def _canonical(var: str, lists: tuple[tuple[str, str, str, str], ...]) -> str:
    """WITH: the lists reordered by chunk ID, so what is stored is a function of which chunks contributed
    what, never of the order they were written in (ingest, delete, re-ingest gives the same graph). Sorted
    before `collect`, which keeps that order (Neo4j and FalkorDB alike); an empty list stays empty (its
    one null row collects nothing). Only single elements pass the ORDER BY: FalkorDB copies every list a
    sorted row carries (a 2,000-chunk entity took a second instead of 10 ms)."""
    return (
        "UNWIND CASE WHEN size(ids) = 0 THEN [null] ELSE range(0, size(ids) - 1) END AS i\n"
        f"WITH {var}, " + ", ".join(f"{v}[i] AS {v}_i" for v, _, _, _ in lists) + " ORDER BY ids_i\n"
        f"WITH {var}, " + ", ".join(f"collect({v}_i) AS {v}" for v, _, _, _ in lists) + "\n"
    )


def _assign(var: str, lists: tuple[tuple[str, str, str, str], ...]) -> str:
    return ", ".join(f"{var}.{prop} = {v}" for v, prop, _, _ in lists)


# Shown: the type of the first chunk (by ID), the first name a chunk gives, and the alias of the shown type:
# `names.alias_key(name, type)` is computed per chunk in Python, so it is never stale after a trim, and taken
# from any chunk of that type (an entry written before aliases existed has none).
_ENTITY_SET = (
    "WITH e, ids, ts, ds, ns, als, ms, coalesce(ts[0], e.type) AS t, "
    f"{_join_first('ds', 3, _NEWLINE)} AS d,\n"
    "     coalesce(head([n IN ns WHERE n <> '']), e.display_name, e.name) AS dn,\n"
    "     head([i IN range(0, size(ids) - 1) WHERE ts[i] = ts[0] AND als[i] <> '' | als[i]]) AS a\n"
    f"SET {_assign('e', _ENTITY_LISTS)}, e.type = t, e.description = d, e.display_name = dn, e.alias = a"
)
_RELATION_SET = (
    "WITH x, ids, ws, ks, ds, reduce(t = 0.0, w IN ws | t + w) AS w, "
    f"{_join_first('ks', 10, ', ')} AS k, {_join_first('ds', 3, _NEWLINE)} AS d\n"
    f"SET {_assign('x', _RELATION_LISTS)}, x.weight = w, x.keywords = k, x.description = d"
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
    "labels",
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
{_stored("e", _ENTITY_LISTS, "e, r")}{_kept_entries("e", _ENTITY_LISTS, "r.chunk_ids", "r")}{_canonical("e", _ENTITY_LISTS)}{_ENTITY_SET}
"""

UPSERT_RELATIONS = f"""
UNWIND $rows AS r
MATCH (a:Entity {{name: r.source}})
MATCH (b:Entity {{name: r.target}})
MERGE (a)-[x:RELATED]->(b)
{_stored("x", _RELATION_LISTS, "x, r")}{_kept_entries("x", _RELATION_LISTS, "r.chunk_ids", "r")}{_canonical("x", _RELATION_LISTS)}{_RELATION_SET}
"""

# Removing chunks, or what a kept chunk of a rewritten document no longer contributes (resolution reads the
# whole document, so an edit elsewhere can change which entity a kept chunk's name resolves to): each row
# names a chunk and what it still contributes (`names`, `pairs`: empty for a removed chunk); every other
# entry of that chunk is trimmed. Then what is left with no source is dropped, then the MENTIONED_IN edges
# of kept chunks to entities they no longer feed, then the removed chunks themselves last, because they are
# how the next run (after a crash) finds what still needs trimming.
TRIM_ENTITIES = f"""
UNWIND $rows AS r
MATCH (c:Chunk {{chunk_id: r.chunk_id}})
MATCH (e:Entity)-[:MENTIONED_IN]->(c)
WITH e, r
WHERE NOT e.name IN r.names
WITH e, collect(DISTINCT r.chunk_id) AS gone
{_stored("e", _ENTITY_LISTS, "e, gone")}{_kept_entries("e", _ENTITY_LISTS, "gone", None, "e.source_chunk_ids IS NULL OR size(keep) < size(ids)")}{_canonical("e", _ENTITY_LISTS)}{_ENTITY_SET}
"""

# A relation a chunk states joins two entities the chunk mentions, so it is found from the chunk's pairs of
# entities (a few) rather than from all the relations of each (a hub entity has thousands). The chunk is
# matched on its own first, and a condition on an entity follows a WITH: FalkorDB plans a pattern that
# starts at an Entity, or a WHERE on one beside the MATCH, as a scan of every Entity.
_RELATIONS_OF_CHUNK = """MATCH (c:Chunk {chunk_id: $id})
MATCH (a:Entity)-[:MENTIONED_IN]->(c)<-[:MENTIONED_IN]-(b:Entity)
MATCH (a)-[x:RELATED]->(b)"""

TRIM_RELATIONS = f"""
UNWIND $rows AS r
{_RELATIONS_OF_CHUNK.replace("$id", "r.chunk_id")}
WITH a, b, x, r
WHERE NOT (a.name + '{_NEWLINE}' + b.name) IN r.pairs
WITH x, collect(DISTINCT r.chunk_id) AS gone
{_stored("x", _RELATION_LISTS, "x, gone")}{_kept_entries("x", _RELATION_LISTS, "gone", None, "size(keep) < size(ids)")}{_canonical("x", _RELATION_LISTS)}{_RELATION_SET}
"""

DELETE_ORPHAN_RELATIONS = f"""
UNWIND $chunk_ids AS id
{_RELATIONS_OF_CHUNK.replace("$id", "id")}
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

DELETE_STALE_MENTIONS = """
UNWIND $rows AS r
MATCH (c:Chunk {chunk_id: r.chunk_id})
MATCH (e:Entity)-[m:MENTIONED_IN]->(c)
WITH e, m, r
WHERE NOT e.name IN r.names
DELETE m
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

# A document's new labels on every one of its chunks, in one atomic statement; unchanged chunks are not
# touched (a SET re-indexes the node in FalkorDB), so the count is of chunks changed and a re-run changes none.
RELABEL_CHUNKS = """
MATCH (c:Chunk {document_id: $document_id})
WHERE NOT coalesce(c.labels = $labels, false)
SET c.labels = $labels
RETURN count(c) AS n
"""
DOCUMENT_CHUNK_LABELS = """
MATCH (c:Chunk {document_id: $document_id})
RETURN c.chunk_id AS chunk_id, c.labels AS labels
"""
ALL_CHUNK_LABELS = "MATCH (c:Chunk) RETURN c.chunk_id AS chunk_id, c.labels AS labels"

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

# The graph retriever's look-up: the entities each of `$lookup` names, by their key (`name`) or by their
# indexed second key (`alias`: a person's surname, an acronym; `unichunk.sinks.graph.names`).
LOOKUP_PROPERTIES = ("name", "alias")
ENTITIES_BY_KEY = {
    prop: f"""
UNWIND $lookup AS key
MATCH (e:Entity {{{prop}: key}})
RETURN key, {_ENTITY_FIELDS}
"""
    for prop in LOOKUP_PROPERTIES
}
COUNT_CHUNKS = "MATCH (c:Chunk) RETURN count(c) AS n"

# An entity's source chunks, each with the name it wrote there and the keys merged into it there
# (`chunk_merged_from[i]`, newline-separated), and the chunk's document: what `unichunk entity` shows.
# The chunk is reached by its ID (the unique index), its document by the FROM_DOCUMENT edge.
_ENTITY_SOURCES = """
UNWIND $names AS name
MATCH (e:Entity {{name: name}})
UNWIND range(0, size(coalesce(e.source_chunk_ids, [])) - 1) AS i
WITH e, i, e.source_chunk_ids[i] AS sid
MATCH (c:Chunk {{chunk_id: sid}})
{where}OPTIONAL MATCH (c)-[:FROM_DOCUMENT]->(d:Document)
RETURN e.name AS name, sid AS chunk_id, c.document_id AS document_id, coalesce(d.title, '') AS title,
       coalesce(e.chunk_names[i], '') AS written, coalesce(e.chunk_merged_from[i], '') AS merged_from
ORDER BY name, chunk_id
"""
ENTITY_SOURCES = _ENTITY_SOURCES.format(where="")


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


# --- filtered reads -------------------------------------------------------------------------------------
# A reader's filter (`sinks.base.SearchFilter`) as a predicate on a source chunk: at least one of its labels
# among `$labels`, its document among `$document_ids`. Entities and relations are reached as unfiltered, then
# their source chunks are looked up by ID (the unique index) and tested, and what is shown is derived from
# the entries of the chunks that pass. A label index would not help: chunks are always reached by ID.
FILTER_KEYS = ("document_id", "labels")
FILTER_PARAMS = {"document_id": "document_ids", "labels": "labels"}


def passes(chunk: str, keys: Sequence[str]) -> str:
    """Cypher: the Chunk node bound to `chunk` passes the filter on `keys` (a subset of `FILTER_KEYS`)."""
    tests = {
        "labels": f"any(l IN coalesce({chunk}.labels, []) WHERE l IN $labels)",
        "document_id": f"{chunk}.document_id IN $document_ids",
    }
    return " AND ".join(tests[k] for k in sorted(keys))


def _kept(var: str, keys: Sequence[str], carry: str) -> str:
    """The indexes `keep` of `var`'s per-chunk lists whose source chunk passes the filter; a row whose
    entity or relation has none is dropped (the MATCH finds no passing chunk)."""
    return f"""UNWIND coalesce({var}.source_chunk_ids, []) AS sid
MATCH (s:Chunk {{chunk_id: sid}})
WHERE {passes("s", keys)}
WITH {carry}{var}, collect(sid) AS passing
WITH {carry}{var}, [i IN range(0, size({var}.source_chunk_ids) - 1) WHERE {var}.source_chunk_ids[i] IN passing] AS keep
"""


def _filtered_entities(keys: Sequence[str]) -> str:
    """After `WITH DISTINCT e`: each entity with a passing source chunk, derived from those chunks alone."""
    return f"""{_kept("e", keys, "")}WITH e, [i IN keep | e.source_chunk_ids[i]] AS ids,
     [i IN keep | coalesce(e.chunk_types[i], '{UNKNOWN_TYPE}')] AS ts, [i IN keep | coalesce(e.chunk_descriptions[i], '')] AS ds
RETURN e.name AS name, e.display_name AS display_name, ts[0] AS type, {_join_first("ds", 3, _NEWLINE)} AS description,
       ids AS source_chunk_ids
"""


def _filtered_relations(keys: Sequence[str], carry: str = "") -> str:
    """After a MATCH binding `a`, `b`, `x` (and `carry`): each relation with a passing source chunk, its
    weight, keywords and description derived from those chunks alone; ends in a WITH, for ORDER BY."""
    return f"""{_kept("x", keys, carry + "a, b, ")}WITH {carry}a, b, [i IN keep | x.source_chunk_ids[i]] AS ids,
     [i IN keep | coalesce(x.chunk_weights[i], 0.0)] AS ws, [i IN keep | coalesce(x.chunk_keywords[i], '')] AS ks,
     [i IN keep | coalesce(x.chunk_descriptions[i], '')] AS ds
WITH {carry}a.name AS source, b.name AS target, {_join_first("ks", 10, ", ")} AS keywords,
     {_join_first("ds", 3, _NEWLINE)} AS description, reduce(t = 0.0, w IN ws | t + w) AS weight, ids AS source_chunk_ids
"""


_RETURN_RELATION = "RETURN source, target, keywords, description, weight, source_chunk_ids\nORDER BY weight DESC, source, target"


@cache
def passing_chunk_ids(keys: tuple[str, ...]) -> str:
    """Which of `$chunk_ids` pass the filter."""
    return f"""
UNWIND $chunk_ids AS id
MATCH (c:Chunk {{chunk_id: id}})
WHERE {passes("c", keys)}
RETURN c.chunk_id AS chunk_id
"""


@cache
def filtered_entities_of_chunks(keys: tuple[str, ...]) -> str:
    """`ENTITIES_OF_CHUNKS` under a filter (the caller passes only chunk IDs that pass it)."""
    return f"""
UNWIND $chunk_ids AS id
MATCH (c:Chunk {{chunk_id: id}})
MATCH (e:Entity)-[:MENTIONED_IN]->(c)
WITH DISTINCT e
{_filtered_entities(keys)}"""


@cache
def filtered_entities_by_name(keys: tuple[str, ...]) -> str:
    return f"""
UNWIND $names AS name
MATCH (e:Entity {{name: name}})
WITH DISTINCT e
{_filtered_entities(keys)}"""


@cache
def filtered_entities_by_key(keys: tuple[str, ...], prop: str) -> str:
    """`ENTITIES_BY_KEY[prop]` under a filter: each entity a key finds, derived from its passing chunks."""
    return f"""
UNWIND $lookup AS key
MATCH (e:Entity {{{prop}: key}})
{_kept("e", keys, "key, ")}WITH key, e, [i IN keep | e.source_chunk_ids[i]] AS ids,
     [i IN keep | coalesce(e.chunk_types[i], '{UNKNOWN_TYPE}')] AS ts, [i IN keep | coalesce(e.chunk_descriptions[i], '')] AS ds
RETURN key, e.name AS name, e.display_name AS display_name, ts[0] AS type,
       {_join_first("ds", 3, _NEWLINE)} AS description, ids AS source_chunk_ids
"""


@cache
def filtered_entity_sources(keys: tuple[str, ...]) -> str:
    """`ENTITY_SOURCES` under a filter: only the source chunks that pass it."""
    return _ENTITY_SOURCES.format(where=f"WHERE {passes('c', keys)}\n")


@cache
def filtered_relations_of_chunks(keys: tuple[str, ...]) -> str:
    return f"""
UNWIND $names AS name
MATCH (a:Entity {{name: name}})-[x:RELATED]->(b:Entity)
WHERE b.name IN $names AND any(id IN x.source_chunk_ids WHERE id IN $chunk_ids)
{_filtered_relations(keys)}{_RETURN_RELATION}
"""


@cache
def filtered_relations_among(keys: tuple[str, ...]) -> str:
    return f"""
UNWIND $names AS name
MATCH (a:Entity {{name: name}})-[x:RELATED]->(b:Entity)
WHERE b.name IN $names
{_filtered_relations(keys)}{_RETURN_RELATION}
LIMIT $limit
"""


@cache
def filtered_relations_of_entities(keys: tuple[str, ...]) -> str:
    """`RELATIONS_OF_ENTITIES` under a filter: each hub's `$limit` heaviest passing relations, by the weight
    of their passing chunks."""
    return f"""
UNWIND $names AS hub
MATCH (:Entity {{name: hub}})-[x:RELATED]-(:Entity)
WITH hub, x, startNode(x) AS a, endNode(x) AS b
{_filtered_relations(keys, "hub, ")}ORDER BY weight DESC, source, target
WITH hub, collect({{source: source, target: target, keywords: keywords, description: description,
                   weight: weight, source_chunk_ids: source_chunk_ids}})[..$limit] AS top
UNWIND top AS r
RETURN r.source AS source, r.target AS target, r.keywords AS keywords, r.description AS description,
       r.weight AS weight, r.source_chunk_ids AS source_chunk_ids
"""


@cache
def filtered_neighbours(keys: tuple[str, ...]) -> str:
    """One hop of a filtered neighbourhood: entities related to `$names` by a relation with a passing
    source chunk, other than `$seen` (a path through a relation the reader may not see is no path)."""
    return f"""
UNWIND $names AS name
MATCH (:Entity {{name: name}})-[x:RELATED]-(o:Entity)
WHERE NOT o.name IN $seen
UNWIND coalesce(x.source_chunk_ids, []) AS sid
MATCH (s:Chunk {{chunk_id: sid}})
WHERE {passes("s", keys)}
RETURN DISTINCT o.name AS name
"""


COUNT_NODES = "MATCH (n:{label}) RETURN count(n) AS n"
COUNT_RELATIONSHIPS = "MATCH ()-[r:{type}]->() RETURN count(r) AS n"
