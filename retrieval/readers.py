"""Which stores a search reads, and opening them: always the live index generation's, resolved once.

`Readers` names the read side of each store by its role, typed by the protocols of `unichunk.sinks.base`, so
retrieval never depends on what a particular store adds. `open_readers` resolves the live generation once
(in `unichunk.index.generations`, as every caller does) so all three stores come from the same generation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from unichunk.index.generations import reading_settings
from unichunk.retrieval.graph_search import GraphSearch
from unichunk.sinks.base import ChunkSearch, GraphReader, InvalidRequest, SinkName
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks

SEARCH_SINKS: tuple[SinkName, ...] = ("keywords", "vectors", "graph")
# A search without the graph context needs only these: the graph store (a FalkorDB server) stays closed.
RANKING_SINKS: tuple[SinkName, ...] = ("keywords", "vectors")


@dataclass(frozen=True)
class Readers:
    """The stores one search reads; any may be absent (hybrid with only BM25 is BM25)."""

    keywords: ChunkSearch | None = None
    vectors: ChunkSearch | None = None
    graph: GraphReader | None = None

    @classmethod
    def of(cls, sinks: Mapping[str, object]) -> Readers:
        """Readers from opened stores keyed by sink name; a store lacking its read side is refused."""
        for name, role in (("keywords", ChunkSearch), ("vectors", ChunkSearch), ("graph", GraphReader)):
            if name in sinks and not isinstance(sinks[name], role):
                raise InvalidRequest(name, f"{type(sinks[name]).__name__} does not implement {role.__name__}")
        return cls(sinks.get("keywords"), sinks.get("vectors"), sinks.get("graph"))  # type: ignore[arg-type]

    def searchers(self) -> dict[str, ChunkSearch]:
        return {
            name: s for name, s in (("keywords", self.keywords), ("vectors", self.vectors)) if s is not None
        }

    def rankers(self) -> dict[str, ChunkSearch]:
        """What ranking may read: `searchers`, and the graph's ranked list (`GraphSearch`, its chunk
        records from the neighbour store) when the graph store is open. Building it reads nothing."""
        found = self.searchers()
        store = self.neighbour_store()
        if self.graph is not None and store is not None:
            found["graph"] = GraphSearch(self.graph, store)
        return found

    def neighbour_store(self) -> ChunkSearch | None:
        """Where neighbours are fetched: the keyword store (a local SQLite read) if present."""
        return self.keywords or self.vectors


def open_readers(settings: SinkSettings | None = None, names: Sequence[SinkName] = SEARCH_SINKS) -> Readers:
    """The live generation's stores `names` from the process-wide pool, kept open for the next search
    (until `unichunk.sinks.pool.release_sinks`)."""
    return Readers.of(get_sinks(names, reading_settings(settings)))
