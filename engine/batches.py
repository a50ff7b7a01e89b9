"""The steps the flows share: skip unchanged items, then per batch chunk -> prepare x N -> write x N -> mark.

Within a batch the sinks prepare concurrently and then write concurrently; consecutive batches overlap
(batch N writes while N+1 prepares and N+2 is chunked), so the model work sets the pace. A document is
written to a sink only if every sink prepared it, so a computation failure never leaves the stores
disagreeing about it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.futures import PrefectFuture
from prefect.states import State
from prefect.utilities.annotations import quote

from unichunk.chunking.sources import Source, SourceItem
from unichunk.engine import progress
from unichunk.engine.leases import RunLeases, when_leased
from unichunk.engine.params import FailedDocument, IngestSummary, names
from unichunk.engine.reports import failed_state, failure_message, publish_ingest
from unichunk.engine.run_stop import RunStop
from unichunk.engine.stop import stopping, wait_or_stop
from unichunk.engine.store_access import exclusive_store_access
from unichunk.engine.vanished import delete_vanished_items
from unichunk.index import metrics
from unichunk.index.batch_space import check_batch_room
from unichunk.index.chunk_batch import ChunkBatchResult
from unichunk.index.chunk_cache import ChunkKey
from unichunk.index.generations import ensure_live_alias, expired_generations
from unichunk.index.run import RunConfig
from unichunk.index.sink_writes import PrepareOutcome, optimize_sinks, record_outcome, relabel_documents
from unichunk.index.status import DocumentStatus, Failure, pending_fields
from unichunk.sinks.base import SINK_NAMES, Sink
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.disk_space import DiskFull
from unichunk.sinks.outage import StoreUnreachable, unreachable
from unichunk.sinks.pool import flow_sinks
from unichunk.tasks.alignment import restore_previous_task
from unichunk.tasks.chunk import chunk_batch
from unichunk.tasks.delete import delete_documents_task
from unichunk.tasks.generations import drop_generation
from unichunk.tasks.sink_io import prepare_sink, write_sink


def unchanged_by_stat(item: SourceItem, row: DocumentStatus | None, run: RunConfig) -> bool:
    """Cheap pre-check before loading: processed under these settings and same path, size and mtime.

    Anything else is loaded and compared by content hash (the authoritative rule) in the chunk task.
    """
    return (
        row is not None
        and row.state == "processed"
        and row.fingerprint == run.fingerprint
        and row.path == item.stored_path
        and row.size == item.size
        and row.mtime_ns == item.mtime_ns
        and tuple(row.labels) == item.labels  # new labels: loaded, then relabelled if its content is the same
    )


OPTIMIZE_LOG_SECONDS = 1.0  # a store's post-run optimisation is logged when it took this long


def known_unreadable(item: SourceItem, row: DocumentStatus | None, limit: int) -> bool:
    """Failed to load in an earlier run, and the file is unchanged since (same path, size and mtime).

    Reading it again would fail the same way, and counting it again would fail every later run (the
    nightly reindex) for one bad file: it is reported instead (`IngestSummary.unreadable`). A changed
    file is tried again, and so is one refused for its size when the limit (`limit`, the run's) has been
    raised above it.
    The run fingerprint is not compared: loading does not depend on the chunking or sink settings.
    """
    return (
        row is not None
        and row.state == "failed"
        and row.failure in ("unreadable", "too_large")
        and row.path == item.stored_path
        and row.size == item.size
        and row.mtime_ns == item.mtime_ns
        and not (row.failure == "too_large" and item.size <= limit)
    )


def batched(items: Sequence[SourceItem], size: int) -> Iterator[list[SourceItem]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


class RunStores:
    """A run's stores, opened when the run first needs them (`open`), so a run with nothing to write or
    delete opens none: no store lock, no client, no model (a no-change ingest, a webhook for a file that
    did not change).

    Opening takes the embedded store's lock first (`unichunk.engine.store_access`: overlapping runs queue instead of
    failing on the store's lock, and a serving process hands its readers over), then the sinks from the
    process-wide pool, held for the flow; the flow's tasks get them from there (`RunConfig.open_sinks`),
    which refuses sinks not opened this way. Opening also keeps the Qdrant alias on the live collection:
    the first ingest that writes to a data dir creates it, for outside readers. Whatever was opened is
    closed, and the lock released, when `run_stores` ends. A dry run opens nothing.

    A caller that decided what to do before opening asks again once `open` returns: the lock may have been
    waited for while another run wrote or deleted the same documents (`process_items`, `delete_missing`).
    """

    def __init__(self, run: RunConfig, dry_run: bool, exits: ExitStack) -> None:
        self.run, self.dry_run = run, dry_run
        self._exits = exits
        self._sinks: dict[str, Sink] | None = None
        self._lock: tuple[Path | None] | None = None  # (the lock's path,) once taken

    @property
    def opened(self) -> dict[str, Sink] | None:
        """The sinks `open` opened, or None while nothing needed them."""
        return self._sinks

    def lock(self) -> Path | None:
        """Take the embedded store's lock (waiting for it) without opening the sinks yet, for a run that
        decides what to do only once it holds it (`unichunk.engine.queued_updates`); the lock's path, None
        where there is none. `open` then opens the sinks under it."""
        if self._lock is None and not self.dry_run:
            self._lock = (
                self._exits.enter_context(exclusive_store_access(self.run.settings, self.run.sinks)),
            )
            if self._lock[0] is not None:
                get_run_logger().info("holding %s (one run at a time on an embedded store)", self._lock[0])
        return self._lock[0] if self._lock else None

    def open(self) -> dict[str, Sink]:
        if self._sinks is None:
            if self.dry_run:
                return {}
            self.lock()
            sinks = self._exits.enter_context(flow_sinks(self.run.sinks, self.run.settings))
            ensure_live_alias(self.run, sinks)
            self._sinks = sinks
        return self._sinks


@contextmanager
def run_stores(run: RunConfig, dry_run: bool) -> Iterator[RunStores]:
    """The run's stores for the block, opened on first need (`RunStores`), closed at its end; after a block
    that ends normally, the stores it opened are optimised first (`optimize_after_run`)."""
    with ExitStack() as exits:
        stores = RunStores(run, dry_run, exits)
        yield stores
        if stores.opened and not stopping():  # a stopped run leaves it to the next one
            optimize_after_run(stores.opened)


@contextmanager
def sinks_context(run: RunConfig, dry_run: bool) -> Iterator[dict[str, Sink]]:
    """The run's stores opened now, for a block that always uses them (an alignment check, a switch, a
    deletion); a dry run opens none."""
    with run_stores(run, dry_run) as stores:
        yield stores.open()


def optimize_after_run(sinks: dict[str, Sink]) -> None:
    """Once the run's writes are done, let the stores reorganise (qdrant-edge builds its HNSW graph and
    vacuums deleted points). A failure is logged, not the run's: every write already succeeded, and the
    store stays due for optimisation at the next run."""
    seconds, errors = optimize_sinks(sinks)
    logger = get_run_logger()
    for name, error in errors.items():
        logger.warning("optimising %s after the run failed (tried again next run): %s", name, error)
    slow = [f"{name} in {s:.1f} s" for name, s in seconds.items() if s >= OPTIMIZE_LOG_SECONDS]
    if slow:
        logger.info("optimised the stores after the run: %s", ", ".join(slow))


@dataclass
class _Writing:
    """A batch whose sink writes are running while the next batch is chunked and prepared; `seconds` holds
    each sink's prepare and (once done) write seconds, for the batch's log line."""

    label: str
    by_id: dict[str, SourceItem]
    result: ChunkBatchResult
    good: list[ChunkKey]
    failed: dict[str, str]
    futures: dict[str, PrefectFuture[int]]
    submitted: datetime
    seconds: dict[str, dict[str, float]]
    stats: dict[str, dict[str, float]]  # each sink's prepare stats (the vector sink's: embedded, reused)


@dataclass
class _Progress:
    """Documents accounted for so far, of `total`, and batches submitted (their labels run on across the
    rounds that retry deferred documents)."""

    done: int
    total: int
    batches: int = 0

    def advance(self, count: int) -> None:
        self.done += count
        progress.report("documents", self.done, self.total)


def process_items(
    items: Sequence[SourceItem],
    run: RunConfig,
    summary: IngestSummary,
    stores: RunStores,
    *,
    batch_size: int,
    dry_run: bool,
    stop: RunStop | None = None,
) -> None:
    """Bring the sinks up to date with `items`, accumulating outcomes into `summary`; `stores` are opened
    only if some item is to be loaded (not unchanged by size and mtime, not known unreadable).

    Batches overlap in three stages: while batch N is being written, batch N+1 is prepared (embedded,
    analysed, extracted) and batch N+2 chunked, so the model work, which bounds a run, never waits for
    chunking or store writes. Writes stay in batch order: batch N's are settled (and, on failure,
    undone) before batch N+1's start.

    One document is never written by two runs at once (with server stores runs proceed in parallel):
    each batch's documents are leased (`unichunk.engine.leases`) just before it is chunked, in one transaction, and
    released once its outcome is recorded. A document another run holds is deferred: not loaded, not
    written. When this run's batches are done, and it holds no lease (so two runs can never wait for each
    other), it waits for the deferred documents and processes them as more batches, reading each file then:
    the run that writes a document last has read it last, so the later update wins. A dry run writes
    nothing and leases nothing.

    Task arguments are wrapped in `quote`: Prefect otherwise walks every argument, element by element,
    looking for futures to resolve (none are passed here); 56 task runs each given 2,000 small dicts
    spent 13 s of CPU on that, against 1.5 s quoted.

    A store whose server stops answering ends the run at once (`unichunk.engine.run_stop`): raised as
    `StoreUnreachable` once the batch it failed is undone.
    """
    with progress.tracking(get_run_logger()):  # chunk-level progress, rate and ETA (bar and flow log)
        _process_items(items, run, summary, stores, batch_size=batch_size, dry_run=dry_run, stop=stop)


def _process_items(
    items: Sequence[SourceItem],
    run: RunConfig,
    summary: IngestSummary,
    stores: RunStores,
    *,
    batch_size: int,
    dry_run: bool,
    stop: RunStop | None,
) -> None:
    stop = stop or RunStop()
    status = run.status_store(readonly=dry_run)
    rows = status.get_many(item.document_id for item in items)
    pending = [] if dry_run else to_load(items, rows, run)
    if pending:
        stores.open()  # may wait for another run's store lock: what it recorded meanwhile is read again
        ids = [item.document_id for item in pending]
        for document_id in ids:
            rows.pop(document_id, None)
        rows.update(status.get_many(ids))
    todo = triage(items, rows, run, summary)
    tally = _Progress(done=len(items) - len(todo), total=len(items))
    tally.advance(0)
    if dry_run:
        _run_batches(
            todo, run, summary, batch_size=batch_size, dry_run=True, leases=None, tally=tally, stop=stop
        )
        return
    if not todo:  # nothing changed: no lease to take (the nightly reindex's usual case)
        return
    with RunLeases(run) as leases:
        while todo:
            deferred = _run_batches(
                todo,
                run,
                summary,
                batch_size=batch_size,
                dry_run=False,
                leases=leases,
                tally=tally,
                stop=stop,
            )
            if not deferred:
                break
            source_ids = {item.document_id: item.source_id for item in deferred}
            leases.wait_for_any(list(source_ids), describe=source_ids.__getitem__)
            # Looked at afresh: the run that held them may have stored this very version (then skipped
            # here by size and mtime, as any unchanged file), or the file may have changed again since.
            deferred = [_restat(item) for item in deferred]
            rows = run.status_store().get_many(item.document_id for item in deferred)
            todo = triage(deferred, rows, run, summary)
            tally.advance(len(deferred) - len(todo))


def triage(
    items: Sequence[SourceItem], rows: dict[str, DocumentStatus], run: RunConfig, summary: IngestSummary
) -> list[SourceItem]:
    """The items to load: all but those unchanged by size and mtime and the known unreadable ones (both
    counted into `summary` here)."""
    limit = run.settings.max_document_bytes
    unreadable = [item for item in items if known_unreadable(item, rows.get(item.document_id), limit)]
    _record_unreadable(summary, unreadable, rows)
    todo = to_load(items, rows, run)
    summary.skipped += len(items) - len(todo) - len(unreadable)
    metrics.DOCUMENTS.labels(outcome="skipped").inc(len(items) - len(todo))  # unreadable ones too
    return todo


def to_load(items: Sequence[SourceItem], rows: dict[str, DocumentStatus], run: RunConfig) -> list[SourceItem]:
    """The items to load: neither known unreadable nor unchanged by size and mtime (counts nothing)."""
    return [
        item
        for item in items
        if not known_unreadable(item, row := rows.get(item.document_id), run.settings.max_document_bytes)
        and not unchanged_by_stat(item, row, run)
    ]


def _restat(item: SourceItem) -> SourceItem:
    """`item` with the size and mtime its file has now (as it was when it cannot be read: loading it will
    say why)."""
    try:
        st = os.stat(item.path)
    except OSError:
        return item
    return replace(item, size=st.st_size, mtime_ns=st.st_mtime_ns)


def _leased_batches(
    items: Sequence[SourceItem], batch_size: int, leases: RunLeases | None, deferred: list[SourceItem]
) -> Iterator[list[SourceItem]]:
    """`items` in batches, each leased as it is asked for (so just before it is chunked); the documents
    another run holds go to `deferred` instead."""
    for batch in batched(items, batch_size):
        if leases is None:
            yield batch
            continue
        taken, refused = leases.take(batch)
        deferred.extend(refused)
        if taken:
            yield taken


def _run_batches(
    items: Sequence[SourceItem],
    run: RunConfig,
    summary: IngestSummary,
    *,
    batch_size: int,
    dry_run: bool,
    leases: RunLeases | None,
    tally: _Progress,
    stop: RunStop,
) -> list[SourceItem]:
    """Chunk, prepare and write `items` in overlapping batches; returns the documents deferred because
    another run held them. Every lease this takes is released by the time it returns or raises.

    Once `stop` is requested (a store is down, the disk is full, or a signal asked this process to stop:
    `unichunk.engine.stop`) no batch is taken or written: the one being prepared is abandoned, the one being
    written is settled, the documents chunked but not written go back to `pending` (the next run does them),
    and the reason is raised."""
    deferred: list[SourceItem] = []
    unwritten: list[str] = []  # chunked (so marked processing), writes not yet submitted
    batches = _leased_batches(items, batch_size, leases, deferred)
    upcoming = _chunk_next(batches, tally, run, dry_run)
    writing: _Writing | None = None
    try:
        while upcoming is not None and not stop.requested:
            batch, label, future = upcoming
            result = future.result()
            unwritten = [] if dry_run else [key.document_id for key in result.keys]
            upcoming = None if stop.requested else _chunk_next(batches, tally, run, dry_run)
            by_id = {item.document_id: item for item in batch}
            summary.skipped += len(result.skipped)
            metrics.DOCUMENTS.labels(outcome="skipped").inc(len(result.skipped))
            if dry_run:
                summary.would_process.extend(by_id[key.document_id].source_id for key in result.keys)
                summary.would_process.extend(by_id[d].source_id for d in result.relabel)
                _record_failures(summary, by_id, result.failed, result.failures, dry_run=True)
            else:
                summary.chunked += len(result.chunked)
                failed = dict(result.failed)
                if result.relabel:  # unchanged content, new labels: set in every store, nothing embedded
                    _, not_relabelled = relabel_documents(run, result.relabel, by_id)
                    failed.update(not_relabelled)
                    summary.relabelled += len(result.relabel) - len(not_relabelled)
                seconds: dict[str, dict[str, float]] = {"prepare": {}, "write": {}}
                good, outcomes = (
                    prepare_batch(result.keys, run, failed, seconds["prepare"]) if result.keys else ([], {})
                )
                if writing is not None:
                    previous, writing = writing, None
                    _settle(previous, run, summary, leases, stop)
                if good and not stop.requested:  # a batch that would not fit is refused before any write
                    try:
                        check_batch_room(run, outcomes, label, len(good))
                    except DiskFull as exc:  # the disk will not empty itself: no further batch
                        stop.request(exc)
                if stop.requested:  # a store is down, the disk is full or a stop was asked: not written
                    break
                submitted = datetime.now(UTC)
                futures = (
                    {
                        name: write_sink.submit(name, quote(outcomes[name].prepared), quote(run))
                        for name in run.sinks
                    }
                    if good
                    else {}
                )
                stats = {n: o.prepared.stats for n, o in outcomes.items() if good and o.prepared}
                writing = _Writing(label, by_id, result, good, failed, futures, submitted, seconds, stats)
                unwritten = []
            tally.advance(len(batch))
    finally:
        # Also when a later batch raised: the writes already running are waited for and recorded (or
        # undone), so the status table never misses a write that happened.
        try:
            if writing is not None:
                _settle(writing, run, summary, leases, stop)
        finally:
            if upcoming is not None and (leases is not None or stop.requested):
                upcoming[2].wait()  # its chunk task writes status rows: let it end before letting go
            if stop.requested and not dry_run:
                _put_back(run, unwritten + _chunked(upcoming), stop)
            if leases is not None:
                leases.release(leases.held)
    stop.raise_if_requested()
    return deferred


def _chunked(upcoming: tuple[list[SourceItem], str, PrefectFuture[ChunkBatchResult]] | None) -> list[str]:
    """The documents a finished chunk task marked processing (none if it failed: it recorded why)."""
    if upcoming is None or not upcoming[2].state.is_completed():
        return []
    return [key.document_id for key in upcoming[2].result().keys]


def _put_back(run: RunConfig, document_ids: list[str], stop: RunStop) -> None:
    """The documents chunked but not written when the run stopped: `pending`, with why, for the next run
    (the stores still hold their previous version, which their rows still name)."""
    if document_ids:
        reason = f"not written: the run stopped: {stop.why}"
        with suppress(DiskFull):  # no room even for that: the rows stay `processing`, which is redone too
            run.status_store().upsert_many([(d, pending_fields(reason)) for d in document_ids])


def _chunk_next(
    batches: Iterator[list[SourceItem]], tally: _Progress, run: RunConfig, dry_run: bool
) -> tuple[list[SourceItem], str, PrefectFuture[ChunkBatchResult]] | None:
    batch = next(batches, None)
    if batch is None:
        return None
    tally.batches += 1
    label = f"{tally.batches}"
    return batch, label, chunk_batch.submit(quote(batch), quote(run), batch_label=label, dry_run=dry_run)


def _add_seconds(
    seconds: dict[str, float], name: str, future: PrefectFuture[Any], submitted: datetime
) -> None:
    """Add a finished task run's wall time to `seconds[name]`: from just before it was submitted to the
    timestamp of its final state, retries included. Measured here, not in the tasks (which stay thin);
    Prefect's default thread pool is unbounded, so no task waits for a thread and the time is its own."""
    try:  # after `.result()` the final state is at hand (no API call)
        state = future.state
        if state.is_final():
            elapsed = (state.timestamp - submitted).total_seconds()
            seconds[name] = seconds.get(name, 0.0) + max(0.0, elapsed)
    except Exception:  # a figure for the log: never in the way of settling a batch
        return


def _settle(
    writing: _Writing, run: RunConfig, summary: IngestSummary, leases: RunLeases | None, stop: RunStop
) -> None:
    """Wait for a batch's writes and record its outcome, then release its documents' leases.

    Guarantee when a write fails: the batch's documents are marked failed and every sink whose write
    succeeded is put back to the previous version (a new document is removed), so those sinks never keep
    a half-written new version; the sink that failed may, until a re-run (or reindex repair) converges.
    A write that failed because the store's server does not answer stops the run (`stop`).
    """
    failed, processed = writing.failed, list(writing.good)
    written: dict[str, int] = {}
    errors: list[str] = []
    for name, future in writing.futures.items():
        try:
            written[name] = future.result()
        except Exception as exc:
            errors.append(f"write[{name}] failed after retries: {type(exc).__name__}: {exc}")
            cause = unreachable(exc)
            if cause is not None:
                stop.request(StoreUnreachable.of(name, _location(run, name), cause))
        _add_seconds(writing.seconds["write"], name, future, writing.submitted)
    if errors:
        # The sinks that did write hold the new version: put the previous one back there (a document that
        # never succeeded is deleted), so they agree with the status table, which keeps the last success.
        message = "; ".join(errors)
        for key in processed:
            failed[key.document_id] = message
        restore_previous_task(run, [key.document_id for key in processed], sorted(written))
        processed, written = [], {}
    for name, count in written.items():
        summary.chunks_written[name] = summary.chunks_written.get(name, 0) + count
    if "vectors" in written:
        summary.count_vectors(writing.stats.get("vectors", {}))
    for phase in writing.seconds.values():
        for name, seconds in phase.items():
            summary.sink_seconds[name] = round(summary.sink_seconds.get(name, 0.0) + seconds, 3)
    # Load failures were recorded by chunk_batch; the rest of the batch's outcome is recorded here.
    record_outcome(
        run, writing.by_id, processed, {d: e for d, e in failed.items() if d not in writing.result.failed}
    )
    delete_vanished_items(run, writing.result.vanished, writing.by_id, summary)  # still under their leases
    if leases is not None:  # recorded: another run may take these documents now
        leases.release(writing.by_id)
    summary.processed += len(processed)
    metrics.DOCUMENTS.labels(outcome="processed").inc(len(processed))
    _record_failures(summary, writing.by_id, failed, writing.result.failures, dry_run=False)
    get_run_logger().info(_batch_line(writing, len(processed), len(failed), written))


def _location(run: RunConfig, name: str) -> str | None:
    """Where sink `name` lives (`Sink.location`), for the message that it stopped answering."""
    try:
        return run.open_sinks()[name].location
    except Exception:  # only a message's detail: never in the way of settling a batch
        return None


def _batch_line(writing: _Writing, processed: int, failed: int, written: dict[str, int]) -> str:
    """The batch's INFO line in the flow log: `batch 3: 10 documents: 8 written, 1 failed, 1 unchanged;
    chunks written graph=124 keywords=124 vectors=124; seconds (prepare+write) graph 4.1+0.8, ...`."""
    unchanged = len(writing.result.skipped)
    text = (
        f"batch {writing.label}: {len(writing.by_id)} document{'' if len(writing.by_id) == 1 else 's'}: "
        f"{processed} written, {failed} failed, "
        f"{unchanged} unchanged; chunks written "
        + (" ".join(f"{name}={count}" for name, count in sorted(written.items())) or "none")
    )
    prepare, write = writing.seconds["prepare"], writing.seconds["write"]
    if prepare or write:
        text += "; seconds (prepare+write) " + ", ".join(
            f"{name} {prepare.get(name, 0.0):.1f}+{write.get(name, 0.0):.1f}"
            for name in sorted(set(prepare) | set(write))
        )
    return text


def _record_failures(
    summary: IngestSummary,
    by_id: dict[str, SourceItem],
    failed: dict[str, str],
    failures: Mapping[str, Failure],
    *,
    dry_run: bool,
) -> None:
    metrics.DOCUMENTS.labels(outcome="failed").inc(0 if dry_run else len(failed))
    for document_id, error in failed.items():
        item = by_id.get(document_id)
        summary.failed.append(
            FailedDocument(
                document_id=document_id,
                source_id=item.source_id if item else None,
                path=item.stored_path if item else None,
                error=error,
                failure=failures.get(document_id),
            )
        )


def _record_unreadable(
    summary: IngestSummary, items: list[SourceItem], rows: dict[str, DocumentStatus]
) -> None:
    for item in items:
        row = rows[item.document_id]
        summary.unreadable.append(
            FailedDocument(
                document_id=item.document_id,
                source_id=item.source_id,
                path=item.stored_path,
                error=row.error or "",
                failure=row.failure,
            )
        )


def prepare_batch(
    keys: list[ChunkKey], run: RunConfig, failed: dict[str, str], seconds: dict[str, float] | None = None
) -> tuple[list[ChunkKey], dict[str, PrepareOutcome]]:
    """Prepare one batch in every sink; returns the keys every sink prepared, and each sink's outcome
    (`seconds` gets each sink's prepare seconds added).

    A document one sink rejects is written to none (`failed` gets why): the other sinks prepare again
    without it, so all sinks write the same documents.
    """
    logger = get_run_logger()
    seconds = {} if seconds is None else seconds
    outcomes = _prepare_all(keys, run, failed, seconds)
    good = [key for key in keys if key.document_id not in failed]
    if not good:
        return [], outcomes
    good_ids = [key.document_id for key in good]
    redo = [name for name, outcome in outcomes.items() if outcome.document_ids != good_ids]
    if redo:  # another sink rejected some documents: prepare again without them, so all sinks agree
        logger.warning("re-preparing %s without %d document(s) another sink rejected", redo, len(failed))
        outcomes.update(_prepare_all(good, run, failed, seconds, names=redo))
        good = [key for key in good if key.document_id not in failed]
        if not good or any(outcomes[n].document_ids != [k.document_id for k in good] for n in run.sinks):
            for key in good:
                failed.setdefault(key.document_id, "sinks disagreed on which documents they could prepare")
            return [], outcomes
    return good, outcomes


def _prepare_all(
    keys: list[ChunkKey],
    run: RunConfig,
    failed: dict[str, str],
    seconds: dict[str, float],
    names: Sequence[str] | None = None,
) -> dict[str, PrepareOutcome]:
    names = list(names or run.sinks)
    submitted = datetime.now(UTC)
    futures = {name: prepare_sink.submit(name, quote(keys), quote(run)) for name in names}
    outcomes: dict[str, PrepareOutcome] = {}
    for name, future in futures.items():
        wait_or_stop(future)  # a stop abandons the batch: `RunInterrupted`, never a failed document
        try:
            outcomes[name] = outcome = future.result()
        except Exception as exc:  # the sink itself is broken (cannot open, store down): the batch fails
            error = f"prepare[{name}] failed: {type(exc).__name__}: {exc}"
            outcomes[name] = PrepareOutcome(name, None, [], {key.document_id: error for key in keys})
            outcome = outcomes[name]
        _add_seconds(seconds, name, future, submitted)
        for document_id, error in outcome.failed.items():
            failed.setdefault(document_id, error)
    return outcomes


def find_missing(
    source: Source, items: Sequence[SourceItem], run: RunConfig, *, readonly: bool
) -> list[DocumentStatus]:
    """Status rows this source covers whose documents it no longer lists."""
    listed = {item.document_id for item in items}
    rows = run.status_store(readonly=readonly).rows(source_system=source.source_system)
    return [
        row for row in rows if row.document_id not in listed and source.covers(row.source_id or "", row.path)
    ]


def delete_missing(
    source: Source,
    items: Sequence[SourceItem],
    run: RunConfig,
    summary: IngestSummary,
    stores: RunStores,
    *,
    dry_run: bool,
    missing: Sequence[DocumentStatus] | None = None,
) -> None:
    """Delete the documents `source` no longer lists (`missing`, when the caller has found them already);
    `stores` are opened only if there are some."""
    if missing is None:
        missing = find_missing(source, items, run, readonly=dry_run)
    if dry_run:
        summary.would_delete.extend(row.source_id or row.document_id for row in missing)
        return
    if not missing:
        return
    stores.open()
    # The store lock may have been waited for: only what is missing still is deleted (one another run
    # deleted meanwhile is not counted twice; one that appeared meanwhile is not this run's to delete).
    still = {row.document_id for row in find_missing(source, items, run, readonly=False)}
    missing = [row for row in missing if row.document_id in still]
    if missing:
        source_ids = {row.document_id: row.source_id or row.document_id for row in missing}
        delete_leased(run, list(source_ids), describe=source_ids.__getitem__)
        summary.deleted += len(missing)


def delete_leased(
    run: RunConfig, document_ids: Sequence[str], *, describe: Callable[[str], str] = str
) -> dict[str, int]:
    """Delete documents from every sink and the run's records, each under its lease (`unichunk.engine.leases`), so a
    deletion never interleaves with another run's write of the same document; chunks removed per sink."""
    removed: dict[str, int] = {}

    def delete(ids: list[str]) -> None:
        for name, count in delete_documents_task(run, ids).items():
            removed[name] = removed.get(name, 0) + count

    when_leased(run, document_ids, delete, describe=describe)
    return removed


@contextmanager
def timed_summary(summary: IngestSummary, flow_name: str, pushed: metrics.MetricsSettings) -> Iterator[None]:
    """Add the block's duration to the summary's and push metrics (where `pushed` says) when it ends,
    however it ends (`reindex` times its scan and its alignment check in two blocks: the duration is both)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        summary.duration_seconds = round(summary.duration_seconds + time.perf_counter() - started, 3)
        metrics.push_metrics(flow_name, pushed)


def finish(
    summary: IngestSummary,
    problems: list[str] | None = None,
    *,
    pushed: metrics.MetricsSettings,
    artifacts: bool = True,
) -> IngestSummary | State:
    """Log the summary, publish the run's artifacts (`unichunk.engine.reports`; not for `artifacts=False`); end the
    run Failed if any document failed in this run, its message naming them (`unichunk.engine.reports.failed_state`
    says what the state carries: the summary in this process, `RunFailed` in a deployment's run).

    Known-unreadable files (failed to load before, unchanged since) are logged as a warning, not a
    failure: their failure was reported by the run that first met it."""
    logger = get_run_logger()
    logger.info(summary.line())
    for failure in summary.failed:
        logger.error(
            "failed: %s (%s): %s",
            failure.source_id or failure.document_id,
            failure.document_id,
            failure.error,
        )
    if summary.unreadable:
        logger.warning(
            "%d known unreadable file(s), unchanged since they failed to load (`unichunk status --failed` "
            "lists them; fix or touch a file to retry it): %s",
            len(summary.unreadable),
            names(summary.unreadable, limit=10),
        )
    problems = list(problems or [])
    if summary.failed and not summary.dry_run:
        problems.insert(0, failure_message(summary))
    message = "; ".join(problems)
    if artifacts:
        publish_ingest(summary, f"Failed: {message}" if problems else "Completed")
    if problems:
        return failed_state(message, summary)
    if not summary.dry_run:  # for the "no successful reindex" alert; pushed again for one-shot runs
        metrics.record_success(summary.flow)
        metrics.push_metrics(summary.flow, pushed)
    return summary


def drop_expired(settings: SinkSettings) -> list[str]:
    """Drop every retired generation whose retention ran out (one task run each); returns their IDs."""
    expired = expired_generations(settings)
    for generation_id in expired:
        # every sink of the generation is dropped, the vector store included: always its lock
        with exclusive_store_access(settings.for_generation(generation_id), SINK_NAMES):
            drop_generation(settings, generation_id)
    return expired
