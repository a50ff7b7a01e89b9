"""An ingest batch under the `semantic` strategy: the run hands the configured embedder (the real MiniLM) to
the chunker, records which one in the chunk fingerprint, and caches chunks that fit it, offsets exact."""

from __future__ import annotations

from pathlib import Path

from texts import GARDEN, TOPICS

from unichunk.chunking.config import MINILM_MAX_TOKENS, ChunkStrategy
from unichunk.chunking.embedding_fit import embedding_counter
from unichunk.chunking.sources import DirectorySource
from unichunk.index.chunk_batch import chunk_items
from unichunk.index.run import RunConfig
from unichunk.sinks.config import SinkSettings


def test_a_semantic_batch_is_cut_with_the_configured_embedder(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    harbour, garden = " ".join(TOPICS), " ".join(GARDEN)
    (folder / "two.txt").write_text(f"{harbour}\n\n{garden}\n", encoding="utf-8")
    run = RunConfig(ChunkStrategy(name="semantic"), SinkSettings(data_dir=tmp_path / "data"))
    assert run.strategy.semantic_model == run.settings.embedder_identity()  # "+bf16" where auto picks it
    assert run.strategy.semantic_model.startswith("all-MiniLM-L6-v2")
    result = chunk_items(DirectorySource(folder).list(), run)
    assert result.failed == {} and len(result.chunked) == 1
    document, chunks = run.chunk_cache().load(result.keys[0])
    assert [c.content for c in chunks] == [harbour, garden]  # the boundary where the topic changes
    assert all(document.text[c.start_char : c.end_char] == c.content for c in chunks)
    assert all(embedding_counter("minilm").fits_many([c.embed_text for c in chunks], MINILM_MAX_TOKENS))
