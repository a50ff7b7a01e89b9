"""Composed chunk vectors: overlapping chunks are embedded once per segment, and each chunk's vector is the
normalised sum of its segments' token states, with real MiniLM (torch and ONNX Runtime) on qdrant-edge.

What a user relies on: the model reads each segment and each heading chain once (not each chunk), the
stored vector is exactly the composition of its segments (so a chunk that is one segment gets its own
whole vector), `model_input=chunks` gives whole chunks' vectors, and the two kinds never share an index
generation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from overlapping import TEXT, CountingMiniLM, overlapping_chunks

from unichunk.chunking.models import Document
from unichunk.chunking.segments import segment_batch
from unichunk.index.run import index_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.sink import open_vector_sink


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("backend", ["torch", "onnx", "torch-bf16"])
def test_each_segment_is_embedded_once_and_chunks_are_their_sums(tmp_path: Path, backend: str) -> None:
    # ONNX fp32 is checked against torch's sums (the same vectors); bfloat16 against its own
    reference = MiniLMEmbedder(backend="torch-bf16" if backend == "torch-bf16" else "torch")
    document = Document(document_id="d", text=TEXT)
    chunks = overlapping_chunks(document, whole=True)
    embedder = CountingMiniLM(backend=backend)
    settings = SinkSettings(data_dir=tmp_path)
    with open_vector_sink(settings, embedder) as sink:
        prepared = sink.prepare([(document, chunks)])
    segments = segment_batch([(document, chunks)], headings=True)
    # the heading once, each of the four pieces once: 5 texts where whole chunks would be 4 longer ones
    assert sorted(embedder.seen) == sorted(segments.texts) and len(segments.texts) == 5
    assert sum(len(t) for t in embedder.seen) < sum(len(c.embed_text) for c in chunks)
    assert prepared.stats["embedded_chunks"] + prepared.stats["reused_chunks"] == len(chunks)
    sums = {
        t: np.asarray(v) for t, v in zip(segments.texts, reference.embed_sums(segments.texts), strict=True)
    }
    for chunk, own in zip(chunks, segments.members, strict=True):
        expected = _unit(sum(sums[segments.texts[i]] for i in own))
        assert np.allclose(prepared.payload[chunk.chunk_id], expected, atol=1e-4)
    # a segment's sum, normalised, is the text's own vector: so is a chunk that is one segment
    whole = np.asarray(reference.embed(segments.texts))
    composed_alone = np.stack([_unit(sums[t]) for t in segments.texts])
    assert np.allclose(composed_alone, whole, atol=1e-4)
    # composed and whole vectors of an overlapping chunk agree in direction, not in every digit
    own_whole = np.asarray(reference.embed([chunks[1].embed_text]))[0]
    assert 0.8 < float(np.dot(prepared.payload["c1"], own_whole)) < 0.9999


def test_whole_chunk_vectors_stay_a_setting_and_a_generation_of_their_own(tmp_path: Path) -> None:
    document = Document(document_id="d", text=TEXT)
    chunks = overlapping_chunks(document, whole=True)
    embedder = CountingMiniLM()
    settings = SinkSettings(data_dir=tmp_path, model_input="chunks")
    with open_vector_sink(settings, embedder) as sink:
        prepared = sink.prepare([(document, chunks)])
    assert sorted(embedder.seen) == sorted(c.embed_text for c in chunks)
    whole = np.asarray(MiniLMEmbedder().embed([c.embed_text for c in chunks]))
    assert np.allclose([prepared.payload[c.chunk_id] for c in chunks], whole, atol=1e-4)
    composed = index_settings(SinkSettings(data_dir=tmp_path))
    assert composed["model_input"] == "segments"
    assert "model_input" not in index_settings(settings)  # whole chunks keep the fingerprint they had
    openai_llm = SinkSettings(data_dir=tmp_path, embedder="openai", extractor="llm")
    assert "model_input" not in index_settings(openai_llm)


def test_a_second_prepare_reuses_every_segment(tmp_path: Path) -> None:
    document = Document(document_id="d", text=TEXT)
    chunks = overlapping_chunks(document, whole=True)
    settings = SinkSettings(data_dir=tmp_path)
    with open_vector_sink(settings, CountingMiniLM()) as sink:
        first = sink.prepare([(document, chunks)])
    again = CountingMiniLM()
    with open_vector_sink(settings, again) as sink:
        second = sink.prepare([(document, chunks)])
    assert again.seen == []
    assert (second.stats["embedded_chunks"], second.stats["reused_chunks"]) == (0, len(chunks))
    # the fourth chunk holds nothing the first three did not: it reuses their segments in the same batch
    assert (first.stats["embedded_chunks"], first.stats["reused_chunks"]) == (3, 1)
    assert second.payload == first.payload  # the very float32 values, from the cache
