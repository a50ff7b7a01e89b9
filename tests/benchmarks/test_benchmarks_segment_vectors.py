"""The retrieval benchmarks embed our chunks as the shipped pipeline does and the baselines' whole.

With `model_input=segments` (the default) the vector sink composes an overlapping chunk's vector from its
segments' token sums (`Embedder.embed_sums`); the benchmarks wrap MiniLM in `CachedEmbedder`, which must
offer those sums (cached apart from vectors), or every sink using it silently embeds whole chunks. A
baseline chunker is measured as its framework would embed it: whole chunks. Real MiniLM, real Qdrant.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from overlapping import TEXT, CountingMiniLM, overlapping_chunks
from qdrant_client import QdrantClient

from benchmarks.fusion_tuning import lists_key
from benchmarks.retrieval_quality import CachedEmbedder, model_input
from unichunk.chunking.models import Document
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink
from unichunk.sinks.vectors.sink import open_vector_sink


def test_ours_are_composed_as_the_pipeline_composes_them_and_baselines_are_whole(tmp_path: Path) -> None:
    document = Document(document_id="d", text=TEXT)
    chunks = overlapping_chunks(document)
    with open_vector_sink(SinkSettings(data_dir=tmp_path / "shipped"), MiniLMEmbedder()) as sink:
        shipped = sink.prepare([(document, chunks)]).payload  # the pipeline's own sink and embedder
    cached = CachedEmbedder(CountingMiniLM(), tmp_path / "cache")

    def benchmark_vectors(baseline: bool) -> dict[str, list[float]]:
        """What `retrieval_quality.score_config` stores for a configuration (its sink settings)."""
        settings = SinkSettings(
            data_dir=tmp_path / f"bench-{baseline}", qdrant_collection="b", model_input=model_input(baseline)
        )
        sink = QdrantSink(settings, embedder=cached, client=QdrantClient(":memory:"))
        try:
            return sink.prepare([(document, chunks)]).payload
        finally:
            sink.close()

    ours = benchmark_vectors(baseline=False)
    for chunk in chunks:
        assert np.allclose(ours[chunk.chunk_id], shipped[chunk.chunk_id], atol=1e-5)
    # the model read the heading once and each of the four pieces once, not the three chunks
    assert len(cached.inner.seen) == 5 and cached.embedded == 5
    baseline = benchmark_vectors(baseline=True)
    whole = MiniLMEmbedder().embed([c.embed_text for c in chunks])
    assert np.allclose([baseline[c.chunk_id] for c in chunks], whole, atol=1e-5)
    assert sorted(cached.inner.seen[5:]) == sorted(c.embed_text for c in chunks)
    # an overlapping chunk's composed vector is not its whole one: the two ways were told apart
    assert float(np.dot(ours["c1"], baseline["c1"])) < 0.9999


def test_token_sums_are_cached_apart_from_vectors_and_read_back_from_disk(tmp_path: Path) -> None:
    texts = [TEXT[:80], TEXT[80:170]]
    first = CachedEmbedder(CountingMiniLM(), tmp_path)
    sums = first.embed_sums(texts)
    vectors = first.embed(texts)  # the same texts: a cached sum must not answer for a vector
    assert first.inner.seen == texts + texts and first.embedded == 4
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert (np.linalg.norm(sums, axis=1) > 2.0).all()  # sums over every word piece, not unit vectors
    assert first.embed_sums(texts) == sums and first.inner.seen == texts + texts  # from memory
    second = CachedEmbedder(CountingMiniLM(), tmp_path)
    assert np.allclose(second.embed_sums(texts), sums, atol=1e-5)
    assert np.allclose(second.embed(texts), vectors, atol=1e-6)
    assert second.inner.seen == [] and second.embedded == 0  # both from the disk, each its own table
    assert second.composes and second.fingerprint == MiniLMEmbedder().fingerprint


def test_baselines_read_whole_chunks_and_cached_lists_are_keyed_by_what_ours_read(tmp_path: Path) -> None:
    assert model_input(baseline=True) == "chunks"
    assert model_input(baseline=True, ours_="segments") == "chunks"  # a baseline is never composed
    assert model_input(baseline=False) == SinkSettings.model_fields["model_input"].default == "segments"
    assert model_input(baseline=False, ours_="chunks") == "chunks"
    (tmp_path / "a.md").write_text("alpha beta", encoding="utf-8")
    questions = tmp_path / "q.csv"
    questions.write_text("question,references,corpus_id\n", encoding="utf-8")
    shipped = lists_key(tmp_path, questions, ["keywords", "vectors"])
    assert lists_key(tmp_path, questions, ["keywords", "vectors"], "segments") == shipped
    # lists ranked over whole-chunk vectors (all cached before this key existed) are not reused
    assert lists_key(tmp_path, questions, ["keywords", "vectors"], "chunks") != shipped
