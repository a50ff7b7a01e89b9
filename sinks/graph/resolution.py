"""Entity resolution inside one document, and the rows the graph sink writes for that document.

A document's per-chunk extractions are folded together, and every decision is taken on the document's
whole set of names before any row is built, so the result does not depend on the order of its chunks:

- every name is keyed by `names.base_key` (no possessive; a person without titles and suffixes; a dotted
  acronym without its dots), so "Okafor's", "Dr. Okafor" and "Okafor" are one key;
- a person's single-word name resolves to the one multi-word PERSON of the document whose surname it is
  ("Dr. Okafor" -> "margaret okafor"); with two such persons (two Okafors) it stays as it is;
- a single word written as an acronym ("IBM", "I.B.M.", "BoE") resolves to the one multi-word named group
  of a compatible type (`names.type_class`) whose initials it is;
- nothing else merges: never across type classes (a PERSON "Ford" beside the ORG "Ford Motor Company"),
  never a name left untyped in its chunk (a relation end takes the type its chunk gave that name, else
  it is UNKNOWN and merges with nothing), and never across documents: there a surname or an acronym finds
  its entities through the indexed `alias` (`names.alias_key`) without making them one.

Each merge is recorded where it happened: per chunk, the keys its names had before (`merged_from`: the
`entity_key` of each surface form that is not the entity's key), stored beside the chunk's other per-chunk
entries (cypher.py), so deleting or editing that chunk takes back exactly that merge, and a reader can see
why two names are one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from unichunk.sinks.graph.cypher import UNKNOWN_TYPE
from unichunk.sinks.graph.extraction import Extraction, display_name, entity_key
from unichunk.sinks.graph.names import (
    NAMED_GROUPS,
    PERSON,
    acronym,
    alias_key,
    base_key,
    looks_like_acronym,
    strip_possessive,
    type_class,
)

PAIR_SEPARATOR = "\n"  # never inside a key (`entity_key` collapses all whitespace to single spaces)


@dataclass
class DocumentGraph:
    """One document's (or, merged, one batch's) rows, one per MERGE key (FalkorDB must not see a key twice
    in one statement), and per chunk what it now contributes (`chunks`: entity keys and relation pairs),
    which tells a rewrite what a kept chunk no longer contributes."""

    mentions: list[dict[str, str]] = field(default_factory=list)
    entities: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Mention:
    shown: str  # the display form without a possessive
    surface: str  # `entity_key` of the name as written: the key it had before resolution
    key: str  # `base_key`
    type: str
    description: str


def pair_key(source: str, target: str) -> str:
    """A relation's pair as one string, for the per-chunk lists of what a chunk states."""
    return f"{source}{PAIR_SEPARATOR}{target}"


def aggregate(extractions: Sequence[Extraction]) -> DocumentGraph:
    """Fold one document's per-chunk extractions into one row per entity key and per relation pair, names
    resolved across the document's chunks, lists in chunk order."""
    chunks = [_chunk_mentions(x) for x in extractions]
    resolve = _Resolver([m for ents, ends in chunks for m in (*ents, *_ends(ends))])
    entities: dict[str, dict[str, Any]] = {}
    relations: dict[tuple[str, str], dict[str, Any]] = {}
    mentions: list[dict[str, str]] = []
    chunk_rows: list[dict[str, Any]] = []
    for extraction, (ents, ends) in zip(extractions, chunks, strict=True):
        chunk_id = extraction.chunk_id
        by_node: dict[str, list[_Mention]] = {}
        for m in (*ents, *_ends(ends)):
            by_node.setdefault(resolve(m), []).append(m)
        for node, group in by_node.items():
            mentions.append({"name": node, "chunk_id": chunk_id})
            _add_entry(entities, node, chunk_id, group)
        pairs: list[str] = []
        for rel, (a, b) in zip(extraction.relations, ends, strict=True):
            if a is None or b is None or (ka := resolve(a)) == (kb := resolve(b)):
                continue
            source, target = sorted((ka, kb))
            if pair_key(source, target) not in pairs:
                pairs.append(pair_key(source, target))
            _add_relation(relations, source, target, chunk_id, rel)
        chunk_rows.append({"chunk_id": chunk_id, "names": sorted(by_node), "pairs": sorted(pairs)})
    return DocumentGraph(mentions, list(entities.values()), list(relations.values()), chunk_rows)


def _ends(ends: Sequence[tuple[_Mention | None, _Mention | None]]) -> list[_Mention]:
    return [m for pair in ends for m in pair if m is not None]


def _chunk_mentions(
    extraction: Extraction,
) -> tuple[list[_Mention], list[tuple[_Mention | None, _Mention | None]]]:
    """A chunk's entity mentions, and its relations' two ends as mentions: an end takes the type the
    chunk's entities give the same name (an extractor gives relation ends no type), else UNKNOWN."""
    entities = [
        m
        for ent in extraction.entities
        if (m := _mention(ent.name, clean_text(ent.type) or UNKNOWN_TYPE, ent.description)) is not None
    ]
    typed = [m for m in entities if m.type != UNKNOWN_TYPE]
    by_surface: dict[str, str] = {}
    for m in typed:
        by_surface.setdefault(m.surface, m.type)

    def end(name: str) -> _Mention | None:
        surface = entity_key(display_name(name))
        found = by_surface.get(surface)
        if found is None:  # "Dr. Okafor" ends a relation where the entity was "Okafor"
            found = next((m.type for m in typed if base_key(name, m.type) == m.key), UNKNOWN_TYPE)
        return _mention(name, found, "")

    return entities, [(end(rel.source), end(rel.target)) for rel in extraction.relations]


def _mention(name: str, entity_type: str, description: str | None) -> _Mention | None:
    key = base_key(name, entity_type)
    if not key:
        return None
    shown = strip_possessive(display_name(name)) or display_name(name)
    return _Mention(shown, entity_key(display_name(name)), key, entity_type, clean_text(description) or "")


class _Resolver:
    """A document's resolution: which base keys stand for a longer name of the same document."""

    def __init__(self, mentions: Sequence[_Mention]) -> None:
        self.surnames: dict[str, set[str]] = {}
        self.initials: dict[tuple[str, str], set[str]] = {}
        for m in mentions:
            words = m.key.split()
            if len(words) < 2:
                continue
            if _is_person(m.type):
                self.surnames.setdefault(words[-1], set()).add(m.key)
            elif m.type.upper() in NAMED_GROUPS:
                for short in _initials(m.key):
                    self.initials.setdefault((type_class(m.type), short), set()).add(m.key)

    def __call__(self, m: _Mention) -> str:
        if " " in m.key:
            return m.key
        if _is_person(m.type):
            found = self.surnames.get(m.key, set())
        elif m.type.upper() in NAMED_GROUPS and looks_like_acronym(m.shown):
            found = self.initials.get((type_class(m.type), m.key), set())
        else:
            return m.key
        return next(iter(found)) if len(found) == 1 else m.key


def _initials(key: str) -> set[str]:
    """The acronyms a name of several words may be written as: its initials without linking words
    (`names.acronym`: "bank of england" -> "be") and with them ("boe", as "BoE" is written)."""
    every = "".join(w[0] for w in key.replace("-", " ").split())
    short = acronym(key)
    return {every} | ({short} if short else set())


def _is_person(entity_type: str) -> bool:
    return entity_type.upper() == PERSON


def _add_entry(entities: dict[str, dict[str, Any]], node: str, chunk_id: str, group: list[_Mention]) -> None:
    """One chunk's entry in an entity's per-chunk lists, from the chunk's mentions resolved to it."""
    row = entities.setdefault(
        node,
        {
            "name": node,
            "chunk_ids": [],
            "types": [],
            "descriptions": [],
            "names": [],
            "aliases": [],
            "merged_from": [],
        },
    )
    entity_type = next((m.type for m in group if m.type != UNKNOWN_TYPE), UNKNOWN_TYPE)
    description = next((m.description for m in group if m.description), "")
    row["chunk_ids"].append(chunk_id)
    row["types"].append(entity_type)
    row["descriptions"].append(unseen(description, row["descriptions"]))
    row["names"].append(next((m.shown for m in group if m.key == node), ""))
    row["aliases"].append(alias_key(node, entity_type) or "")
    row["merged_from"].append(PAIR_SEPARATOR.join(sorted({m.surface for m in group} - {node})))


def _add_relation(
    relations: dict[tuple[str, str], dict[str, Any]], source: str, target: str, chunk_id: str, rel: Any
) -> None:
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
        return
    row["chunk_ids"].append(chunk_id)
    row["weights"].append(float(weight))
    row["keywords"].append(unseen(clean_text(rel.keywords), row["keywords"]))
    row["descriptions"].append(unseen(clean_text(rel.description), row["descriptions"]))


def unseen(text: str | None, earlier: list[str]) -> str:
    """Blank a value the same document already gave (kept as "" so the lists stay parallel)."""
    return "" if not text or text in earlier else text


def clean_text(text: str | None) -> str | None:
    """Strip what neither store accepts in a string: NUL characters and lone surrogates. Only for extracted
    text (names, descriptions, titles); chunk content is stored exactly (`sink.encode_content`)."""
    if text is None:
        return None
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text
