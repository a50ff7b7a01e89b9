"""The `chunk_batch` task: one batch of listed items loaded, compared and chunked (`index.chunk_batch`)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from chunking.sources import SourceItem
from index.chunk_batch import ChunkBatchResult, chunk_items
from index.run import RunConfig


@task(name="chunk_batch", cache_policy=NO_CACHE, task_run_name="chunk_batch[{batch_label}]")
def chunk_batch(
    items: list[SourceItem], run: RunConfig, batch_label: str = "", dry_run: bool = False
) -> ChunkBatchResult:
    """Load, skip unchanged, chunk and cache one batch; dry_run only compares."""
    result = chunk_items(items, run, dry_run=dry_run)
    get_run_logger().info(result.line(batch_label))
    return result
