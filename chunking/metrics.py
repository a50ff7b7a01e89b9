"""Prometheus metrics of the chunking library, registered once on the default registry.

Module-level objects, because prometheus_client refuses to register a metric name twice; importing this
module is the single registration point (Python imports a module once per process).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

CHUNKING_DURATION = Histogram(
    "unichunk_chunking_duration_seconds",
    "Time to chunk one document.",
    ["strategy"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
CHUNKS_CREATED = Counter("unichunk_chunks_created", "Chunks produced by the chunking library.", ["strategy"])
CHUNK_SIZE_TOKENS = Histogram(
    "unichunk_chunk_size_tokens",
    "Token count of each chunk produced.",
    ["strategy"],
    buckets=(16, 32, 64, 128, 192, 256, 384, 512, 640, 768, 896, 1024, 1200, 1536, 2048),
)


def record(strategy: str, seconds: float, token_counts: list[int]) -> None:
    """Record one chunking run: its duration, how many chunks it made and each chunk's size."""
    CHUNKING_DURATION.labels(strategy=strategy).observe(seconds)
    CHUNKS_CREATED.labels(strategy=strategy).inc(len(token_counts))
    sizes = CHUNK_SIZE_TOKENS.labels(strategy=strategy)
    for count in token_counts:
        sizes.observe(count)
