"""Single-document flows, run by the webhook triggers: `ingest-document` and `delete-document`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.states import State

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.sources import PathsSource, SourceItem
from unichunk.engine.batches import (
    delete_leased,
    finish,
    process_items,
    run_stores,
    sinks_context,
    timed_summary,
)
from unichunk.engine.params import IngestSummary
from unichunk.engine.queued_updates import apply_queued, settled_state
from unichunk.engine.run_names import delete_document_run_name, ingest_document_run_name
from unichunk.flows.run_settings import flow_metrics, flow_settings, flow_strategy
from unichunk.index.generations import target_for_ingest, writable_runs
from unichunk.index.run import RunConfig
from unichunk.index.source_registry import SourceRegistry
from unichunk.index.update_queue import UpdateQueue
from unichunk.sinks.base import SINK_NAMES, SinkName


@flow(name="ingest-document", flow_run_name=ingest_document_run_name)
def ingest_document(
    path: str,
    source_system: str | None = None,
    source_id: str | None = None,
    root: str | None = None,
    strategy: ChunkStrategy | None = None,
    sinks: list[SinkName] | None = None,
    entry: str | None = None,
    labels: list[str] | None = None,
) -> IngestSummary | State:
    """(Re-)ingest one file; `source_id` defaults to its path relative to `root` (else absolute), and
    `source_system` to the name of `root` (`unichunk.chunking.sources.default_source_name`), so the document gets the
    ID a scan of that root gives it.

    `entry` names the update in the webhook update queue (the triggering event's id): then the run that
    takes the store lock applies every update queued for the source, and a run whose update another run
    applied ends at once (`unichunk.engine.queued_updates`).

    `labels` (a webhook's `labels`) become the document's own access labels, kept beside its source
    (`SourceRegistry.set_document_labels`); None leaves them as they are. The file is
    listed with the labels its recorded source gives it, as a scan would."""
    summary = IngestSummary(flow="ingest-document")
    if labels is not None:
        _own_labels(path, root, source_system, source_id, labels)
    if entry is not None:
        own = partial(_own_item, path, root, source_system, source_id)  # listed only if not queued
        return _ingest_queued(entry, own, strategy, sinks, summary)
    run = target_for_ingest(RunConfig(flow_strategy(strategy), flow_settings(), tuple(sinks or SINK_NAMES)))
    with timed_summary(summary, "ingest-document", flow_metrics()):
        items = [_own_item(path, root, source_system, source_id)]
        summary.listed = len(items)
        with run_stores(run, dry_run=False) as stores:  # opened only if the file changed
            process_items(items, run, summary, stores, batch_size=1, dry_run=False)
    # No artifacts: webhooks start these runs by the thousand, and the state's message names the failure.
    return finish(summary, pushed=flow_metrics(), artifacts=False)


def _own_item(path: str, root: str | None, source_system: str | None, source_id: str | None) -> SourceItem:
    """The run's file as listed now, under the webhook's own source ID if it gave one."""
    if root and not Path(path).is_absolute():  # a path relative to the source root
        path = str(Path(root) / path)
    items = PathsSource([path], root=root, source_system=source_system).list()
    if not items:
        raise FileNotFoundError(f"no such file: {path}")
    item = replace(items[0], source_id=source_id) if source_id else items[0]
    return SourceRegistry.of(flow_settings()).label_items([item])[0]


def _own_labels(
    path: str, root: str | None, source_system: str | None, source_id: str | None, labels: list[str]
) -> None:
    """Keep `labels` as the document's own, for its recorded source (a source never scanned keeps none:
    said in the log, as the document then gets only what a later scan of its source gives it)."""
    item = _own_item(path, root, source_system, source_id)
    registry = SourceRegistry.of(flow_settings())
    if not registry.set_document_labels(item.source_system, {item.source_id: labels}):
        get_run_logger().warning(
            "labels %s of %s not kept: its source %s has not been ingested yet",
            labels,
            item.source_id,
            item.source_system,
        )


def _ingest_queued(
    entry: str,
    own: Callable[[], SourceItem],
    strategy: ChunkStrategy | None,
    sinks: list[SinkName] | None,
    summary: IngestSummary,
) -> IngestSummary | State:
    """`ingest_document` for a queued update (`unichunk.engine.queued_updates`): ends at once when another
    run applied it; else applies, under the store lock, every update queued for the source."""
    queue = UpdateQueue.of(flow_settings())
    queued = queue.get(entry)
    if queued is None:  # swept long ago, or a run started by hand: queued now, and applied as any other
        item = own()
        queue.enqueue(entry, item.source_system, item.source_id, item.path)
    elif queued.settled:  # applied by another run: nothing to open or load
        return settled_state(queued)
    run = target_for_ingest(RunConfig(flow_strategy(strategy), flow_settings(), tuple(sinks or SINK_NAMES)))
    with timed_summary(summary, "ingest-document", flow_metrics()), run_stores(run, dry_run=False) as stores:
        settled = apply_queued(queue, entry, run, summary, stores)
    if settled is not None:
        return settled_state(settled)
    return finish(summary, pushed=flow_metrics(), artifacts=False)


@flow(name="delete-document", flow_run_name=delete_document_run_name)
def delete_document(document_id: str, sinks: list[SinkName] | None = None) -> dict[str, int]:
    """Remove one document from every sink, the chunk store and the status table; chunks removed per sink.

    It reaches every generation that is live or being built, so a rebuild cannot bring the document back.
    A run writing the document at that moment finishes first (the document's lease, `unichunk.engine.leases`): the
    deletion never interleaves with its write.
    """
    base = RunConfig(flow_strategy(), flow_settings(), tuple(sinks or SINK_NAMES))
    summary = IngestSummary(flow="delete-document")
    removed: dict[str, int] = {}
    with timed_summary(summary, "delete-document", flow_metrics()):
        for run in writable_runs(base):
            with sinks_context(run, dry_run=False):
                for name, count in delete_leased(run, [document_id]).items():
                    removed[name] = removed.get(name, 0) + count
    get_run_logger().info(
        "deleted %s: %s chunk(s) removed per sink %s", document_id, sum(removed.values()), removed
    )
    return removed
