"""Single-document flows, run by the webhook triggers: `ingest-document` and `delete-document`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.states import State

from chunking.config import ChunkStrategy
from flows.params import IngestSummary, SinkName
from flows.pipeline import finish, process_items, sinks_context, timed_summary
from sinks.config import SinkSettings
from tasks.maintenance import delete_documents
from tasks.resources import ALL_SINKS, RunConfig
from tasks.sources import PathsSource


@flow(name="ingest-document")
def ingest_document(
    path: str,
    source_system: str = "fs",
    source_id: str | None = None,
    root: str | None = None,
    strategy: ChunkStrategy | None = None,
    sinks: list[SinkName] | None = None,
) -> IngestSummary | State:
    """(Re-)ingest one file; `source_id` defaults to its path relative to `root` (else absolute)."""
    summary = IngestSummary(flow="ingest-document")
    run = RunConfig(strategy or ChunkStrategy(), SinkSettings(), tuple(sinks or ALL_SINKS))
    with timed_summary(summary, "ingest-document"):
        if root and not Path(path).is_absolute():  # a path relative to the source root
            path = str(Path(root) / path)
        source = PathsSource([path], root=root, source_system=source_system)
        items = source.list()
        if not items:
            raise FileNotFoundError(f"no such file: {path}")
        if source_id:  # the webhook's own ID for the document wins over the path
            items = [replace(items[0], source_id=source_id)]
        summary.listed = len(items)
        with sinks_context(run, dry_run=False):
            process_items(items, run, summary, batch_size=1, dry_run=False)
    return finish(summary)


@flow(name="delete-document")
def delete_document(document_id: str, sinks: list[SinkName] | None = None) -> dict[str, int]:
    """Remove one document from every sink, the chunk store and the status table; chunks removed per sink."""
    run = RunConfig(ChunkStrategy(), SinkSettings(), tuple(sinks or ALL_SINKS))
    summary = IngestSummary(flow="delete-document")
    with timed_summary(summary, "delete-document"), sinks_context(run, dry_run=False):
        removed = delete_documents(run, [document_id])
    get_run_logger().info(
        "deleted %s: %s chunk(s) removed per sink %s", document_id, sum(removed.values()), removed
    )
    return removed
