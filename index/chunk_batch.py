"""Chunk one batch of listed items: load, skip what is unchanged, chunk each changed document exactly once.

Chunks go to the chunk cache and only their keys are returned, so Prefect never carries document text
between tasks. A document that cannot be loaded or chunked fails alone, with its error in the status
table; the rest of the batch carries on. That holds for any exception, not only the typed ones: the
loaders turn what they did not expect into `DocumentLoadError`, and anything that still escapes (a bug in
a `Source`, say) is caught here too, so one file can never abort its batch or the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from unichunk.chunking.access_labels import document_labels
from unichunk.chunking.base import EmbedFunction
from unichunk.chunking.errors import DocumentTooLarge, UnichunkError
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.service import shared_service
from unichunk.chunking.sources import SourceItem, load_item
from unichunk.index import metrics
from unichunk.index.chunk_cache import ChunkKey
from unichunk.index.run import RunConfig
from unichunk.index.status import DocumentStatus, Failure, StatusStore, failed_fields, processing_fields

FLUSH_CHARS = 32_000_000  # text held before the chunks are written to the chunk cache
# How a load failure's status error starts, for the people reading it (the rules read `failure`).
LOAD_FAILED = "load failed: "


@dataclass
class ChunkBatchResult:
    """Per-document outcome of one batch: `keys` are the documents to write to the sinks."""

    keys: list[ChunkKey] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # document_id -> error
    failures: dict[str, Failure] = field(default_factory=dict)  # document_id -> why, for those known
    chunked: list[str] = field(default_factory=list)  # chunked in this run (the rest came from the cache)
    # Listed, then gone before it was loaded (a delete racing the run): deleted by the run, not failed.
    vanished: list[str] = field(default_factory=list)
    # Unchanged content whose access labels changed: document_id -> its new labels, for the run to set
    # in every store and then in its record (`unichunk.index.sink_writes.relabel_documents`), nothing
    # chunked or embedded.
    relabel: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def line(self, label: str) -> str:
        return (
            f"batch {label}: {len(self.keys)} to write ({len(self.chunked)} chunked, "
            f"{len(self.keys) - len(self.chunked)} from the chunk cache), {len(self.skipped)} unchanged, "
            + (f"{len(self.relabel)} to relabel, " if self.relabel else "")
            + f"{len(self.failed)} failed"
            + (f", {len(self.vanished)} vanished since listed" if self.vanished else "")
        )


def item_fields(item: SourceItem) -> dict[str, object]:
    """The status columns that describe where a document came from."""
    return {
        "source_system": item.source_system,
        "source_id": item.source_id,
        "path": item.stored_path,
        "size": item.size,
        "mtime_ns": item.mtime_ns,
    }


def failed_item_fields(item: SourceItem, row: DocumentStatus | None) -> dict[str, object]:
    """The status columns of a document that failed: where it came from, and the labels it was listed with
    when no store holds a version of it, so the readers of its source see that it failed (a record's
    labels are those its stored chunks carry: a failed update keeps them, as the stores do)."""
    if row is not None and row.chunk_ids:
        return item_fields(item)
    return {**item_fields(item), "labels": item.labels}


def chunk_items(items: list[SourceItem], run: RunConfig, *, dry_run: bool = False) -> ChunkBatchResult:
    """Load, skip unchanged (same content hash and fingerprint), chunk, cache; dry_run only compares.

    The records are read and written per batch, never per document (one status read, one chunk-cache
    lookup per FLUSH_CHARS of changed text, one write of each kind), so a database server costs a few
    round trips per batch."""
    result = ChunkBatchResult()
    with metrics.timed("chunk_batch"):
        status = run.status_store(readonly=dry_run)
        rows = status.get_many(item.document_id for item in items)
        writer = None if dry_run else _BatchWriter(run, status, rows)
        changed: list[tuple[SourceItem, Document, ChunkKey]] = []
        size = 0
        embed = run.chunk_embedding()  # `semantic` measures sentences with the configured embedder
        for item in items:
            document_id = item.document_id
            try:
                document = load_item(item, run.settings.max_document_bytes)
            except Exception as exc:  # any failure to read one document fails it alone, never the batch
                if vanished(item):  # removed after it was listed: the run deletes it (no status row here)
                    result.vanished.append(document_id)
                    continue
                failure: Failure = "too_large" if isinstance(exc, DocumentTooLarge) else "unreadable"
                _fail(result, writer, item, LOAD_FAILED + _load_error(exc), failure)
                continue
            labels = document_labels(document.metadata)
            row = rows.get(document_id)
            if StatusStore.is_current(row, document.content_hash, run.fingerprint):
                if row is not None and tuple(row.labels) != labels:
                    result.relabel[document_id] = labels
                    continue
                result.skipped.append(document_id)
                if writer is not None:  # remember the new mtime so the next listing skips without loading
                    writer.seen(item)
                continue
            key = ChunkKey(document_id, document.content_hash, run.chunk_fingerprint, labels)
            if writer is None:
                result.keys.append(key)
                continue
            changed.append((item, document, key))
            size += len(document.text)
            if size >= FLUSH_CHARS:
                _chunk_changed(changed, run, embed, writer, result)
                changed, size = [], 0
        if writer is not None:
            _chunk_changed(changed, run, embed, writer, result)
            writer.flush()
    return result


def _chunk_changed(
    changed: list[tuple[SourceItem, Document, ChunkKey]],
    run: RunConfig,
    embed: EmbedFunction | None,
    writer: _BatchWriter,
    result: ChunkBatchResult,
) -> None:
    """Chunk the changed documents whose chunks the cache does not hold yet (one lookup for all)."""
    cached = writer.cache.existing(key for _, _, key in changed)
    for item, document, key in changed:
        if key not in cached:
            try:
                chunks = shared_service().chunk(document, run.strategy, embed)
            except Exception as exc:  # any strategy bug fails this document, not the batch
                _fail(result, writer, item, f"chunking failed: {type(exc).__name__}: {exc}")
                continue
            writer.chunked(document, chunks)
            result.chunked.append(item.document_id)
        writer.processing(item)
        result.keys.append(key)


class _BatchWriter:
    """Collects a batch's new chunks and status rows and writes each kind in one transaction.

    Per-document commits cost more CPU than chunking a short document (and a round trip each to a
    database server). Chunks are flushed every FLUSH_CHARS of text, so a batch of huge files is not held
    in memory at once, and always before the status rows that mark their documents processing.
    """

    def __init__(self, run: RunConfig, status: StatusStore, rows: dict[str, DocumentStatus]) -> None:
        self.run, self.status, self.cache = run, status, run.chunk_cache()
        self.rows = rows  # the batch's records as the run found them
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

    def failed(self, item: SourceItem, error: str, failure: Failure | None) -> None:
        fields = failed_item_fields(item, self.rows.get(item.document_id))
        self._rows.append((item.document_id, failed_fields(error, failure, **fields)))

    def flush(self) -> None:
        self.cache.put_many(self._chunks, self.run.chunk_fingerprint)
        self.status.upsert_many(self._rows)
        self._chunks, self._rows, self._size = [], [], 0


def vanished(item: SourceItem) -> bool:
    """The item's file is gone (nothing at its path, not even a broken link): it was removed after the
    listing, so failing to load it is a deletion racing the run, not a bad file."""
    return not os.path.lexists(item.path)


def _load_error(exc: Exception) -> str:
    """unichunk's own errors explain themselves; anything else is named by its type too."""
    return str(exc) if isinstance(exc, UnichunkError) else f"{type(exc).__name__}: {exc}"


def _fail(
    result: ChunkBatchResult,
    writer: _BatchWriter | None,
    item: SourceItem,
    error: str,
    failure: Failure | None = None,
) -> None:
    """The document failed alone; its error is written with the batch's rows (not on a dry run)."""
    result.failed[item.document_id] = error
    if failure is not None:
        result.failures[item.document_id] = failure
    if writer is not None:
        writer.failed(item, error, failure)
