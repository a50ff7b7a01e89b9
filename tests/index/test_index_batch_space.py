"""The disk-space estimate a batch is checked against (`unichunk.index.batch_space`) is never below what
the write really takes: for any batch of documents (any number, any chunk sizes, any text, replacements of
stored documents included), the blocks the real qdrant-edge store allocates for it stay within the
estimate. An estimate below that would let a batch start on a disk it then fills, where qdrant-edge's
memory-mapped writes end in SIGBUS.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from documents import make_document
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.index.batch_space import batch_bytes
from unichunk.index.sink_writes import PrepareOutcome
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.base import Embedder
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink

DIMENSION = 384  # MiniLM's


class DigestEmbedder(Embedder):
    """Deterministic vectors of MiniLM's size from SHA-256: the store's disk use does not depend on what the
    numbers mean, and a model would make each example cost seconds."""

    name = "digest-384"
    max_tokens = 100_000

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
            vectors.append([digest[i % 32] / 255.0 + 0.01 for i in range(DIMENSION)])
        return vectors

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def allocated(directory: Path) -> int:
    """Bytes the files under `directory` take on disk (blocks allocated, not apparent sizes)."""
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


# A piece is a chunk's text: short or long, any printable text (non-ASCII costs more bytes than characters).
pieces = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=3000).filter(
    lambda s: s.strip() == s and s
)
batches = st.lists(
    st.tuples(st.integers(0, 5), st.lists(pieces, min_size=1, max_size=12)), min_size=1, max_size=6
)


def test_a_batch_never_takes_more_disk_than_its_estimate(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    sink = EdgeQdrantSink(SinkSettings(data_dir=data_dir, qdrant_url=None), DigestEmbedder())
    try:
        sink.write(sink.prepare([make_document("warm-up", ["the store's files exist from here on"])]))

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(batches)
        def check(batch: list[tuple[int, list[str]]]) -> None:
            documents = {f"doc-{n}": texts for n, texts in batch}  # a document given twice: the last
            prepared = sink.prepare([make_document(name, texts) for name, texts in documents.items()])
            outcome = PrepareOutcome("vectors", prepared, list(documents))
            estimate = batch_bytes({"vectors": outcome}, {"vectors"})
            before = allocated(data_dir)
            sink.write(prepared)  # documents seen before are replaced: stale points deleted too
            grown = allocated(data_dir) - before
            assert grown <= estimate, (grown, estimate, prepared.chunk_count)

        check()
    finally:
        sink.close()
