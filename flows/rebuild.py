"""The `rebuild` flow: build a new index generation beside the live one, prove it, then switch readers.

Used when the chunking settings, the embedder or the extractor change. Readers keep answering from the
live generation for the whole build (nothing here writes to it). The new generation is switched to only
if every readable document made it, every store holds exactly the expected chunk IDs (with the content
each ID names), and it does not hold fewer documents than the live one; otherwise it stays beside the live
one, marked failed, and a re-run resumes it (its own status table skips what is already done). With a
`gate` (a questions file), both generations are evaluated on it before the switch, and the new one goes
live only if its character recall is nowhere worse than the live one's by more than the tolerance;
otherwise it is left ready beside the live one (`outcome` "gated", the reasons in `summary.gate`).

"Every readable document": a file the new generation cannot load that was unreadable (failed) or absent
in the live generation too is reported (`RebuildSummary.reported`), not a reason to refuse, as switching
loses nothing; else one bad file would block every rebuild for as long as it exists. A document the live
generation holds that the new one failed is real loss, and refuses the switch.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

from prefect import flow, get_run_logger
from prefect.states import State

from unichunk.engine.batches import RunStores, drop_expired, run_stores, timed_summary
from unichunk.engine.params import (
    FailedDocument,
    IngestSummary,
    RebuildParams,
    RebuildSummary,
    SourceParams,
    names,
)
from unichunk.engine.reports import failed_state, publish_evaluation, publish_rebuild
from unichunk.engine.run_names import rebuild_run_name
from unichunk.engine.sources import Listed, list_sources, sync_listed
from unichunk.engine.stop import RunInterrupted
from unichunk.flows.run_guard import guarded
from unichunk.flows.run_settings import flow_metrics, flow_settings, flow_strategy
from unichunk.index.generations import generation_counts, live_generation, registry_of
from unichunk.index.run import RunConfig
from unichunk.index.status import DocumentStatus, StatusStore
from unichunk.retrieval.evaluation.questions import load_questions
from unichunk.retrieval.evaluation.run import Target, evaluate, gate, save_report
from unichunk.sinks.config import SinkSettings
from unichunk.tasks.alignment import repair_alignment, verify_alignment_task
from unichunk.tasks.generations import switch_live


def _sync(
    summary: IngestSummary,
    listed: list[Listed],
    named: SourceParams | None,
    run: RunConfig,
    stores: RunStores,
    batch_size: int,
    written_before: int = 0,
) -> None:
    """One incremental pass of the sources into the new generation (deleting what a source dropped),
    counted into `summary` (the caller's, so a stopped pass still reports what it did); `listed` is what
    they listed for this pass, empty to list them again. Stopped when asked, it says how many documents
    this run wrote, `written_before` (the earlier passes') included, as `ingest` does."""
    with timed_summary(summary, summary.flow, flow_metrics()):
        listed = listed or list_sources(named, run.settings, record=False)
        summary.listed = sum(len(entry.items) for entry in listed)
        try:
            sync_listed(listed, run, summary, stores, batch_size=batch_size, dry_run=False, delete=True)
        except RunInterrupted as exc:
            raise exc.counting(written_before + summary.processed) from None


def sort_failures(
    settings: SinkSettings, generation_id: str, live_id: str | None
) -> tuple[list[FailedDocument], list[FailedDocument], list[FailedDocument]]:
    """(reported, lost, failed): the new generation's failed documents, judged against the live one.

    Read from the two status tables, not the run summaries: a document that failed in the build and
    succeeded in the catch-up is fine, and on a resumed rebuild a file that failed in the earlier attempt
    is skipped as known unreadable, so only the table still says it failed. See `RebuildSummary`.
    """
    failed_rows = StatusStore.of(settings.for_generation(generation_id), readonly=True).rows(state="failed")
    live_rows: dict[str, DocumentStatus] = {}
    if live_id is not None:
        live_status = StatusStore.of(settings.for_generation(live_id), readonly=True)
        live_rows = live_status.get_many(row.document_id for row in failed_rows)
    reported, lost, failed = [], [], []
    for row in failed_rows:
        document = FailedDocument(
            document_id=row.document_id,
            source_id=row.source_id,
            path=row.path,
            error=row.error or "",
            failure=row.failure,
        )
        live = live_rows.get(row.document_id)
        if live is not None and live.state != "failed":  # processed there (or being written): held
            lost.append(document)
        elif row.failure is not None:  # unreadable: reported, as ingest reports it
            reported.append(document)
        else:
            failed.append(document)
    return reported, lost, failed


def readiness_problems(summary: RebuildSummary, max_document_loss: float) -> list[str]:
    """Why the new generation must not go live (empty when it may); `summary.reported` never is."""
    problems = []
    if summary.lost:
        problems.append(
            f"{len(summary.lost)} document(s) the live generation holds failed in the new one (real loss): "
            f"{names(summary.lost)}"
        )
    if summary.failed:
        problems.append(
            f"{len(summary.failed)} document(s) failed in the new generation: {names(summary.failed)}"
        )
    if summary.alignment is not None and not summary.alignment.get("ok", False):
        wrong = {
            name: f"{s['missing']} missing, {s['extra']} extra, {s.get('altered', 0)} altered"
            for name, s in summary.alignment.get("sinks", {}).items()
            if s["missing"] or s["extra"] or s.get("altered")
        }
        problems.append(f"alignment check found mismatches: {wrong}")
    new, live = summary.counts.get("new", {}), summary.counts.get("live")
    if live is not None and new.get("processed", 0) < live.get("processed", 0) * (1 - max_document_loss):
        problems.append(
            f"the new generation has {new.get('processed', 0)} documents, the live one "
            f"{live.get('processed', 0)} (allowed loss {max_document_loss:.0%})"
        )
    return problems


def gate_switch(
    settings: SinkSettings, questions: str, live_id: str, candidate_id: str, tolerance: float
) -> tuple[dict, str]:
    """Evaluate the live and the new generation on `questions` (`unichunk.retrieval.evaluation`), judge the
    new one (`gate`: not worse than the live one by more than `tolerance` in character recall at any
    budget), save the report and leave it as the run's artifact; (the gate's verdict, the report's path)."""
    report = evaluate(settings, questions, [Target("live", live_id), Target("candidate", candidate_id)])
    report["gate"] = gate(report, tolerance)
    saved = save_report(report, settings.data_dir)
    publish_evaluation(report)
    return report["gate"], str(saved)


@flow(name="rebuild", flow_run_name=rebuild_run_name)
@guarded
def rebuild(params: RebuildParams) -> RebuildSummary | State:
    """Build the generation of the params' chunking + the sink settings, verify it, switch to it."""
    logger = get_run_logger()
    if params.gate is not None:
        load_questions(params.gate)  # an unreadable questions file stops the run before the build
    base = RunConfig(params.chunk_strategy(flow_strategy()), flow_settings())
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
        publish_rebuild(summary)
        return summary
    listed = list_sources(params.source, base.settings, record=True)
    total = sum(len(entry.items) for entry in listed)
    registry.begin_build(run.generation_id, run.generation_fingerprint, run.describe(), total)
    with run_stores(run, dry_run=False) as stores:
        stores.open()  # a rebuild always verifies its generation's stores, whatever it had to write
        try:
            summary.build = IngestSummary(flow="rebuild")
            _sync(summary.build, listed, params.source, run, stores, params.batch_size)
            # What changed in the sources while the build ran (webhooks updated only the live generation).
            summary.catch_up = IngestSummary(flow="rebuild-catch-up")
            _sync(
                summary.catch_up, [], params.source, run, stores, params.batch_size, summary.build.processed
            )
        except RunInterrupted as stopped:  # the live generation is untouched; the UI shows what was built
            summary.outcome = "stopped"
            summary.reasons = [f"{stopped}; re-run the rebuild to resume it"]
            publish_rebuild(summary)  # no log line: the run's own `stopped:` line says it
            raise
        report = verify_alignment_task(run)
        if not report.ok:  # as reindex does: re-write what a store lost, then look again
            summary.repaired = asdict(repair_alignment(run, report))
            report = verify_alignment_task(run)
        summary.alignment = report.as_dict()
        summary.counts["new"] = generation_counts(base.settings, run.generation_id)
        if live is not None:
            summary.counts["live"] = generation_counts(base.settings, live.generation_id)
        summary.reported, summary.lost, summary.failed = sort_failures(
            base.settings, run.generation_id, live.generation_id if live else None
        )
        summary.reasons = readiness_problems(summary, params.max_document_loss)
        if summary.reasons:
            registry.mark_failed(run.generation_id, "; ".join(summary.reasons))
            logger.error(summary.line())
            publish_rebuild(summary)
            return failed_state(
                f"not switched, the live generation is unchanged; re-run to resume: {summary.line()}", summary
            )
        if params.gate is not None and live is not None:
            registry.mark_ready(run.generation_id)  # readable beside the live one, switchable by hand
            summary.gate, summary.evaluation = gate_switch(
                base.settings, params.gate, live.generation_id, run.generation_id, params.tolerance
            )
            if not summary.gate["passed"]:
                summary.outcome = "gated"
                summary.reasons = list(summary.gate["reasons"])
                logger.warning(summary.line())
                publish_rebuild(summary)
                return summary
        if not params.switch:
            registry.mark_ready(run.generation_id)
            summary.outcome = "built"
            logger.info(summary.line())
            publish_rebuild(summary)
            return summary
        switch_live(run, timedelta(hours=params.retention_hours))
    summary.outcome = "switched"
    summary.dropped = drop_expired(base.settings)
    logger.info(summary.line())
    publish_rebuild(summary)
    return summary
