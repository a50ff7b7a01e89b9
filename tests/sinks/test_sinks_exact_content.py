"""Every store holds a chunk's content exactly, whatever it contains, and reports the hash of what it holds.

Real stores: Qdrant local mode with MiniLM, BM25 on SQLite and on PostgreSQL, the graph on FalkorDB (and Neo4j when NEO4J_URI
is set), with spaCy extracting entities. Content comes from a fixed list of hostile texts and from hypothesis (every code point
but the surrogates, which the stores cannot hold and every sink refuses).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from documents import MakeDoc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.base import InvalidRequest, Sink
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.backends import GraphBackend
from unichunk.sinks.graph.sink import ESCAPED, KnowledgeGraphSink, decode_content, encode_content
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink

C0_AND_C1 = "".join(chr(i) for i in range(32)) + "\x7f" + "".join(chr(i) for i in range(0x80, 0xA0))
HOSTILE = [
    "NUL \x00 inside a sentence, and one at the end\x00",
    "all C0, DEL and C1 controls: " + C0_AND_C1,
    "noncharacters \uffff \U0010ffff \ufdd0 and the BOM \ufeff",
    "combining marks e\u0301 a\u0308 Z\u0335\u0321\u0362 and Hangul jamo \u1100\u1161",
    "emoji 👍🏽 👨\u200d👩\u200d👧 🏳️\u200d🌈 and a flag 🇯🇵",
    "RTL שלום עולם مرحبا بالعالم with an override \u202e and isolate \u2067x\u2069",
    "CRLF line\r\nends\rand\nnewlines\u2028\u2029\x85",
    "escape look-alikes \\0 \\\\ \\x00 \\u0000 next to a real NUL \x00 and a backslash before it \\\x00",
    "quotes ' \" ` and Cypher-ish {x: $y} // not a comment",
]
# Every code point but the surrogates; a "probe" word first so a BM25/vector search can find each chunk.
CONTENT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=200)
PIECES = st.lists(CONTENT, min_size=1, max_size=4).map(lambda texts: [f"probe {t}" for t in texts])
EXAMPLES = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _expected_hashes(chunks: Sequence[Chunk]) -> dict[str, str]:
    return {c.chunk_id: sha256_hex(c.content) for c in chunks}


def _assert_reads_exact(sink: QdrantSink | BM25Sink, document: Document, chunks: Sequence[Chunk]) -> None:
    """get_chunks, chunks_at and search all give back each chunk's content unchanged."""
    wanted = {c.chunk_id: c.content for c in chunks}
    got = sink.get_chunks(wanted)
    assert {k: v.content for k, v in got.items()} == wanted
    at = sink.chunks_at(document.document_id, range(len(chunks)))
    assert [c.content for c in at] == [c.content for c in chunks]
    hits = sink.search("probe", k=len(chunks) + 5, filter={"document_id": document.document_id})
    assert {h.chunk_id: h.content for h in hits} == wanted
    assert sink.content_hashes() == _expected_hashes(chunks)
    assert sink.content_hashes(document.document_id) == _expected_hashes(chunks)
    assert sink.content_hashes("absent") == {}


# --- Qdrant -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLMEmbedder]:
    embedder = MiniLMEmbedder()
    yield embedder
    embedder.close()


@pytest.fixture(params=["local", "edge"])
def qdrant(request: pytest.FixtureRequest, tmp_path: Path, minilm: MiniLMEmbedder) -> Iterator[QdrantSink]:
    """Each embedded engine: local mode pickles payloads into SQLite, qdrant-edge stores them as JSON."""
    engine = EdgeQdrantSink if request.param == "edge" else QdrantSink
    with engine(
        SinkSettings(data_dir=tmp_path, qdrant_url=None, vector_engine=request.param), minilm
    ) as sink:
        yield sink


def test_qdrant_holds_hostile_content_exactly(make_doc: MakeDoc, qdrant: QdrantSink) -> None:
    document, chunks = make_doc("doc_hostile", [f"probe {t}" for t in HOSTILE])
    assert qdrant.content_hashes() == {}  # no collection yet
    qdrant.upsert(document, chunks)
    _assert_reads_exact(qdrant, document, chunks)


@EXAMPLES
@given(pieces=PIECES)
def test_qdrant_holds_any_content_exactly(make_doc: MakeDoc, qdrant: QdrantSink, pieces: list[str]) -> None:
    document, chunks = make_doc("doc_any", pieces)
    qdrant.upsert(document, chunks)
    _assert_reads_exact(qdrant, document, chunks)


# --- BM25 ---------------------------------------------------------------------------------------------


@pytest.fixture
def bm25(keyword_settings: SinkSettings) -> Iterator[BM25Sink]:
    """The keyword store on SQLite and on PostgreSQL (where TEXT cannot hold NUL: content is BYTEA)."""
    with BM25Sink(keyword_settings) as sink:
        yield sink


def test_bm25_holds_hostile_content_exactly(
    make_doc: MakeDoc, bm25: BM25Sink, keyword_settings: SinkSettings
) -> None:
    document, chunks = make_doc("doc_hostile", [f"probe {t}" for t in HOSTILE])
    bm25.upsert(document, chunks)
    _assert_reads_exact(bm25, document, chunks)
    with BM25Sink(keyword_settings) as reopened:  # from the store, not from a cache
        _assert_reads_exact(reopened, document, chunks)


def test_bm25_content_hashes_page_through_the_table(make_doc: MakeDoc, bm25: BM25Sink) -> None:
    """More rows than one page (1000), several documents: every chunk is hashed once."""
    batch = [make_doc(f"doc_{n}", [f"probe {n} {i} \x00" for i in range(150)]) for n in range(8)]
    bm25.write(bm25.prepare(batch))
    expected = {k: v for _, chunks in batch for k, v in _expected_hashes(chunks).items()}
    assert bm25.content_hashes() == expected
    assert bm25.content_hashes("doc_3") == _expected_hashes(batch[3][1])


@EXAMPLES
@given(pieces=PIECES)
def test_bm25_holds_any_content_exactly(make_doc: MakeDoc, bm25: BM25Sink, pieces: list[str]) -> None:
    document, chunks = make_doc("doc_any", pieces)
    bm25.upsert(document, chunks)
    _assert_reads_exact(bm25, document, chunks)


# --- the knowledge graph ------------------------------------------------------------------------------


@pytest.fixture
def graph(graph_backend: GraphBackend) -> KnowledgeGraphSink:
    return KnowledgeGraphSink(graph_backend)


def _graph_contents(sink: KnowledgeGraphSink) -> dict[str, tuple[str, str | None]]:
    """Each Chunk node's stored `content` and `content_encoding`, read with plain Cypher."""
    rows = sink.backend.run(
        "MATCH (c:Chunk) RETURN c.chunk_id AS id, c.content AS content, c.content_encoding AS encoding",
        write=False,
    )
    return {r["id"]: (r["content"], r["encoding"]) for r in rows}


def _assert_graph_exact(sink: KnowledgeGraphSink, chunks: Sequence[Chunk]) -> None:
    stored = _graph_contents(sink)
    assert {k: decode_content(*v) for k, v in stored.items()} == {c.chunk_id: c.content for c in chunks}
    for chunk in chunks:  # as is (readable) unless a NUL forced the escaped form
        content, encoding = stored[chunk.chunk_id]
        assert "\x00" not in content
        assert (encoding == ESCAPED) == ("\x00" in chunk.content)
        if encoding is None:
            assert content == chunk.content
    assert sink.content_hashes() == _expected_hashes(chunks)
    assert sink.content_hashes(chunks[0].document_id) == _expected_hashes(chunks)


def test_graph_holds_hostile_content_exactly(make_doc: MakeDoc, graph: KnowledgeGraphSink) -> None:
    document, chunks = make_doc("doc_hostile", HOSTILE)
    graph.upsert(document, chunks)
    _assert_graph_exact(graph, chunks)
    graph.upsert(document, chunks)  # an unchanged re-write leaves every node as it was
    _assert_graph_exact(graph, chunks)
    assert graph.content_hashes("absent") == {}


@EXAMPLES
@given(pieces=PIECES)
def test_graph_holds_any_content_exactly(
    make_doc: MakeDoc, graph: KnowledgeGraphSink, pieces: list[str]
) -> None:
    """With the real spaCy extractor: any entity it finds in any text is stored too (an entity key that
    ended in a space once crashed FalkorDB), and every entity links back to these chunks only."""
    document, chunks = make_doc("doc_any", pieces)
    graph.upsert(document, chunks)
    _assert_graph_exact(graph, chunks)
    ids = {c.chunk_id for c in chunks}
    linked = graph.backend.run("MATCH (e:Entity) RETURN e.source_chunk_ids AS ids", write=False)
    assert all(set(row["ids"]) <= ids for row in linked)


def test_graph_rewrite_restores_altered_content_and_its_marker(
    make_doc: MakeDoc, graph: KnowledgeGraphSink
) -> None:
    """What the repair relies on: a re-write puts back content and `content_encoding` a node lost or gained."""
    document, chunks = make_doc("doc_fix", ["plain \\0 text", "with a NUL \x00 here"])
    graph.upsert(document, chunks)
    plain, escaped = chunks
    run = graph.backend.run
    # The old bug (NUL dropped, no marker), and a stray marker on a node holding plain text.
    run(
        "MATCH (c:Chunk {chunk_id: $id}) SET c.content = $text REMOVE c.content_encoding",
        {"id": escaped.chunk_id, "text": escaped.content.replace("\x00", "")},
    )
    run("MATCH (c:Chunk {chunk_id: $id}) SET c.content_encoding = $e", {"id": plain.chunk_id, "e": ESCAPED})
    hashes = graph.content_hashes()
    assert hashes[escaped.chunk_id] != sha256_hex(escaped.content)
    assert hashes[plain.chunk_id] != sha256_hex(plain.content)  # "\0" now decodes to a NUL
    graph.upsert(document, chunks)
    _assert_graph_exact(graph, chunks)


def test_graph_reports_undecodable_or_missing_content_as_no_hash(
    make_doc: MakeDoc, graph: KnowledgeGraphSink
) -> None:
    document, chunks = make_doc("doc_odd", ["first", "second", "third"])
    graph.upsert(document, chunks)
    run = graph.backend.run
    run("MATCH (c:Chunk {chunk_id: $id}) SET c.content_encoding = 'rot13'", {"id": chunks[0].chunk_id})
    run("MATCH (c:Chunk {chunk_id: $id}) REMOVE c.content", {"id": chunks[1].chunk_id})
    assert graph.content_hashes() == {
        chunks[0].chunk_id: "",
        chunks[1].chunk_id: "",
        chunks[2].chunk_id: sha256_hex("third"),
    }


def test_escaped_form_round_trips_and_refuses_what_it_never_writes() -> None:
    for text in ["", "plain", "\\", "\x00", "\\0", "\x000", "\\\x00\\\\0\x00\x00"]:
        stored, encoding = encode_content(text)
        assert "\x00" not in stored and decode_content(stored, encoding) == text
    assert encode_content("no NUL \\0") == ("no NUL \\0", None)
    for bad in ["trailing \\", "unknown \\n escape"]:
        with pytest.raises(ValueError, match="invalid escape"):
            decode_content(bad, ESCAPED)
    with pytest.raises(ValueError, match="unknown content_encoding"):
        decode_content("x", "base64")


# --- lone surrogates ----------------------------------------------------------------------------------


def test_every_sink_refuses_a_lone_surrogate_before_writing(
    make_doc: MakeDoc, qdrant: QdrantSink, bm25: BM25Sink, graph: KnowledgeGraphSink
) -> None:
    good = make_doc("doc_good", ["probe fine"])
    bad = make_doc("doc_bad", ["probe fine", "probe broken \ud800 here"])
    sinks: list[Sink] = [qdrant, bm25, graph]
    for sink in sinks:
        with pytest.raises(InvalidRequest, match=r"lone surrogate U\+D800 at character 13"):
            sink.prepare([good, bad])
        with pytest.raises(ValueError, match="the stores cannot hold it exactly"):
            sink.upsert(*bad)
        assert sink.chunk_ids() == set()
        sink.upsert(*good)  # the rest still goes through
        assert sink.chunk_ids() == {good[1][0].chunk_id}
