"""Per-sink tasks for the two-phase write: prepare (compute, no store touched), then write.

One generic task per phase, with the sink name in the task run name, so the flow fans one batch out to
all sinks with `.submit` and the UI shows `prepare[vectors]`, `write[graph]`, ... A prepare failure on a
batch is retried per document to find the bad ones, so one poisoned document does not block its batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from sinks.base import DocumentChunks, Prepared
from tasks import metrics
from tasks.chunk_store import ChunkKey
from tasks.resources import RunConfig

WRITE_RETRY_DELAYS = [1, 4, 10]


@dataclass
class PrepareOutcome:
    """What a sink prepared (None when nothing was preparable) and the documents it could not prepare."""

    sink: str
    prepared: Prepared | None
    document_ids: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def load_batch(keys: list[ChunkKey], run: RunConfig) -> list[DocumentChunks]:
    return run.chunk_store().load_many(keys)


@task(name="prepare", cache_policy=NO_CACHE, task_run_name="prepare[{sink_name}]")
def prepare_sink(sink_name: str, keys: list[ChunkKey], run: RunConfig) -> PrepareOutcome:
    """Prepare the batch for one sink; on failure, find the failing documents and prepare the others."""
    sink = run.open_sinks()[sink_name] if sink_name in run.sinks else None
    if sink is None:
        raise ValueError(f"sink {sink_name!r} is not part of this run ({run.sinks})")
    batch = load_batch(keys, run)
    with metrics.timed("prepare", sink_name):
        try:
            return PrepareOutcome(sink_name, sink.prepare(batch), [k.document_id for k in keys])
        except Exception as exc:
            if len(batch) == 1:
                return PrepareOutcome(sink_name, None, [], {keys[0].document_id: _describe(sink_name, exc)})
            get_run_logger().warning(
                "prepare[%s] failed for a batch of %d, isolating: %s", sink_name, len(batch), exc
            )
        failed: dict[str, str] = {}
        good: list[DocumentChunks] = []
        for item in batch:
            try:
                sink.prepare([item])
                good.append(item)
            except Exception as exc:
                failed[item[0].document_id] = _describe(sink_name, exc)
        prepared = sink.prepare(good) if good else None
        return PrepareOutcome(sink_name, prepared, [doc.document_id for doc, _ in good], failed)


@task(
    name="write",
    cache_policy=NO_CACHE,
    task_run_name="write[{sink_name}]",
    retries=len(WRITE_RETRY_DELAYS),
    retry_delay_seconds=WRITE_RETRY_DELAYS,
)
def write_sink(sink_name: str, prepared: Prepared, run: RunConfig) -> int:
    """Store a prepared batch (idempotent, so a retry after a half-done write is safe)."""
    sink = run.open_sinks()[sink_name]
    with metrics.timed("write", sink_name):
        written = sink.write(prepared)
    metrics.CHUNKS_WRITTEN.labels(sink=sink_name).inc(written)
    return written


def _describe(sink_name: str, exc: BaseException) -> str:
    return f"prepare[{sink_name}] failed: {type(exc).__name__}: {exc}"
