"""The `chunk_batch` task: one batch of listed items loaded, compared and chunked (`unichunk.index.chunk_batch`).

Retried once: a document that cannot be read or chunked fails alone inside the task, so what escapes it
is the batch's own trouble (the status store locked past its busy timeout, a disk hiccup), and a second
attempt is safe: it loads and compares the files again (a document the first marked `processing` is not
current, so it is not skipped), reuses the chunks the first flushed to the cache (keyed by content hash)
and re-writes the same status rows. No `timeout_seconds`: the
task runs in a worker thread, where Prefect 3.8 cannot interrupt a blocking read (the timeout fires only
after it returns) and warns on every such run.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from unichunk.chunking.sources import SourceItem
from unichunk.index.chunk_batch import ChunkBatchResult, chunk_items
from unichunk.index.run import RunConfig


@task(
    name="chunk_batch",
    cache_policy=NO_CACHE,
    task_run_name="chunk_batch[{batch_label}]",
    retries=1,
    retry_delay_seconds=2,
)
def chunk_batch(
    items: list[SourceItem], run: RunConfig, batch_label: str = "", dry_run: bool = False
) -> ChunkBatchResult:
    """Load, skip unchanged, chunk and cache one batch; dry_run only compares."""
    result = chunk_items(items, run, dry_run=dry_run)
    get_run_logger().info(result.line(batch_label))
    return result
