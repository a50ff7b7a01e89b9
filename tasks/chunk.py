"""The chunk task: load a batch of source items and chunk each changed document exactly once.

Chunks go to the chunk store and only their keys are returned, so Prefect never carries document text
between tasks. A document that cannot be loaded or chunked fails alone, with its error in the status
table; the rest of the batch carries on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from chunking.errors import ChunkingError
from chunking.models import Chunk, Document
from tasks import metrics
from tasks.chunk_store import ChunkKey
from tasks.resources import RunConfig, chunking_service
from tasks.sources import SourceItem, load_item
from tasks.status import StatusStore, processing_fields

FLUSH_CHARS = 32_000_000  # text held before the chunks are written to the chunk store


@dataclass
class ChunkBatchResult:
    """Per-document outcome of one batch: `keys` are the documents to write to the sinks."""

    keys: list[ChunkKey] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # document_id -> error
    chunked: list[str] = field(default_factory=list)  # chunked in this run (the rest came from the store)


def item_fields(item: SourceItem) -> dict[str, object]:
    """The status columns that describe where a document came from."""
    return {
        "source_system": item.source_system,
        "source_id": item.source_id,
        "path": item.path,
        "size": item.size,
        "mtime_ns": item.mtime_ns,
    }


@task(name="chunk_batch", cache_policy=NO_CACHE, task_run_name="chunk_batch[{batch_label}]")
def chunk_batch(
    items: list[SourceItem], run: RunConfig, batch_label: str = "", dry_run: bool = False
) -> ChunkBatchResult:
    """Load, skip unchanged (same content hash and fingerprint), chunk, store; dry_run only compares."""
    logger = get_run_logger()
    result = ChunkBatchResult()
    with metrics.timed("chunk_batch"):
        status = run.status_store(readonly=dry_run)
        writer = None if dry_run else _BatchWriter(run, status)
        rows = status.get_many(item.document_id for item in items)
        for item in items:
            document_id = item.document_id
            try:
                document = load_item(item)
            except (ChunkingError, OSError) as exc:
                _fail(result, status, item, f"load failed: {exc}", dry_run)
                continue
            if StatusStore.is_current(rows.get(document_id), document.content_hash, run.fingerprint):
                result.skipped.append(document_id)
                if writer is not None:  # remember the new mtime so the next listing skips without loading
                    writer.seen(item)
                continue
            key = ChunkKey(document_id, document.content_hash, run.chunk_fingerprint)
            if writer is not None and not writer.store.has(key):
                try:
                    chunks = chunking_service().chunk(document, run.strategy)
                except Exception as exc:  # any strategy bug fails this document, not the batch
                    _fail(result, status, item, f"chunking failed: {type(exc).__name__}: {exc}", dry_run)
                    continue
                writer.chunked(document, chunks)
                result.chunked.append(document_id)
            if writer is not None:
                writer.processing(item)
            result.keys.append(key)
        if writer is not None:
            writer.flush()
    logger.info(
        "batch %s: %d to write (%d chunked, %d from the chunk store), %d unchanged, %d failed",
        batch_label,
        len(result.keys),
        len(result.chunked),
        len(result.keys) - len(result.chunked),
        len(result.skipped),
        len(result.failed),
    )
    return result


class _BatchWriter:
    """Collects a batch's new chunks and status rows and writes each kind in one transaction.

    Per-document commits cost more CPU than chunking a short document. Chunks are flushed every
    FLUSH_CHARS of text, so a batch of huge files is not held in memory at once, and always before the
    status rows that mark their documents processing.
    """

    def __init__(self, run: RunConfig, status: StatusStore) -> None:
        self.run, self.status, self.store = run, status, run.chunk_store()
        self._chunks: list[tuple[Document, list[Chunk]]] = []
        self._rows: list[tuple[str, dict[str, object]]] = []
        self._size = 0

    def seen(self, item: SourceItem) -> None:
        self._rows.append((item.document_id, item_fields(item)))

    def chunked(self, document: Document, chunks: list[Chunk]) -> None:
        self._chunks.append((document, chunks))
        self._size += len(document.text)
        if self._size >= FLUSH_CHARS:
            self.flush()

    def processing(self, item: SourceItem) -> None:
        self._rows.append((item.document_id, processing_fields(**item_fields(item))))

    def flush(self) -> None:
        self.store.put_many(self._chunks, self.run.chunk_fingerprint)
        self.status.upsert_many(self._rows)
        self._chunks, self._rows, self._size = [], [], 0


def _fail(result: ChunkBatchResult, status: StatusStore, item: SourceItem, error: str, dry_run: bool) -> None:
    result.failed[item.document_id] = error
    if not dry_run:
        status.mark_failed(item.document_id, error, **item_fields(item))
