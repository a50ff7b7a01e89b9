"""Which sources a run covers: the one it names, or every source the data dir has ingested before.

`ingest` and `rebuild` name a source; the nightly `reindex` (and an `ingest` run from the UI with no
source filled in) re-scans every source recorded in `index.source_registry`. A recorded source whose
folder has gone (an unmounted disk) is skipped with a warning and keeps its documents: only a listing
that succeeds may delete what vanished from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import get_run_logger

from chunking.sources import Source, SourceItem
from flows.params import IngestSummary, SourceParams
from flows.pipeline import delete_missing, process_items
from index.run import RunConfig
from index.source_registry import SourceRegistry
from sinks.config import SinkSettings


@dataclass
class Listed:
    """One source and what it lists now."""

    params: SourceParams
    source: Source
    items: list[SourceItem]


def list_sources(named: SourceParams | None, settings: SinkSettings, *, record: bool) -> list[Listed]:
    """List `named`, or every recorded source; `record` remembers a named source for later re-indexing."""
    registry = SourceRegistry.in_data_dir(settings.data_dir)
    if named is not None:
        source = named.build()
        listed = [Listed(named, source, source.list())]  # a named source that cannot be listed is an error
        if record:
            registry.record(named.record(source))
        return listed
    found = []
    for record_ in registry.all():
        params = SourceParams.from_record(record_)
        source = params.build()
        try:
            found.append(Listed(params, source, source.list()))
        except OSError as exc:
            get_run_logger().warning("source %s skipped, its documents kept: %s", record_.name, exc)
    if not found:
        get_run_logger().info("no source recorded in %s yet: nothing to scan", settings.data_dir)
    return found


def sync_listed(
    listed: list[Listed],
    run: RunConfig,
    summary: IngestSummary,
    *,
    batch_size: int,
    dry_run: bool,
    delete: bool,
) -> None:
    """Process what each source lists; with `delete`, remove what vanished from it (and from it only)."""
    for entry in listed:
        process_items(entry.items, run, summary, batch_size=batch_size, dry_run=dry_run)
        if delete:
            delete_missing(entry.source, entry.items, run, summary, dry_run=dry_run)
