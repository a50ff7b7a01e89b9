"""Status bookkeeping, deletion, and the alignment check with its repair.

Repair never guesses: a chunk ID missing from a sink is restored by re-writing its document there from
the chunk store (or by re-chunking the file when the store lost it, accepted only if it yields the very
IDs the status table expects); an extra ID is removed by re-writing its document (writes replace) or, if
the status table does not know the document, by deleting the document from that sink.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from chunking.config import ChunkStrategy
from chunking.ids import parse_chunk_id
from chunking.models import Chunk, Document
from sinks.alignment import AlignmentReport, verify_alignment
from tasks import metrics
from tasks.chunk_store import ChunkKey
from tasks.resources import RunConfig, chunking_service
from tasks.sources import SourceItem
from tasks.status import DocumentStatus, failed_fields, processed_fields


def mark_status(
    run: RunConfig, items: dict[str, SourceItem], processed: list[ChunkKey], failed: dict[str, str]
) -> None:
    """Record the batch's outcome: processed rows get their chunk IDs, failed rows their error.

    A plain function, not a task: a few SQLite writes per batch, where a Prefect task run would cost more
    in orchestration than the work (timed as `mark_status` in the task metrics all the same)."""
    from tasks.chunk import item_fields

    with metrics.timed("mark_status"):
        status, store = run.status_store(), run.chunk_store()
        chunk_lists = store.get_chunks_many(processed)
        rows = [
            (
                key.document_id,
                processed_fields(
                    [c.chunk_id for c in chunk_lists.get(key, [])],
                    content_hash=key.content_hash,
                    fingerprint=run.fingerprint,
                    chunk_fingerprint=key.fingerprint,
                    strategy=run.strategy.model_dump_json(),
                    **item_fields(items[key.document_id]),
                ),
            )
            for key in processed
        ]
        for document_id, error in failed.items():
            extra = item_fields(items[document_id]) if document_id in items else {}
            rows.append((document_id, failed_fields(error, **extra)))
        status.upsert_many(rows)  # the batch's outcome in one transaction
        store.prune_many(processed)


@task(name="delete_documents", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 4])
def delete_documents(run: RunConfig, document_ids: list[str]) -> dict[str, int]:
    """Remove documents from every sink, then from the chunk store and status table; chunks removed per sink."""
    removed: dict[str, int] = defaultdict(int)
    with metrics.timed("delete_documents"):
        sinks = run.open_sinks()
        status, store = run.status_store(), run.chunk_store()
        for document_id in document_ids:
            for name, sink in sinks.items():
                removed[name] += sink.delete(document_id)
            store.delete_document(document_id)
            status.delete(document_id)
            metrics.DOCUMENTS.labels(outcome="deleted").inc()
    return dict(removed)


@task(name="verify_alignment", cache_policy=NO_CACHE)
def verify_alignment_task(run: RunConfig) -> AlignmentReport:
    """Compare each sink with the chunk IDs the status table expects; publish the mismatch gauges."""
    with metrics.timed("verify_alignment"):
        report = verify_alignment(run.open_sinks(), expected=run.status_store().expected_chunk_ids())
    record_alignment(report)
    return report


def record_alignment(report: AlignmentReport) -> None:
    for name in report.counts:
        metrics.ALIGNMENT_MISMATCHES.labels(sink=name, kind="missing").set(len(report.missing[name]))
        metrics.ALIGNMENT_MISMATCHES.labels(sink=name, kind="extra").set(len(report.extra[name]))


@dataclass
class RepairResult:
    rewritten: dict[str, list[str]] = field(default_factory=dict)  # sink -> document IDs re-written
    deleted: dict[str, list[str]] = field(default_factory=dict)  # sink -> document IDs deleted
    errors: dict[str, str] = field(default_factory=dict)  # document or chunk ID -> why not repaired


@task(name="repair_alignment", cache_policy=NO_CACHE)
def repair_alignment(run: RunConfig, report: AlignmentReport) -> RepairResult:
    """Make each sink hold exactly the expected chunk IDs again (see the module docstring)."""
    logger = get_run_logger()
    result = RepairResult()
    sinks, status = run.open_sinks(), run.status_store()
    with metrics.timed("repair_alignment"):
        rewrite: dict[str, set[str]] = defaultdict(set)
        delete: dict[str, set[str]] = defaultdict(set)
        for name in report.counts:
            for chunk_id in report.missing[name] | report.extra[name]:
                try:
                    document_id = parse_chunk_id(chunk_id)[0]
                except ValueError as exc:
                    result.errors[chunk_id] = str(exc)
                    continue
                (rewrite if chunk_id in report.missing[name] else delete)[name].add(document_id)
        rows = status.get_many({d for ids in (*rewrite.values(), *delete.values()) for d in ids})
        for name, document_ids in delete.items():
            for document_id in sorted(document_ids):
                row = rows.get(document_id)
                if row is not None and row.chunk_ids:
                    rewrite[name].add(document_id)  # known document: a re-write drops its stray chunks
                else:
                    sinks[name].delete(document_id)
                    result.deleted.setdefault(name, []).append(document_id)
        for name, document_ids in rewrite.items():
            for document_id in sorted(document_ids):
                try:
                    row = rows.get(document_id)
                    if row is None:
                        raise KeyError(f"{document_id} is not in the status table")
                    document, chunks = _expected_chunks(row, run)
                    sinks[name].upsert(document, chunks)
                except Exception as exc:
                    result.errors[document_id] = f"[{name}] {type(exc).__name__}: {exc}"
                    continue
                result.rewritten.setdefault(name, []).append(document_id)
    logger.info(
        "repair: rewritten %s, deleted %s, errors %s", result.rewritten, result.deleted, result.errors
    )
    return result


def _expected_chunks(row: DocumentStatus, run: RunConfig) -> tuple[Document, list[Chunk]]:
    """The document's last successfully written chunks, from the chunk store or by re-chunking the file."""
    if not row.content_hash or not row.chunk_fingerprint:
        raise ValueError(f"{row.document_id} has no recorded successful version")
    key = ChunkKey(row.document_id, row.content_hash, row.chunk_fingerprint)
    store = run.chunk_store()
    try:
        return store.load(key)
    except KeyError:
        pass
    if not row.path or not row.source_system or not row.source_id:
        raise ValueError(f"{row.document_id}: not in the chunk store and its source is unknown")
    from tasks.sources import load_item

    document = load_item(SourceItem(row.source_system, row.source_id, row.path, 0, 0))
    strategy = ChunkStrategy.model_validate_json(row.strategy) if row.strategy else run.strategy
    chunks = chunking_service().chunk(document, strategy)
    if [c.chunk_id for c in chunks] != row.chunk_ids:
        raise ValueError(f"{Path(row.path).name} changed since it was processed; the next ingest updates it")
    store.put(document, row.chunk_fingerprint, chunks)
    return document, chunks


@task(name="restore_previous", cache_policy=NO_CACHE)
def restore_previous(run: RunConfig, document_ids: list[str], sink_names: list[str]) -> dict[str, str]:
    """After a failed write, put each document back to its last successful version in `sink_names`.

    Sinks write concurrently, so when one fails the others already hold the new version. Re-writing the
    previous version (from the chunk store: it is pruned only after a success) or deleting a document
    that never succeeded makes those sinks agree with the status table again. The sink whose write
    failed is not touched (it is likely still down, and may hold part of the new version): the document
    stays failed and the next run or `reindex` repairs it. Returns document id -> error.
    """
    errors: dict[str, str] = {}
    status = run.status_store()
    sinks = {name: sink for name, sink in run.open_sinks().items() if name in sink_names}
    rows = status.get_many(document_ids)
    for document_id in document_ids:
        row = rows.get(document_id)
        previous = None
        if row is not None and row.chunk_ids:
            try:
                previous = _expected_chunks(row, run)
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
    if errors:
        get_run_logger().warning("could not restore %d document(s): %s", len(errors), errors)
    return errors
