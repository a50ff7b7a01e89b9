"""A 10k-chunk document through the graph sink on a real server, with a cheap deterministic extractor."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from unichunk.chunking.models import Chunk
from unichunk.sinks.graph.backends import GraphBackend
from unichunk.sinks.graph.extraction import EntityExtractor, ExtractedEntity, ExtractedRelation, Extraction
from unichunk.sinks.graph.sink import KnowledgeGraphSink

N = 10_000
POOL = 500  # entity i appears in chunks i, i+500, ... (20 chunks each); "Hub" in every chunk


class _Modular(EntityExtractor):
    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        out = []
        for c in chunks:
            name = f"Entity {c.chunk_index % POOL}"
            out.append(
                Extraction(
                    c.chunk_id,
                    (
                        ExtractedEntity(name, "THING", f"seen in {c.chunk_index}", c.chunk_id),
                        ExtractedEntity("Hub", "THING", "everywhere", c.chunk_id),
                    ),
                    (ExtractedRelation(name, "Hub", "part of", f"rel {c.chunk_index}", 1.0, c.chunk_id),),
                )
            )
        return out


@pytest.mark.slow
def test_ten_thousand_chunks_in_one_batch(graph_backend: GraphBackend, make_doc) -> None:
    sink = KnowledgeGraphSink(graph_backend, _Modular())
    doc, chunks = make_doc("doc_big", [f"Chunk number {i}." for i in range(N)])
    prepared = sink.prepare([(doc, chunks)])
    assert sink.write(prepared) == N
    stats = sink.stats()
    assert stats["Chunk"] == N and stats["NEXT_CHUNK"] == N - 1 and stats["FROM_DOCUMENT"] == N
    assert stats["Entity"] == POOL + 1 and stats["MENTIONED_IN"] == 2 * N and stats["RELATED"] == POOL
    hub = sink.entity("Hub")
    assert len(hub.source_chunk_ids) == N  # no cap drops chunk IDs
    assert sink.chunk_ids("doc_b") == set() and len(sink.chunk_ids("doc_big")) == N

    assert sink.write(prepared) == N  # idempotent at scale
    assert sink.stats() == stats

    # Keep every other chunk (same IDs): half the sources go, every entity survives.
    kept = chunks[::2]
    doc2, _ = make_doc("doc_big", [c.content for c in chunks])
    sink.upsert(doc2, kept)
    assert sink.stats()["Chunk"] == N // 2
    assert len(sink.entity("Hub").source_chunk_ids) == N // 2
    assert sink.entity("Entity 1") is None  # odd pool entries were only in odd chunks
    assert len(sink.neighbourhood("Hub", limit=1000).relations) == POOL // 2
    rel = next(r for r in sink.neighbourhood("Entity 2").relations)
    assert rel.weight == N // POOL and len(rel.source_chunk_ids) == N // POOL

    assert sink.delete("doc_big") == N // 2
    assert sink.stats() == dict.fromkeys(stats, 0)
