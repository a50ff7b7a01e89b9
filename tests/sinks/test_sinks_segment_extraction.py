"""spaCy once per segment: the graph sink reads each piece between chunk boundaries once and gives every
chunk its pieces' merged extraction, with the real model on a real FalkorDB graph.

Where chunk boundaries fall between sentences (as `auto` cuts them), a chunk's merged extraction holds the
entities and relation pairs reading it whole gives, with the same weights; each piece is read once however
many chunks hold it; a second prepare reads nothing; and `model_input=chunks` reads whole chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Block, Chunk, Document
from unichunk.chunking.segments import segment_batch, segment_chunk
from unichunk.index.run import index_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.backends import GraphBackend
from unichunk.sinks.graph.extraction import (
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    SpacyExtractor,
    entity_key,
    merge_extractions,
)
from unichunk.sinks.graph.sink import KnowledgeGraphSink
from unichunk.sinks.result_cache import ResultCache

SENTENCES = [
    "Margaret Okafor joined Microsoft in Seattle in 2015.",
    "At Microsoft she worked with Satya Nadella on Azure.",
    "Later Margaret Okafor moved to Google in London.",
    "Google and Microsoft compete in Seattle and London.",
    "Satya Nadella visited London with Margaret Okafor.",
    "The British Museum in London hosted Google for a day.",
]


class CountingSpacy(SpacyExtractor):
    """The real extractor, remembering every text it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        self.seen += [c.content for c in chunks]
        return super().extract(chunks)


def _chunks(text: str, spans: Sequence[tuple[int, int]]) -> list[Chunk]:
    """Chunks of document "d" at `spans` of `text`."""
    return [
        Chunk(
            chunk_id=f"c{i}",
            document_id="d",
            chunk_index=i,
            content=text[start:end],
            start_char=start,
            end_char=end,
            token_count=0,
            content_hash=sha256_hex(text[start:end]),
        )
        for i, (start, end) in enumerate(spans)
    ]


def _document() -> tuple[Document, list[Chunk]]:
    """Chunks of three sentences, each starting one sentence after the last: every boundary between two."""
    text = " ".join(SENTENCES)
    starts = [text.index(s) for s in SENTENCES] + [len(text)]
    spans = [
        (starts[i], starts[i + 3] - (1 if i + 3 < len(SENTENCES) else 0)) for i in range(len(SENTENCES) - 2)
    ]
    return Document(document_id="d", text=text), _chunks(text, spans)


def _summary(extraction: Extraction) -> tuple[set[str], dict[tuple[str, ...], float]]:
    entities = {entity_key(e.name) for e in extraction.entities}
    pairs = {
        tuple(sorted((entity_key(r.source), entity_key(r.target)))): r.weight for r in extraction.relations
    }
    return entities, pairs


def test_chunks_get_what_reading_them_whole_gives_and_each_piece_is_read_once(
    graph_backend: GraphBackend,
) -> None:
    document, chunks = _document()
    extractor = CountingSpacy()
    sink = KnowledgeGraphSink(graph_backend, extractor, segments=True)
    merged = sink.prepare([(document, chunks)])
    segments = segment_batch([(document, chunks)], headings=False)
    assert sorted(extractor.seen) == sorted(segments.texts)  # each piece once
    assert sum(map(len, extractor.seen)) < sum(len(c.content) for c in chunks)
    whole = KnowledgeGraphSink(graph_backend, SpacyExtractor(), segments=False)
    by_chunk = whole.prepare([(document, chunks)])
    # the document's graph as the sink will write it: the same entities, relations, weights, descriptions
    assert merged.payload == by_chunk.payload
    per_chunk = SpacyExtractor().extract(chunks)
    composed = [
        merge_extractions(
            c.chunk_id, SpacyExtractor().extract([segment_chunk(segments.texts[i]) for i in own])
        )
        for c, own in zip(chunks, segments.members, strict=True)
    ]
    for chunk_wise, piece_wise in zip(per_chunk, composed, strict=True):
        assert _summary(piece_wise) == _summary(chunk_wise)
    assert merged.stats["extracted_chunks"] + merged.stats["reused_chunks"] == len(chunks)


def test_a_second_prepare_reads_nothing_and_whole_chunks_stay_a_setting(
    graph_backend: GraphBackend, tmp_path: Path
) -> None:
    document, chunks = _document()
    settings = SinkSettings(data_dir=tmp_path)
    extractor = CountingSpacy()
    cache = ResultCache.open(settings, "extractions", extractor.fingerprint)
    first = KnowledgeGraphSink(graph_backend, extractor, cache=cache, segments=True).prepare(
        [(document, chunks)]
    )
    again = CountingSpacy()
    second = KnowledgeGraphSink(graph_backend, again, cache=cache, segments=True).prepare(
        [(document, chunks)]
    )
    assert again.seen == []
    assert (second.stats["extracted_chunks"], second.stats["reused_chunks"]) == (0, len(chunks))
    assert first.stats["extracted_chunks"] == len(chunks)  # every chunk starts a sentence of its own
    assert second.payload == first.payload
    whole = CountingSpacy()
    KnowledgeGraphSink(graph_backend, whole, segments=False).prepare([(document, chunks)])
    assert whole.seen == [c.content for c in chunks]
    assert index_settings(settings)["model_input"] == "segments"
    assert "model_input" not in index_settings(SinkSettings(data_dir=tmp_path, model_input="chunks"))


def test_merging_keeps_the_first_mention_and_adds_up_relation_weights() -> None:
    def entity(name: str, description: str) -> ExtractedEntity:
        return ExtractedEntity(name, "PERSON", description, "segment")

    first = Extraction(
        "s1",
        (entity("Okafor", "first sentence"),),
        (ExtractedRelation("Okafor", "Nadella", "meet", "they met", 2.0, "s1"),),
    )
    second = Extraction(
        "s2",
        (entity("OKAFOR", "later sentence"), entity("Nadella", "his sentence")),
        (ExtractedRelation("Nadella", "Okafor", "visit", "he visited", 1.0, "s2"),),
    )
    merged = merge_extractions("chunk", [first, second])
    assert [(e.name, e.description, e.chunk_id) for e in merged.entities] == [
        ("Okafor", "first sentence", "chunk"),
        ("Nadella", "his sentence", "chunk"),
    ]
    assert [(r.source, r.target, r.keywords, r.weight, r.chunk_id) for r in merged.relations] == [
        ("Okafor", "Nadella", "meet", 3.0, "chunk")
    ]
    assert merge_extractions("chunk", []) == Extraction("chunk")


def test_spacy_is_not_given_code_blocks_read_in_segments_or_whole(graph_backend: GraphBackend) -> None:
    """Names in a code block (`Block` of kind `code`) are not the graph's; the prose around it is read, in
    segments and in whole chunks alike; an extractor that may read code (`reads_code`) is given it."""
    prose = "Margaret Okafor joined Microsoft in Seattle."
    code = 'let author = "Satya Nadella"; // Google, London'
    text = f"{prose}\n\n{code}\n\nLater she visited Paris."
    start = text.index(code)
    document = Document(
        document_id="d", text=text, blocks=(Block(kind="code", start=start, end=start + len(code)),)
    )
    chunks = _chunks(text, [(0, start + len(code)), (start, len(text))])
    for segments in (True, False):
        extractor = CountingSpacy()
        prepared = KnowledgeGraphSink(graph_backend, extractor, segments=segments).prepare(
            [(document, chunks)]
        )
        names = {entity_key(m["name"]) for graph in prepared.payload.values() for m in graph.mentions}
        assert {"margaret okafor", "microsoft", "seattle", "paris"} <= names, names
        assert not names & {"satya nadella", "google", "london"}, names
        assert not [t for t in extractor.seen if "Nadella" in t]
    reading = CountingSpacy()
    reading.reads_code = True
    KnowledgeGraphSink(graph_backend, reading, segments=True).prepare([(document, chunks)])
    assert [t for t in reading.seen if "Nadella" in t]
