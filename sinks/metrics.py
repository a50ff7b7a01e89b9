"""Prometheus metrics shared by every sink, registered once in the default registry.

Defined in one module so each metric is registered exactly once per process (prometheus_client refuses
a second registration of the same name) and so every sink labels them the same way (`sink` = its name).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from unichunk.chunking.metrics import DURATION_BUCKETS

SINK_OPERATION_SECONDS = Histogram(
    "unichunk_sink_operation_duration_seconds",
    "Time a sink spends in one operation (prepare, write, delete, search).",
    ["sink", "operation"],
    buckets=DURATION_BUCKETS,
)

SINK_CHUNKS_WRITTEN = Counter(
    "unichunk_sink_chunks_written",
    "Chunks stored by a sink (re-writes of unchanged chunks included).",
    ["sink"],
)

SINK_CHUNKS_REMOVED = Counter(
    "unichunk_sink_chunks_removed",
    "Chunks removed by a sink: stale chunks of re-written documents and deleted documents.",
    ["sink"],
)

EMBEDDER_TRUNCATED_CHUNKS = Counter(
    "unichunk_embedder_truncated_chunks",
    "Chunks whose embed text exceeded the embedder's max input, so only its start was embedded.",
    ["embedder"],
)

EMBEDDER_SECONDS = Histogram(
    "unichunk_embedder_duration_seconds",
    "Time to embed one batch of texts.",
    ["embedder"],
    buckets=DURATION_BUCKETS,
)
