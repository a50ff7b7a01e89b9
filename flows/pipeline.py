"""The steps the flows share: skip unchanged items, then per batch chunk -> prepare x N -> write x N -> mark.

Batches run one after another (chunking is CPU-bound and the GIL would serialise parallel chunking
anyway); within a batch, the sinks prepare concurrently and then write concurrently. A document is
written to a sink only if every sink prepared it, so a computation failure never leaves the stores
disagreeing about it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from prefect import get_run_logger
from prefect.states import Failed, State

from flows import progress
from flows.params import FailedDocument, IngestSummary
from sinks.base import Sink
from tasks import metrics
from tasks.chunk import chunk_batch
from tasks.chunk_store import ChunkKey
from tasks.maintenance import delete_documents, mark_status, restore_previous
from tasks.resources import RunConfig, flow_sinks
from tasks.sink_io import PrepareOutcome, prepare_sink, write_sink
from tasks.sources import Source, SourceItem
from tasks.status import DocumentStatus


def unchanged_by_stat(item: SourceItem, row: DocumentStatus | None, run: RunConfig) -> bool:
    """Cheap pre-check before loading: processed under these settings and same path, size and mtime.

    Anything else is loaded and compared by content hash (the authoritative rule) in the chunk task.
    """
    return (
        row is not None
        and row.state == "processed"
        and row.fingerprint == run.fingerprint
        and row.path == item.path
        and row.size == item.size
        and row.mtime_ns == item.mtime_ns
    )


def batched(items: Sequence[SourceItem], size: int) -> Iterator[list[SourceItem]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def sinks_context(run: RunConfig, dry_run: bool) -> AbstractContextManager[dict[str, Sink]]:
    """Open the run's sinks for the flow (closing them after); a dry run opens none."""
    return nullcontext({}) if dry_run else flow_sinks(run.sinks, run.settings)


def process_items(
    items: Sequence[SourceItem], run: RunConfig, summary: IngestSummary, *, batch_size: int, dry_run: bool
) -> None:
    """Bring the sinks up to date with `items`, accumulating outcomes into `summary`."""
    rows = run.status_store(readonly=dry_run).get_many(item.document_id for item in items)
    todo = [item for item in items if not unchanged_by_stat(item, rows.get(item.document_id), run)]
    summary.skipped += len(items) - len(todo)
    metrics.DOCUMENTS.labels(outcome="skipped").inc(len(items) - len(todo))
    done = len(items) - len(todo)
    progress.report("documents", done, len(items))
    for number, batch in enumerate(batched(todo, batch_size), start=1):
        by_id = {item.document_id: item for item in batch}
        result = chunk_batch(batch, run, batch_label=f"{number}", dry_run=dry_run)
        summary.skipped += len(result.skipped)
        metrics.DOCUMENTS.labels(outcome="skipped").inc(len(result.skipped))
        failed = dict(result.failed)
        processed: list[ChunkKey] = []
        if dry_run:
            summary.would_process.extend(by_id[key.document_id].source_id for key in result.keys)
        else:
            summary.chunked += len(result.chunked)
            if result.keys:
                processed, write_failed, written = write_batch(result.keys, run)
                failed.update(write_failed)
                for name, count in written.items():
                    summary.chunks_written[name] = summary.chunks_written.get(name, 0) + count
            # Load failures were recorded by chunk_batch; the rest of the batch's outcome is recorded here.
            mark_status(run, by_id, processed, {d: e for d, e in failed.items() if d not in result.failed})
        summary.processed += len(processed)
        metrics.DOCUMENTS.labels(outcome="processed").inc(len(processed))
        metrics.DOCUMENTS.labels(outcome="failed").inc(0 if dry_run else len(failed))
        for document_id, error in failed.items():
            item = by_id.get(document_id)
            summary.failed.append(
                FailedDocument(
                    document_id=document_id,
                    source_id=item.source_id if item else None,
                    path=item.path if item else None,
                    error=error,
                )
            )
        done += len(batch)
        progress.report("documents", done, len(items))


def write_batch(
    keys: list[ChunkKey], run: RunConfig
) -> tuple[list[ChunkKey], dict[str, str], dict[str, int]]:
    """Two-phase write of one batch to every sink: (written keys, failed document -> error, chunks per sink).

    Guarantee when a write fails: the batch's documents are marked failed and every sink whose write
    succeeded is put back to the previous version (a new document is removed), so those sinks never keep
    a half-written new version; the sink that failed may, until a re-run (or reindex repair) converges.
    """
    logger = get_run_logger()
    failed: dict[str, str] = {}
    outcomes = _prepare_all(keys, run, failed)
    good = [key for key in keys if key.document_id not in failed]
    if not good:
        return [], failed, {}
    good_ids = [key.document_id for key in good]
    redo = [name for name, outcome in outcomes.items() if outcome.document_ids != good_ids]
    if redo:  # another sink rejected some documents: prepare again without them, so all sinks agree
        logger.warning("re-preparing %s without %d document(s) another sink rejected", redo, len(failed))
        outcomes.update(_prepare_all(good, run, failed, names=redo))
        good = [key for key in good if key.document_id not in failed]
        if not good or any(outcomes[n].document_ids != [k.document_id for k in good] for n in run.sinks):
            for key in good:
                failed.setdefault(key.document_id, "sinks disagreed on which documents they could prepare")
            return [], failed, {}
    futures = {name: write_sink.submit(name, outcomes[name].prepared, run) for name in run.sinks}
    written: dict[str, int] = {}
    errors: list[str] = []
    for name, future in futures.items():
        try:
            written[name] = future.result()
        except Exception as exc:
            errors.append(f"write[{name}] failed after retries: {type(exc).__name__}: {exc}")
    if errors:
        # The sinks that did write hold the new version: put the previous one back there (a document that
        # never succeeded is deleted), so they agree with the status table, which keeps the last success.
        message = "; ".join(errors)
        for key in good:
            failed[key.document_id] = message
        restore_previous(run, [key.document_id for key in good], sorted(written))
        return [], failed, {}
    return good, failed, written


def _prepare_all(
    keys: list[ChunkKey], run: RunConfig, failed: dict[str, str], names: Sequence[str] | None = None
) -> dict[str, PrepareOutcome]:
    names = list(names or run.sinks)
    futures = {name: prepare_sink.submit(name, keys, run) for name in names}
    outcomes: dict[str, PrepareOutcome] = {}
    for name, future in futures.items():
        try:
            outcomes[name] = outcome = future.result()
        except Exception as exc:  # the sink itself is broken (cannot open, store down): the batch fails
            error = f"prepare[{name}] failed: {type(exc).__name__}: {exc}"
            outcomes[name] = PrepareOutcome(name, None, [], {key.document_id: error for key in keys})
            outcome = outcomes[name]
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
    source: Source, items: Sequence[SourceItem], run: RunConfig, summary: IngestSummary, *, dry_run: bool
) -> None:
    missing = find_missing(source, items, run, readonly=dry_run)
    if dry_run:
        summary.would_delete.extend(row.source_id or row.document_id for row in missing)
    elif missing:
        delete_documents(run, [row.document_id for row in missing])
        summary.deleted += len(missing)


@contextmanager
def timed_summary(summary: IngestSummary, flow_name: str) -> Iterator[None]:
    """Fill in the duration and push metrics when the flow body ends, however it ends."""
    started = time.perf_counter()
    try:
        yield
    finally:
        summary.duration_seconds = round(time.perf_counter() - started, 3)
        metrics.push_metrics(flow_name)


def finish(summary: IngestSummary, problems: list[str] | None = None) -> IngestSummary | State:
    """Log the summary; end the run Failed (carrying the summary) if any document failed."""
    logger = get_run_logger()
    logger.info(summary.line())
    for failure in summary.failed:
        logger.error(
            "failed: %s (%s): %s",
            failure.source_id or failure.document_id,
            failure.document_id,
            failure.error,
        )
    problems = list(problems or [])
    if summary.failed and not summary.dry_run:
        problems.insert(0, f"{len(summary.failed)} document(s) failed")
    if problems:
        return Failed(message="; ".join(problems), data=summary)
    return summary
