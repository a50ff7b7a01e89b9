"""The `delete_documents` task: remove documents from every sink and from the pipeline's records."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from unichunk.index.run import RunConfig
from unichunk.index.sink_writes import delete_documents


@task(name="delete_documents", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 4])
def delete_documents_task(run: RunConfig, document_ids: list[str]) -> dict[str, int]:
    """Delete `document_ids` everywhere (retried: a delete is idempotent); chunks removed per sink."""
    return delete_documents(run, document_ids)
