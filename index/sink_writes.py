"""The write half of a batch: prepare in each sink, write, record the outcome, undo a failed write; deletes.

Plain functions the Prefect tasks in `tasks/` wrap, so the rules live here once:
- a prepare failure on a batch is retried per document to find the bad ones, so one poisoned document
  does not block its batch;
- after a failed write, the sinks that did write are put back to each document's last successful version
  (or the document is removed where it never succeeded), so they agree with the status table again;
- a batch's outcome is recorded in one transaction, and the chunk cache keeps the previous version of a
  document until its new one is stored everywhere.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from unichunk.chunking.sources import SourceItem
from unichunk.index import metrics
from unichunk.index.alignment import previous_version
from unichunk.index.chunk_batch import failed_item_fields, item_fields
from unichunk.index.chunk_cache import ChunkKey
from unichunk.index.run import RunConfig
from unichunk.index.status import failed_fields, processed_fields
from unichunk.sinks.base import DocumentChunks, Prepared, Sink


@dataclass
class PrepareOutcome:
    """What a sink prepared (None when nothing was preparable) and the documents it could not prepare."""

    sink: str
    prepared: Prepared | None
    document_ids: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    batch_error: str | None = None  # why the whole batch failed, when its documents had to be tried alone


def prepare_isolating(sink: Sink, keys: list[ChunkKey], run: RunConfig) -> PrepareOutcome:
    """Prepare the batch for one sink; on failure, find the failing documents and prepare the others."""
    batch: list[DocumentChunks] = list(run.chunk_cache().load_many(keys))
    with metrics.timed("prepare", sink.name):
        try:
            return PrepareOutcome(sink.name, sink.prepare(batch), [k.document_id for k in keys])
        except Exception as exc:
            if len(batch) == 1:
                return PrepareOutcome(sink.name, None, [], {keys[0].document_id: _describe(sink.name, exc)})
            batch_error = f"{type(exc).__name__}: {exc}"
        failed: dict[str, str] = {}
        good: list[DocumentChunks] = []
        for item in batch:
            try:
                sink.prepare([item])
                good.append(item)
            except Exception as exc:
                failed[item[0].document_id] = _describe(sink.name, exc)
        prepared = sink.prepare(good) if good else None
        return PrepareOutcome(sink.name, prepared, [doc.document_id for doc, _ in good], failed, batch_error)


def write_prepared(sink: Sink, prepared: Prepared) -> int:
    """Store a prepared batch (idempotent, so a retry after a half-done write is safe)."""
    with metrics.timed("write", sink.name):
        written = sink.write(prepared)
    metrics.CHUNKS_WRITTEN.labels(sink=sink.name).inc(written)
    return written


def optimize_sinks(sinks: Mapping[str, Sink]) -> tuple[dict[str, float], dict[str, str]]:
    """Let every sink reorganise after a run's writes (`Sink.optimize`): seconds each took, and the error
    of each that failed (the others still run).

    Once per run, after the last write: qdrant-edge's optimisation is synchronous, and would pay its
    planning in every batch. A failure costs no data (every write already succeeded); a sink that did not
    finish stays due for the next run."""
    seconds: dict[str, float] = {}
    errors: dict[str, str] = {}
    for name, sink in sinks.items():
        started = time.perf_counter()
        try:
            with metrics.timed("optimize", name):
                sink.optimize()
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
        seconds[name] = time.perf_counter() - started
    return seconds, errors


def _describe(sink_name: str, exc: BaseException) -> str:
    return f"prepare[{sink_name}] failed: {type(exc).__name__}: {exc}"


def record_outcome(
    run: RunConfig, items: Mapping[str, SourceItem], processed: list[ChunkKey], failed: Mapping[str, str]
) -> None:
    """Record the batch's outcome in one transaction: processed rows get their chunk IDs, failed rows their
    error; then drop the older cached versions of the processed documents.

    Called by the flow as a plain function, not a task: a few record writes per batch, where a Prefect task
    run would cost more in orchestration than the work (timed as `mark_status` in the task metrics)."""
    with metrics.timed("mark_status"):
        status, cache = run.status_store(), run.chunk_cache()
        chunk_lists = cache.get_chunks_many(processed)
        rows = [
            (
                key.document_id,
                processed_fields(
                    [c.chunk_id for c in chunk_lists.get(key, [])],
                    content_hash=key.content_hash,
                    fingerprint=run.fingerprint,
                    chunk_fingerprint=key.fingerprint,
                    strategy=run.strategy.model_dump_json(),
                    **({} if key.labels is None else {"labels": key.labels}),
                    **item_fields(items[key.document_id]),
                ),
            )
            for key in processed
        ]
        found = status.get_many(failed) if failed else {}
        for document_id, error in failed.items():
            item = items.get(document_id)
            extra = {} if item is None else failed_item_fields(item, found.get(document_id))
            rows.append((document_id, failed_fields(error, **extra)))
        status.upsert_many(rows)
        cache.prune_many(processed)


def restore_previous(
    run: RunConfig, document_ids: Sequence[str], sink_names: Sequence[str]
) -> dict[str, str]:
    """After a failed write, put each document back to its last successful version in `sink_names`.

    Sinks write concurrently, so when one fails the others already hold the new version. Re-writing the
    previous version (from the chunk cache: it is pruned only after a success) or deleting a document
    that never succeeded makes those sinks agree with the status table again. The sink whose write
    failed is not touched (it is likely still down, and may hold part of the new version): the document
    stays failed and the next run or `reindex` repairs it. Returns document id -> error.
    """
    errors: dict[str, str] = {}
    sinks = {name: sink for name, sink in run.open_sinks().items() if name in sink_names}
    rows = run.status_store().get_many(document_ids)
    for document_id in document_ids:
        row = rows.get(document_id)
        previous = None
        if row is not None and row.chunk_ids:
            try:
                previous = previous_version(row, run)
            except Exception as exc:
                errors[document_id] = f"previous version unavailable: {type(exc).__name__}: {exc}"
                continue
        for name, sink in sinks.items():
            try:
                if previous is None:
                    sink.delete(document_id)
                else:
                    sink.upsert(*previous)
            except Exception as exc:
                errors[document_id] = f"[{name}] restore failed: {type(exc).__name__}: {exc}"
    return errors


def relabel_documents(
    run: RunConfig, relabel: Mapping[str, tuple[str, ...]], items: Mapping[str, SourceItem]
) -> tuple[dict[str, int], dict[str, str]]:
    """Give unchanged documents their new access labels in every sink (`Sink.relabel`: nothing embedded or
    extracted again), then in their records; returns (chunks relabelled per sink, document id -> error).

    Converges like a write: the record takes the new labels only once every sink holds them, so a run
    stopped half-way leaves the old labels recorded, and the next run sees them differ and relabels
    again (each sink's relabel is safe to re-run). A sink that keeps no labels yet is skipped. A
    document that failed is recorded failed, so the next run writes it whole (vectors from the cache)."""
    counts: dict[str, int] = defaultdict(int)
    failed: dict[str, str] = {}
    with metrics.timed("relabel"):
        for name, sink in run.open_sinks().items():
            try:
                counts[name] += sink.relabel_many(relabel)  # one pass for the batch
            except NotImplementedError:
                continue
            except Exception:  # find the documents that fail, relabelling the others
                for document_id, labels in relabel.items():
                    try:
                        counts[name] += sink.relabel(document_id, labels)
                    except Exception as exc:
                        failed.setdefault(document_id, f"relabel[{name}] failed: {type(exc).__name__}: {exc}")
        done = [
            (
                document_id,
                {"labels": labels, **(item_fields(items[document_id]) if document_id in items else {})},
            )
            for document_id, labels in relabel.items()
            if document_id not in failed
        ]
        run.status_store().upsert_many(done)
    return dict(counts), failed


def delete_documents(run: RunConfig, document_ids: Sequence[str]) -> dict[str, int]:
    """Remove documents from every sink, then from the chunk cache and status table; chunks removed per sink."""
    removed: dict[str, int] = defaultdict(int)
    with metrics.timed("delete_documents"):
        sinks = run.open_sinks()
        status, cache = run.status_store(), run.chunk_cache()
        gone: list[str] = []
        try:
            for document_id in document_ids:
                for name, sink in sinks.items():
                    removed[name] += sink.delete(document_id)
                gone.append(document_id)
                metrics.DOCUMENTS.labels(outcome="deleted").inc()
        finally:  # the records of every document the sinks let go, in one transaction each, even if one
            # sink failed on a later document (whose records stay: the next run deletes it again)
            cache.delete_documents(gone)
            status.delete_many(gone)
    return dict(removed)
