"""One entity explored: what a name names in the graph, what else it reaches, and why spellings are one.

The graph resolves names inside a document only (`unichunk.sinks.graph.resolution`); across documents an
acronym and its expansion, or a surname and a full name, stay separate entities joined by the indexed
`alias` key. This view shows both without claiming more than the graph knows:

- the entity a name is the key of (tried as typed, then as the write side keys it: possessive, dotted
  acronym, titles); failing that, the one entity whose alias it is; a name that is the alias of several
  (a bare surname of two people) answers with all of them as `candidates`, and no entity;
- **also known as**: the entities of a compatible type (`names.type_class`) the name reaches through the
  alias, in either direction (an acronym's expansions, an expansion's acronym); marked `ambiguous` when
  several entities claim the same link, since the graph cannot tell which one is meant;
- **merges**: per source chunk, the spellings resolution merged into this entity there
  (`chunk_merged_from`), so a reader sees "'dr. okafor' -> margaret okafor" and in which chunk; the
  spellings that are only the entity's own name written another way ("the united kingdom") apart, as
  `variants`, so the decisions are not lost among them;
- the neighbourhood: its strongest relations, `hops` steps out.

Everything is read under the caller's filter (`GraphReader`): an entity, alias or merge that only hidden
chunks taught is not there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from unichunk.retrieval.results import (
    EntityAliasResult,
    EntityDetailResult,
    EntityMergeResult,
    EntityResult,
    EntitySourceResult,
    GraphEntityResult,
    GraphRelationResult,
)
from unichunk.sinks.base import EntitySource, GraphEntity, GraphReader, SearchFilter
from unichunk.sinks.graph.cypher import UNKNOWN_TYPE
from unichunk.sinks.graph.names import PERSON, alias_key, base_key, spellings, type_class


def explore_entity(
    graph: GraphReader, name: str, *, hops: int = 1, limit: int = 20, filter: SearchFilter | None = None
) -> EntityResult | None:
    """The entity `name` names, as `filter` lets its reader see it (module docstring); None when it names
    none. `hops` (1 to 3) and `limit` bound the neighbourhood: relations up to `hops` steps out, the
    `limit` heaviest."""
    keys = spellings(name)
    found = graph.find_entities(keys, filter=filter)
    by_name = [e for k in keys for e in found.get(k, ()) if e.name == k]
    if by_name:
        chosen, matched_by = [by_name[0]], "name"
    else:
        chosen = list({e.name: e for k in keys for e in found.get(k, ())}.values())
        matched_by = "alias"
    if not chosen:
        return None
    if len(chosen) > 1:  # a name several entities share as their alias: say so, pick none
        sources = graph.entity_sources([e.name for e in chosen], filter=filter)
        candidates = [_detail(e, sources.get(e.name, ())) for e in sorted(chosen, key=lambda e: e.name)]
        return EntityResult(query=name, matched_by=matched_by, candidates=candidates)
    entity = chosen[0]
    aliases = _reached(graph, entity, filter)
    sources = graph.entity_sources([entity.name, *(a.name for a, _, _ in aliases)], filter=filter)
    own = sources.get(entity.name, ())
    around = graph.neighbourhood(entity.name, hops=hops, limit=limit, filter=filter)
    return EntityResult(
        query=name,
        matched_by=matched_by,
        entity=_detail(entity, own),
        also_known_as=[
            EntityAliasResult(
                name=a.display_name,
                key=a.name,
                type=a.type,
                via=via,
                ambiguous=ambiguous,
                document_ids=sorted({s.document_id for s in sources.get(a.name, ())}),
            )
            for a, via, ambiguous in aliases
            if a.name in sources
        ],
        merges=[_merge(entity, s) for s in own if s.merged_from],
        neighbours=[GraphEntityResult.of(e) for e in around.entities if e.name != entity.name],
        relations=[GraphRelationResult.of(r) for r in around.relations],
    )


def _reached(
    graph: GraphReader, entity: GraphEntity, filter: SearchFilter | None
) -> list[tuple[GraphEntity, str, bool]]:
    """The other entities the entity's name reaches through the alias key, each with what it is to this one
    and whether the link is ambiguous: (1) those whose alias is this entity's key (this is an acronym or a
    surname: they are its expansions, or full names), ambiguous when there are several; (2) the one whose
    key is this entity's alias (this is an expansion or a full name: it is the acronym, or the surname),
    ambiguous when another entity has the same alias (it may be short for that one). Those that merely
    share this entity's alias (another Okafor) are different entities, not listed."""
    person = entity.type.upper() == PERSON
    alias = alias_key(entity.name, entity.type)
    found = graph.find_entities([entity.name, *([alias] if alias else [])], filter=filter)
    longer = [e for e in found.get(entity.name, ()) if e.name != entity.name and _compatible(entity, e)]
    reached = [(e, "full name" if person else "expansion", len(longer) > 1) for e in longer]
    if alias:
        held = [e for e in found.get(alias, ()) if e.name != entity.name and _compatible(entity, e)]
        shorter = [e for e in held if e.name == alias]
        siblings = [e for e in held if e.name != alias]
        reached += [(e, "surname" if person else "acronym", bool(siblings)) for e in shorter]
    return sorted(reached, key=lambda r: (r[1], r[0].name))


def _merge(entity: GraphEntity, source: EntitySource) -> EntityMergeResult:
    """A chunk's merged keys, split into resolution's decisions (a surname, an acronym: the key differs
    after normalisation) and mere variants of the name ("the united kingdom", "margaret okafor's")."""
    variants = [k for k in source.merged_from if base_key(k, entity.type) == entity.name]
    return EntityMergeResult(
        chunk_id=source.chunk_id,
        document_id=source.document_id,
        merged_from=[k for k in source.merged_from if k not in variants],
        variants=variants,
        into=entity.name,
    )


def _compatible(a: GraphEntity, b: GraphEntity) -> bool:
    """Whether two entities may be one thing by type, as resolution decides it: the same type class, and
    neither untyped."""
    return UNKNOWN_TYPE not in (a.type, b.type) and type_class(a.type) == type_class(b.type)


def _detail(entity: GraphEntity, sources: Sequence[EntitySource]) -> EntityDetailResult:
    return EntityDetailResult(
        name=entity.display_name,
        key=entity.name,
        type=entity.type,
        description=entity.description,
        sources=[_source(s) for s in sources],
    )


def _source(source: EntitySource) -> EntitySourceResult:
    return EntitySourceResult(
        chunk_id=source.chunk_id, document_id=source.document_id, title=source.title, written=source.written
    )


def document_ids(result: EntityResult) -> Iterable[str]:
    """Every document a result names (for the caller to add the records' source IDs and check them)."""
    details = ([result.entity] if result.entity else []) + result.candidates
    yield from (s.document_id for d in details for s in d.sources)
    yield from (d for a in result.also_known_as for d in a.document_ids)
