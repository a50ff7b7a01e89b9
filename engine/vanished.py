"""Files listed by a run and removed before it loaded them: a deletion racing the run, not a failure.

A re-index lists its source, then loads batch after batch; a file removed meanwhile (and its `deleted`
webhook sent) cannot be read when its batch comes. Failing it would end the run Failed for what is in fact
the newest state of the source. So the run deletes the document itself, as a scan deletes a file it no
longer lists (every sink, the chunk cache, the status row, `unichunk.index.sink_writes.delete_documents`),
while it still holds the document's lease (taken with the batch, `unichunk.engine.leases`), so no other
run writes it meanwhile; where the delete already ran (no status row left) it is a skip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prefect import get_run_logger

from unichunk.chunking.sources import SourceItem
from unichunk.engine.params import IngestSummary
from unichunk.index import metrics
from unichunk.index.run import RunConfig
from unichunk.tasks.delete import delete_documents_task


def delete_vanished_items(
    run: RunConfig,
    document_ids: Sequence[str],
    by_id: Mapping[str, SourceItem],
    summary: IngestSummary,
) -> None:
    """Delete the documents whose files vanished after listing (held under this run's leases); count
    those already deleted as skipped."""
    if not document_ids:
        return
    rows = run.status_store().get_many(document_ids)
    stored = [d for d in document_ids if d in rows]
    gone = len(document_ids) - len(stored)
    if stored:
        delete_documents_task(run, stored)
    summary.deleted += len(stored)
    summary.skipped += gone
    metrics.DOCUMENTS.labels(outcome="skipped").inc(gone)
    named = ", ".join(by_id[d].source_id if d in by_id else d for d in document_ids)
    get_run_logger().info(
        "%d file(s) removed after listing, not failed: %d deleted, %d deleted before: %s",
        len(document_ids),
        len(stored),
        gone,
        named,
    )
