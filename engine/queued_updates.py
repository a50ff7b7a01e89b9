"""Webhook updates applied in bursts: the run that takes the store lock applies every update waiting for it.

Each accepted `updated` webhook is a row of the update queue (`unichunk.index.update_queue`) and starts its
own `ingest-document` run, as before: one run per accepted webhook, whatever happens. What changes is who
does the work. On the embedded defaults runs write one at a time, and a run that waited for the store lock
used to apply one document and hand the lock on, so a burst of N updates paid N start-ups (a process, the
models, the stores opened and optimised) one after the other. Now the run that takes the lock claims every
update pending for its source at that moment, reads each file as it is then and applies them all in one
`process_items` call; the runs started for those updates find them settled and end at once, Completed,
saying which run applied them (or Failed with its error), never opening a store.

The guarantees stay: an update is settled only by a run that read its file after it was accepted (claimed
under the lock, read after the claim), so the latest content wins; one that arrives while a run is applying
others stays pending for the next run that takes the lock (its own at the latest); a run that stops early
hands its claims back, and a killed run's claims are taken over by the next run under the lock. Deletions
are not queued: `delete-document` runs reach every store as before. Without a store lock (a Qdrant server)
runs write side by side and each applies its own update only, since there no run waits for another.
"""

from __future__ import annotations

from dataclasses import replace

from prefect import get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, State

from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import PathsSource, SourceItem
from unichunk.engine.batches import RunStores, process_items
from unichunk.engine.params import FailedDocument, IngestSummary
from unichunk.index.defaults import DEFAULT_BATCH_SIZE
from unichunk.index.run import RunConfig
from unichunk.index.source_registry import SourceRegistry
from unichunk.index.update_queue import QueuedUpdate, UpdateQueue


def run_label() -> str:
    """How an entry names the run that applied it: `flow run 'name' (id)`."""
    return f"flow run '{flow_run.name or '?'}' ({flow_run.id or '?'})"


def settled_state(update: QueuedUpdate) -> State:
    """The final state of a run whose update another run settled: Completed, or Failed with its error."""
    if update.state == "done":
        return Completed(message=f"{update.source_id}: applied by {update.holder}")
    return Failed(message=f"{update.source_id} failed in {update.holder}: {update.error}")


def apply_queued(
    queue: UpdateQueue,
    entry: str,
    run: RunConfig,
    summary: IngestSummary,
    stores: RunStores,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> QueuedUpdate | None:
    """Under the store lock (taken here), apply every pending update of `entry`'s source, `entry`'s own
    included unless another run settled it meanwhile, counting into `summary`. Returns `entry`'s record
    when another run settled it and this one applied nothing; None when this run did the work (then the
    caller finishes with `summary`). `entry` must be in the queue."""
    own = queue.get(entry)
    if own is None:
        raise ValueError(f"no queued update {entry}")
    holder = run_label()
    locked = stores.lock() is not None
    # With the lock every pending update of the source is this run's; without one, only its own.
    claimed = queue.claim(holder, own.source_system if locked else None, also=[entry])
    if not claimed:
        settled = queue.get(entry)
        if settled is not None and settled.settled:
            return settled
        raise RuntimeError(f"queued update {entry} is neither claimable nor settled")  # cannot happen
    logger = get_run_logger()
    if all(update.entry != entry for update in claimed):
        logger.info("this run's own update was applied by another run; applying %d more", len(claimed))
    outcomes: dict[str, str | None] = {}
    try:
        items, entries_of = _items(claimed, entry, summary, outcomes, SourceRegistry.of(run.settings))
        summary.listed += len(items)
        if len(claimed) > 1:
            logger.info(
                "applying %d queued update(s) of %d document(s) in this run", len(claimed), len(items)
            )
        process_items(items, run, summary, stores, batch_size=batch_size, dry_run=False)
    except BaseException:
        queue.release(holder, [update.entry for update in claimed])  # the next run applies them
        raise
    failed = {failure.document_id: failure.error for failure in summary.failed}
    for document_id, entries in entries_of.items():
        for update_entry in entries:
            outcomes[update_entry] = failed.get(document_id)
    queue.finish(holder, outcomes)
    return None


def _items(
    claimed: list[QueuedUpdate],
    own: str,
    summary: IngestSummary,
    outcomes: dict[str, str | None],
    registry: SourceRegistry,
) -> tuple[list[SourceItem], dict[str, list[str]]]:
    """The files to apply (one item per document, as listed now) and each document's entries. An entry
    whose file is gone fails, as a lone update of a missing file does: in `outcomes` (its own run reports
    it), and in `summary` too when it is this run's own (`own`)."""
    items: dict[str, SourceItem] = {}
    entries_of: dict[str, list[str]] = {}
    for update in claimed:
        listed = _list(update, registry)
        if listed is None:
            error = f"no such file: {update.path}"
            outcomes[update.entry] = error
            if update.entry == own:
                document_id = derive_document_id(
                    source_system=update.source_system, source_id=update.source_id
                )
                summary.failed.append(
                    FailedDocument(
                        document_id=document_id, source_id=update.source_id, path=update.path, error=error
                    )
                )
            else:
                get_run_logger().warning("queued update of %s: %s", update.source_id, error)
            continue
        items[listed.document_id] = listed
        entries_of.setdefault(listed.document_id, []).append(update.entry)
    return list(items.values()), entries_of


def _list(update: QueuedUpdate, registry: SourceRegistry) -> SourceItem | None:
    """The update's file as it is now, under the webhook's own source ID, with the labels its recorded
    source gives it; None when it is not a file."""
    found = PathsSource([update.path], source_system=update.source_system).list()
    if not found:
        return None
    return registry.label_items([replace(found[0], source_id=update.source_id)])[0]
