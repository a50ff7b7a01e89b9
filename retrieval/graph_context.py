"""Graph context: the entities and relations the knowledge graph learnt from the retrieved chunks.

LightRAG-style: the entities mentioned in the retrieved chunks come first, ranked by how well-ranked the
chunks mentioning them are, then the one-hop neighbours of the strongest of them, with the relations
among them by weight. It reads the graph through `unichunk.sinks.base.GraphReader` only, under the search's
filter: with a labels filter, only what readable chunks taught the graph (docs/access.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from unichunk.sinks.base import GraphContext, GraphEntity, GraphReader, GraphRelation, SearchFilter


def graph_context(
    graph: GraphReader,
    chunk_ids: Sequence[str],
    *,
    hop_entities: int = 5,
    max_entities: int = 30,
    max_relations: int = 30,
    filter: SearchFilter | None = None,
) -> GraphContext:
    """Entities and relations linked to `chunk_ids` (best first) plus one-hop neighbours, by weight.

    Direct entities come first, ranked by how well-ranked the retrieved chunks mentioning them are
    (sum of 1/rank), then by the weight of their relations; the `hop_entities` best of them are expanded
    one hop: each brings its `max_relations` heaviest relations. Relations (direct and one-hop,
    deduplicated) are ordered by weight.
    """
    if not chunk_ids:
        return GraphContext()
    rank = {c: i for i, c in reversed(list(enumerate(chunk_ids, start=1)))}
    direct = graph.context_for_chunks(chunk_ids, filter=filter)
    relations: dict[tuple[str, str], GraphRelation] = {(r.source, r.target): r for r in direct.relations}
    strength: dict[str, float] = {}
    for r in direct.relations:
        strength[r.source] = strength.get(r.source, 0.0) + r.weight
        strength[r.target] = strength.get(r.target, 0.0) + r.weight

    def relevance(e: GraphEntity) -> tuple[float, float, str]:
        return (
            -sum(1.0 / rank[c] for c in e.source_chunk_ids if c in rank),
            -strength.get(e.name, 0.0),
            e.name,
        )

    ranked = sorted(direct.entities, key=relevance)
    entities: dict[str, GraphEntity] = {e.name: e for e in ranked}
    if ranked:  # one read for every expanded entity
        around = graph.strongest_relations(
            [e.name for e in ranked[:hop_entities]], limit=max_relations, filter=filter
        )
        for r in around.relations:
            relations.setdefault((r.source, r.target), r)  # one relation per pair: the same record
        for n in around.entities:
            entities.setdefault(n.name, n)
    kept = sorted(relations.values(), key=lambda r: (-r.weight, r.source, r.target))[:max_relations]
    hop_strength: dict[str, float] = {}
    for r in kept:
        for name in (r.source, r.target):
            hop_strength[name] = hop_strength.get(name, 0.0) + r.weight
    direct_names = [e.name for e in ranked]
    others = sorted(
        (n for n in entities if n not in set(direct_names) and n in hop_strength),
        key=lambda n: (-hop_strength[n], n),
    )
    names = (direct_names + others)[:max_entities]
    return GraphContext(tuple(entities[n] for n in names), tuple(kept))


def graph_by_chunk(
    graph: GraphReader, chunk_ids: Sequence[str], filter: SearchFilter | None = None
) -> dict[str, GraphContext]:
    """What the graph holds for each of `chunk_ids`: the entities it took from that chunk and the relations
    stated in it (one read for all of them), for a view that shows each chunk's share of the graph; with
    `filter` (a reader's labels), only as the chunks it admits taught them."""
    wanted = list(dict.fromkeys(chunk_ids))
    if not wanted:
        return {}
    direct = graph.context_for_chunks(wanted, filter=filter)
    entities: dict[str, list[GraphEntity]] = {c: [] for c in wanted}
    relations: dict[str, list[GraphRelation]] = {c: [] for c in wanted}
    for e in sorted(direct.entities, key=lambda e: e.name):
        for c in dict.fromkeys(e.source_chunk_ids):
            if c in entities:
                entities[c].append(e)
    for r in sorted(direct.relations, key=lambda r: (-r.weight, r.source, r.target)):
        for c in dict.fromkeys(r.source_chunk_ids):
            if c in relations:
                relations[c].append(r)
    return {c: GraphContext(tuple(entities[c]), tuple(relations[c])) for c in wanted}
