"""The alignment tasks: verify the stores against the status table, repair them, undo a failed write.

Called directly by the flows (not submitted), so they run in the flow's thread. Retries: `verify` only
reads, so a store's blip during the nightly check is retried rather than failing the reindex; `repair`
and `restore_previous` re-write the expected (or previous) version by chunk ID and delete what should
not be there, both idempotent, so running them again after a partial attempt converges. A timeout only
on `verify`, the one safe to interrupt anywhere: an interrupted repair or undo would leave a store
half-way, which is worse than waiting (the stores' clients bound each call, see `unichunk.tasks.sink_io`).
"""

from __future__ import annotations

from collections.abc import Sequence

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from unichunk.index.alignment import AlignmentReport, RepairResult, repair, verify_run
from unichunk.index.run import RunConfig
from unichunk.index.sink_writes import restore_previous

VERIFY_TIMEOUT_SECONDS = 3600  # reading every chunk ID and content hash back, for a very large index


@task(
    name="verify_alignment",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[5, 30],
    timeout_seconds=VERIFY_TIMEOUT_SECONDS,
)
def verify_alignment_task(run: RunConfig) -> AlignmentReport:
    """Compare each sink with the chunk IDs the status table expects, and each stored chunk's content with
    the hash in its ID; publish the mismatch gauges."""
    return verify_run(run)


@task(name="repair_alignment", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=10)
def repair_alignment(run: RunConfig, report: AlignmentReport) -> RepairResult:
    """Make each sink hold exactly the expected chunk IDs, with their exact content, again."""
    result = repair(run, report)
    get_run_logger().info(
        "repair: rewritten %s, deleted %s, errors %s", result.rewritten, result.deleted, result.errors
    )
    return result


@task(name="restore_previous", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def restore_previous_task(
    run: RunConfig, document_ids: Sequence[str], sink_names: Sequence[str]
) -> dict[str, str]:
    """After a failed write, put the sinks that did write back to each document's last good version."""
    errors = restore_previous(run, document_ids, sink_names)
    if errors:
        get_run_logger().warning("could not restore %d document(s): %s", len(errors), errors)
    return errors
