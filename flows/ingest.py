"""The `ingest` flow: bring the sinks in line with a source, re-doing only what changed."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from flows.params import IngestParams, IngestSummary
from flows.pipeline import delete_missing, finish, process_items, sinks_context, timed_summary
from index.generations import target_for_ingest
from index.run import RunConfig
from sinks.config import SinkSettings


def sync_source(flow_name: str, params: IngestParams) -> tuple[IngestSummary, RunConfig]:
    """List the source, process new and changed documents, delete vanished ones; returns the summary."""
    summary = IngestSummary(flow=flow_name, dry_run=params.dry_run)
    run = target_for_ingest(
        RunConfig(params.strategy, SinkSettings(), tuple(params.sinks)), dry_run=params.dry_run
    )
    with timed_summary(summary, flow_name):
        source = params.source.build()
        items = source.list()
        summary.listed = len(items)
        with sinks_context(run, params.dry_run):
            process_items(items, run, summary, batch_size=params.batch_size, dry_run=params.dry_run)
            if params.delete_missing:
                delete_missing(source, items, run, summary, dry_run=params.dry_run)
    return summary, run


@flow(name="ingest")
def ingest(params: IngestParams) -> IngestSummary | State:
    """Ingest a directory or a list of files into every sink; Failed if any document failed."""
    summary, _ = sync_source("ingest", params)
    return finish(summary)
