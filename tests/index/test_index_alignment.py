"""The three real sinks, fed the same chunks, agree on chunk IDs; the alignment check catches a gap."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunking import ChunkingService, ChunkStrategy, Document
from index.alignment import verify_alignment
from sinks.config import SinkSettings
from sinks.factory import SINK_NAMES, open_sinks

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
    from sinks.vectors.qdrant import point_id

    vectors.client.delete(vectors.collection, points_selector=[point_id(victim)], wait=True)
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
