"""The `rebuild` flow: build a new index generation beside the live one, prove it, then switch readers.

Used when the chunking settings, the embedder or the extractor change. Readers keep answering from the
live generation for the whole build (nothing here writes to it). The new generation is switched to only
if every document made it, every store holds exactly the expected chunk IDs, and it does not hold fewer
documents than the live one; otherwise it stays beside the live one, marked failed, and a re-run resumes
it (its own status table skips what is already done).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

from prefect import flow, get_run_logger
from prefect.states import Failed, State

from chunking.sources import Source
from flows.params import IngestSummary, RebuildParams, RebuildSummary
from flows.pipeline import delete_missing, drop_expired, process_items, sinks_context, timed_summary
from index.generations import generation_counts, live_generation, registry_of
from index.run import RunConfig
from sinks.config import SinkSettings
from tasks.alignment import repair_alignment, verify_alignment_task
from tasks.generations import switch_live


def _sync(source: Source, run: RunConfig, flow_name: str, batch_size: int) -> IngestSummary:
    """One incremental pass of the source into the new generation (deleting what the source dropped)."""
    summary = IngestSummary(flow=flow_name)
    with timed_summary(summary, flow_name):
        items = source.list()
        summary.listed = len(items)
        process_items(items, run, summary, batch_size=batch_size, dry_run=False)
        delete_missing(source, items, run, summary, dry_run=False)
    return summary


def readiness_problems(summary: RebuildSummary, max_document_loss: float) -> list[str]:
    """Why the new generation must not go live (empty when it may)."""
    problems = []
    for part in (summary.build, summary.catch_up):
        if part is not None and part.failed:
            problems.append(f"{len(part.failed)} document(s) failed in {part.flow}")
    if summary.alignment is not None and not summary.alignment.get("ok", False):
        wrong = {
            name: f"{s['missing']} missing, {s['extra']} extra"
            for name, s in summary.alignment.get("sinks", {}).items()
            if s["missing"] or s["extra"]
        }
        problems.append(f"alignment check found mismatches: {wrong}")
    new, live = summary.counts.get("new", {}), summary.counts.get("live")
    if live is not None and new.get("processed", 0) < live.get("processed", 0) * (1 - max_document_loss):
        problems.append(
            f"the new generation has {new.get('processed', 0)} documents, the live one "
            f"{live.get('processed', 0)} (allowed loss {max_document_loss:.0%})"
        )
    return problems


@flow(name="rebuild")
def rebuild(params: RebuildParams) -> RebuildSummary | State:
    """Build the generation of `params.strategy` + the current sink settings, verify it, switch to it."""
    logger = get_run_logger()
    base = RunConfig(params.strategy, SinkSettings())
    run = base.pinned()
    registry = registry_of(base.settings)
    live = live_generation(base.settings)
    summary = RebuildSummary(
        generation=run.generation_id,
        fingerprint=run.generation_fingerprint,
        previous=live.generation_id if live else None,
    )
    if live is not None and live.generation_id == run.generation_id:
        summary.outcome = "already-live"
        logger.info(summary.line())
        return summary
    source = params.source.build()
    registry.begin_build(run.generation_id, run.generation_fingerprint, run.describe(), len(source.list()))
    with sinks_context(run, dry_run=False):
        summary.build = _sync(source, run, "rebuild", params.batch_size)
        # What changed in the source while the build ran (webhooks updated only the live generation).
        summary.catch_up = _sync(source, run, "rebuild-catch-up", params.batch_size)
        report = verify_alignment_task(run)
        if not report.ok:  # as reindex does: re-write what a store lost, then look again
            summary.repaired = asdict(repair_alignment(run, report))
            report = verify_alignment_task(run)
        summary.alignment = report.as_dict()
        summary.counts["new"] = generation_counts(base.settings, run.generation_id)
        if live is not None:
            summary.counts["live"] = generation_counts(base.settings, live.generation_id)
        summary.reasons = readiness_problems(summary, params.max_document_loss)
        if summary.reasons:
            registry.mark_failed(run.generation_id, "; ".join(summary.reasons))
            logger.error(summary.line())
            return Failed(
                message=f"not switched, the live generation is unchanged; re-run to resume: {summary.line()}",
                data=summary,
            )
        if not params.switch:
            registry.mark_ready(run.generation_id)
            summary.outcome = "built"
            logger.info(summary.line())
            return summary
        switch_live(run, timedelta(hours=params.retention_hours))
    summary.outcome = "switched"
    summary.dropped = drop_expired(base.settings)
    logger.info(summary.line())
    return summary
