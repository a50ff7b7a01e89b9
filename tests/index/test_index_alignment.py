"""The three real sinks, fed the same chunks, agree on chunk IDs and content; the alignment check catches a
gap, and content one store altered, and the repair restores it."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy
from prometheus_client import REGISTRY
from qdrant_edge import UpdateOperation

from unichunk.chunking import ChunkingService, ChunkStrategy, Document
from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk
from unichunk.index.alignment import record_alignment, repair, verify_alignment
from unichunk.index.run import RunConfig
from unichunk.index.status import processed_fields
from unichunk.sinks.base import Sink
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.factory import SINK_NAMES, open_sinks
from unichunk.sinks.graph.sink import KnowledgeGraphSink
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.pool import flow_sinks
from unichunk.sinks.vectors.qdrant import QdrantSink
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink
from unichunk.sinks.vectors.sink import point_id

TEXTS = {
    "a.md": "# Alpha\n\nAda Lovelace worked with Charles Babbage in London.\n\n## Notes\n\nShe wrote notes.\n",
    "b.txt": "Grace Hopper joined the Navy in New York. She built the first compiler at Remington Rand.\n",
}


@pytest.fixture()
def sinks(tmp_path: Path, falkordb_url: str):  # type: ignore[no-untyped-def]
    settings = SinkSettings(data_dir=tmp_path, falkordb_url=falkordb_url, graph_name=f"align_{tmp_path.name}")
    opened = open_sinks(settings)
    yield opened
    opened["graph"].backend.run("MATCH (n) DETACH DELETE n", {})  # type: ignore[attr-defined]
    for sink in opened.values():
        sink.close()


def _documents() -> list[tuple[Document, list]]:
    service = ChunkingService()
    out = []
    for name, text in TEXTS.items():
        document = Document(text=text, source_system="test", source_id=name, path=name)
        out.append((document, service.chunk(document, ChunkStrategy(name="auto"))))
    return out


def test_same_chunks_reach_every_sink_and_a_removed_point_is_reported(sinks) -> None:  # type: ignore[no-untyped-def]
    batch = _documents()
    expected = {c.chunk_id for _, chunks in batch for c in chunks}
    prepared = {name: sink.prepare(batch) for name, sink in sinks.items()}  # compute everything first
    for name, sink in sinks.items():
        assert sink.write(prepared[name]) == len(expected)

    report = verify_alignment(sinks, expected)
    assert report.ok, report.as_dict()
    assert set(report.counts) == set(SINK_NAMES)
    assert all(count == len(expected) for count in report.counts.values())

    # remove one point straight from Qdrant, behind the sink's back
    victim = sorted(expected)[0]
    vectors = sinks["vectors"]
    vectors._store_delete([point_id(victim)])  # the engine's own delete, without the sink's bookkeeping
    report = verify_alignment(sinks, expected)
    assert not report.ok
    assert report.missing["vectors"] == {victim}
    assert report.missing["keywords"] == set() and report.missing["graph"] == set()
    assert report.mismatch_count() == 1
    # without an expected set, the union of the sinks is the reference and the gap still shows
    assert verify_alignment(sinks).missing["vectors"] == {victim}


def test_delete_reaches_every_sink(sinks) -> None:  # type: ignore[no-untyped-def]
    batch = _documents()
    for sink in sinks.values():
        sink.write(sink.prepare(batch))
    gone = batch[0][0].document_id
    for sink in sinks.values():
        sink.delete(gone)
    for name, sink in sinks.items():
        assert sink.chunk_ids(gone) == set(), name
        assert sink.chunk_ids() == {c.chunk_id for c in batch[1][1]}, name
    assert verify_alignment(sinks).ok


NUL_TEXT = "Ada Lovelace kept a NUL \x00 in her notes.\n\nCharles Babbage kept \\0, a backslash and a zero.\n"


def _corrupt(sinks: dict[str, Sink], name: str, chunk: Chunk) -> None:
    """Alter one chunk's stored content behind the sink's back, as a store that mangles text would."""
    mangled = chunk.content.replace("\x00", "") + " (mangled)"
    sink = sinks[name]
    if isinstance(sink, BM25Sink):
        with sink.store.db.write() as conn:
            conn.execute(
                sqlalchemy.text("UPDATE chunks SET content = :c WHERE chunk_id = :id"),
                {"c": sink.store.dialect.encode(mangled), "id": chunk.chunk_id},
            )
    elif isinstance(sink, KnowledgeGraphSink):  # the old bug: NUL dropped, no marker
        sink.backend.run(
            "MATCH (c:Chunk {chunk_id: $id}) SET c.content = $text REMOVE c.content_encoding",
            {"id": chunk.chunk_id, "text": mangled},
        )
    elif isinstance(sink, EdgeQdrantSink):
        sink.shard.update(UpdateOperation.set_payload([point_id(chunk.chunk_id)], {"content": mangled}))
    else:
        assert isinstance(sink, QdrantSink)
        sink.client.set_payload(
            sink.collection, {"content": mangled}, points=[point_id(chunk.chunk_id)], wait=True
        )


@pytest.mark.parametrize("name", SINK_NAMES)
def test_altered_content_in_one_store_is_reported_there_and_repaired(
    tmp_path: Path, falkordb_url: str, name: str
) -> None:
    settings = SinkSettings(
        data_dir=tmp_path, falkordb_url=falkordb_url, graph_name=f"altered_{tmp_path.name}"
    )
    run = RunConfig(ChunkStrategy(name="auto"), settings)
    with flow_sinks(run.sinks, run.settings) as sinks:  # as a flow holds them: repair's tasks use them
        try:
            nul_doc = Document(text=NUL_TEXT, source_system="test", source_id="nul.txt", path="nul.txt")
            batch = [*_documents(), (nul_doc, ChunkingService().chunk(nul_doc, ChunkStrategy(name="auto")))]
            for sink in sinks.values():
                sink.write(sink.prepare(batch))
            status = run.status_store()
            for document, chunks in batch:  # what the pipeline records after a successful write
                run.chunk_cache().put(document, run.chunk_fingerprint, chunks)
                fields = processed_fields(
                    [c.chunk_id for c in chunks],
                    content_hash=document.content_hash,
                    fingerprint=run.fingerprint,
                    chunk_fingerprint=run.chunk_fingerprint,
                    strategy=run.strategy.model_dump_json(),
                )
                status.upsert_many([(document.document_id, fields)])
            expected = status.expected_chunk_ids()
            report = verify_alignment(sinks, expected)
            assert report.ok, report.as_dict()
            assert report.altered == {n: set() for n in SINK_NAMES}

            victim = next(c for c in batch[-1][1] if "\x00" in c.content)
            _corrupt(sinks, name, victim)
            report = verify_alignment(sinks, expected)
            assert not report.ok and report.mismatch_count() == 1
            assert report.altered == {n: {victim.chunk_id} if n == name else set() for n in SINK_NAMES}
            assert not any(report.missing.values()) and not any(report.extra.values())
            summary = report.as_dict()["sinks"][name]
            assert summary["altered"] == 1 and summary["altered_examples"] == [victim.chunk_id]
            record_alignment(report)
            gauge = {"sink": name, "kind": "altered"}
            assert REGISTRY.get_sample_value("unichunk_alignment_mismatches", gauge) == 1

            result = repair(run, report)
            assert result.rewritten == {name: [nul_doc.document_id]} and not result.errors
            report = verify_alignment(sinks, expected)
            assert report.ok, report.as_dict()
            assert sinks[name].content_hashes(nul_doc.document_id)[victim.chunk_id] == sha256_hex(
                victim.content
            )
            record_alignment(report)
            assert REGISTRY.get_sample_value("unichunk_alignment_mismatches", gauge) == 0
        finally:
            sinks["graph"].drop()
