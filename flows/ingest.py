"""The `ingest` flow: bring the sinks in line with a source (or every source ingested before), re-doing
only what changed; with `shards=N`, split across workers (`unichunk.engine.shards`)."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from unichunk.engine.batches import finish, run_stores, timed_summary
from unichunk.engine.params import IngestParams, IngestSummary
from unichunk.engine.reports import publish_ingest
from unichunk.engine.run_names import ingest_run_name
from unichunk.engine.shards import cancel_shard_runs
from unichunk.engine.sources import list_sources, sync_in_shards, sync_listed
from unichunk.engine.stop import RunInterrupted
from unichunk.flows.run_guard import guarded
from unichunk.flows.run_settings import flow_metrics, flow_settings, flow_strategy
from unichunk.index.generations import target_for_ingest
from unichunk.index.run import RunConfig


def sync_source(flow_name: str, params: IngestParams) -> tuple[IngestSummary, RunConfig, list[str]]:
    """List the source (or every recorded one), process new and changed documents, delete vanished ones;
    returns the summary, the run and the problems that fail it (a shard lost on every attempt)."""
    summary = IngestSummary(flow=flow_name, dry_run=params.dry_run)
    run = target_for_ingest(
        RunConfig(params.chunk_strategy(flow_strategy()), flow_settings(), tuple(params.sinks)),
        dry_run=params.dry_run,
    )
    problems: list[str] = []
    stopped: RunInterrupted | None = None
    with timed_summary(summary, flow_name, flow_metrics()):
        listed = list_sources(params.source, run.settings, record=not params.dry_run)
        summary.listed = sum(len(entry.items) for entry in listed)
        try:
            if params.shards > 1:  # a stop cancels the shards; what the finished ones wrote is counted
                problems = sync_in_shards(listed, run, summary, params)
            else:
                with run_stores(run, params.dry_run) as stores:
                    sync_listed(
                        listed,
                        run,
                        summary,
                        stores,
                        batch_size=params.batch_size,
                        dry_run=params.dry_run,
                        delete=params.delete_missing,
                    )
        except RunInterrupted as exc:  # with what this run wrote before it stopped
            stopped = exc.counting(summary.processed)
    if stopped is not None:  # its artifacts too, the duration counted up to the stop
        publish_ingest(summary, f"Cancelled: {stopped}")
        raise stopped
    return summary, run, problems


@flow(name="ingest", flow_run_name=ingest_run_name, on_cancellation=[cancel_shard_runs])
@guarded
def ingest(params: IngestParams) -> IngestSummary | State:
    """Ingest a directory or a list of files into every sink; Failed if any document failed."""
    summary, _, problems = sync_source("ingest", params)
    return finish(summary, problems, pushed=flow_metrics())
