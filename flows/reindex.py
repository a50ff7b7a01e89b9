"""The `reindex` flow (cron): the full incremental scan, then prove and restore sink alignment."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, get_run_logger
from prefect.states import State

from unichunk.engine.batches import drop_expired, finish, sinks_context, timed_summary
from unichunk.engine.params import IngestParams, IngestSummary
from unichunk.engine.run_names import reindex_run_name
from unichunk.engine.shards import cancel_shard_runs
from unichunk.flows.ingest import sync_source
from unichunk.flows.run_guard import guarded
from unichunk.flows.run_settings import flow_metrics
from unichunk.tasks.alignment import repair_alignment, verify_alignment_task


@flow(name="reindex", flow_run_name=reindex_run_name, on_cancellation=[cancel_shard_runs])
@guarded
def reindex(params: IngestParams) -> IngestSummary | State:
    """Scan like `ingest`, verify every sink against the status table (chunk IDs and each chunk's content
    hash) and repair mismatches, then drop retired index generations whose retention ran out. With
    `shards=N` the scan is split across workers; the check and the repair run once, here, after it."""
    summary, run, problems = sync_source("reindex", params)
    if not params.dry_run:
        with timed_summary(summary, "reindex", flow_metrics()), sinks_context(run, dry_run=False):
            report = verify_alignment_task(run)
            if not report.ok:
                repair = repair_alignment(run, report)
                summary.repaired = asdict(repair)
                report = verify_alignment_task(run)
            summary.alignment = report.as_dict()
        if not report.ok:
            problems.append(
                f"{report.mismatch_count()} chunk(s) still missing, extra or altered after repair"
            )
        dropped = drop_expired(run.settings)  # retired generations past their retention
        if dropped:
            get_run_logger().info("dropped retired generation(s) %s", dropped)
    return finish(summary, problems, pushed=flow_metrics())
