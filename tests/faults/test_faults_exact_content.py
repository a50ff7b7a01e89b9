"""A text file with a NUL character after its first 8 KB (the loader only refuses NULs before that).

Proves, end to end through the real `ingest` flow, MiniLM, spaCy, Qdrant local mode, BM25 and FalkorDB:
every store holds every chunk's content exactly (its content hash is the one the chunk ID names, and the
text is the document's own slice); `unichunk verify` passes; when the graph's copy of the NUL chunk is
altered behind the pipeline's back (the NUL dropped, as the graph once did), `verify` exits 1 naming that
chunk as altered in the graph, and the `reindex` flow re-writes it and ends Completed and aligned.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from unichunk.chunking.ids import parse_chunk_id, sha256_hex
from unichunk.chunking.loaders import load_document
from unichunk.chunking.sources import default_source_name
from unichunk.deployments.cli.main import app
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.flows.reindex import reindex
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.base import SINK_NAMES, ChunkSearch
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.sink import KnowledgeGraphSink, decode_content
from unichunk.sinks.pool import get_sinks, release_sinks

runner = CliRunner()
PEOPLE = ["Alice Martin", "Bruno Costa", "Chen Wei", "Dara Okafor", "Emil Novak"]
CITIES = ["Berlin", "Lisbon", "Nairobi", "Osaka", "Toronto"]


def _text() -> str:
    """~12 KB of prose with a NUL at about 9 KB (past the 8 KB the loader checks for binary content)."""
    sentences = [
        f"Entry {n}: {PEOPLE[n % 5]} met {PEOPLE[(n + 2) % 5]} in {CITIES[n % 5]} to review shard {n}."
        for n in range(200)
    ]
    head = " ".join(sentences[:130])
    assert 8192 < len(head.encode()) < 10_000
    return (
        head
        + " The log then held a NUL \x00 byte, a bell \x07 and a CRLF\r\nline. "
        + " ".join(sentences[130:])
    )


def _stored_contents() -> dict[str, dict[str, str]]:
    """What each store gives back for each chunk: Qdrant and BM25 by get_chunks, the graph by Cypher."""
    sinks = get_sinks(SINK_NAMES, reading_settings(SinkSettings()))
    expected = live_status(SinkSettings()).expected_chunk_ids()
    contents: dict[str, dict[str, str]] = {}
    for name in ("vectors", "keywords"):
        reader = sinks[name]
        assert isinstance(reader, ChunkSearch)
        contents[name] = {cid: chunk.content for cid, chunk in reader.get_chunks(expected).items()}
    graph = sinks["graph"]
    assert isinstance(graph, KnowledgeGraphSink)
    rows = graph.backend.run(
        "MATCH (c:Chunk) RETURN c.chunk_id AS id, c.content AS content, c.content_encoding AS encoding",
        write=False,
    )
    contents["graph"] = {r["id"]: decode_content(r["content"], r["encoding"]) for r in rows}
    return contents


def _assert_exact(document_text: str) -> str:
    """Every store holds exactly the expected chunks, each the document's own slice; returns the first chunk
    holding the NUL."""
    sinks = get_sinks(SINK_NAMES, reading_settings(SinkSettings()))
    expected = live_status(SinkSettings()).expected_chunk_ids()
    keywords = sinks["keywords"]
    assert isinstance(keywords, ChunkSearch)
    stored = keywords.get_chunks(expected)  # offsets: the slice of the document each chunk must be
    slices = {cid: document_text[c.start_char : c.end_char] for cid, c in stored.items()}
    assert set(slices) == expected
    assert _stored_contents() == dict.fromkeys(SINK_NAMES, slices)
    named = {cid: parse_chunk_id(cid)[2] for cid in expected}
    for name, sink in sinks.items():
        hashes = sink.content_hashes()
        assert hashes == {cid: sha256_hex(text) for cid, text in slices.items()}, name
        assert all(hashes[cid].startswith(named[cid]) for cid in expected), name
    holding = sorted(cid for cid, text in slices.items() if "\x00" in text)  # 2 when chunks overlap there
    assert holding, "no stored chunk holds the NUL"
    return holding[0]


def test_a_nul_after_the_first_8_kb_reaches_every_store_exactly_and_an_altered_copy_is_repaired(
    fault_env, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    path = corpus / "server.log.txt"
    path.write_bytes(_text().encode())
    assert b"\x00" not in path.read_bytes()[:8192] and b"\x00" in path.read_bytes()
    params = IngestParams(source=SourceParams(root=str(corpus)))
    document = load_document(
        path, root=corpus, source_system=default_source_name(corpus)
    )  # as the scan names it

    state = ingest(params, return_state=True)
    assert state.is_completed(), state.message
    assert len(live_status(SinkSettings(data_dir=fault_env)).expected_chunk_ids()) > 1
    victim = _assert_exact(document.text)

    settings = reading_settings(SinkSettings())
    release_sinks(SINK_NAMES, settings)  # the CLI opens its own (Qdrant local mode: one client per dir)
    result = runner.invoke(app, ["verify"])
    assert result.exit_code == 0, result.output
    assert "altered" in result.output and "aligned" in result.output

    graph = get_sinks(["graph"], settings)["graph"]
    assert isinstance(graph, KnowledgeGraphSink)
    text = _stored_contents()["graph"][victim]
    graph.backend.run(
        "MATCH (c:Chunk {chunk_id: $id}) SET c.content = $text REMOVE c.content_encoding",
        {"id": victim, "text": text.replace("\x00", "")},
    )
    release_sinks(SINK_NAMES, settings)
    result = runner.invoke(app, ["verify"])
    assert result.exit_code == 1, result.output
    assert f"graph: altered {victim}" in result.output and "1 mismatch" in result.output
    assert "vectors: altered" not in result.output and "keywords: altered" not in result.output

    state = reindex(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert summary.repaired["rewritten"] == {"graph": [document.document_id]}
    assert summary.alignment["ok"] and summary.alignment["sinks"]["graph"]["altered"] == 0
    assert _assert_exact(document.text) == victim
    release_sinks(SINK_NAMES, reading_settings(SinkSettings()))
    assert runner.invoke(app, ["verify"]).exit_code == 0
