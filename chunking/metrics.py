"""Prometheus metrics of the chunking library, registered once on the default registry.

Module-level objects, because prometheus_client refuses to register a metric name twice; importing this
module is the single registration point (Python imports a module once per process).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram, disable_created_metrics

# The bucket bounds of every duration histogram in the project (chunking, tasks, sink operations, the
# embedder), written once: from 5 ms to 10 min, so a 22 s `prepare[vectors]` or a 5-minute rebuild step
# lands in a finite bucket and quantiles stay meaningful.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

# No `*_created` series: they double the series count and nothing here reads them (every process that
# records a metric imports this module, the lowest of the metric modules).
disable_created_metrics()

CHUNKING_DURATION = Histogram(
    "unichunk_chunking_duration_seconds",
    "Time to chunk one document.",
    ["strategy"],
    buckets=DURATION_BUCKETS,
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
