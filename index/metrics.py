"""Pipeline metrics in the default Prometheus registry, pushed to a Pushgateway at the end of each flow run.

The default registry is used so a long-lived process (serve, webhook receiver) exposes pipeline, chunking
and sink metrics on one /metrics page; short flow runs push the same registry, since Prometheus cannot
scrape a process that has already exited.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, pushadd_to_gateway
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

TASK_SECONDS = Histogram(
    "unichunk_task_duration_seconds",
    "Wall time of one pipeline task run (sink is empty for tasks not bound to a sink).",
    ["task", "sink"],
)
DOCUMENTS = Counter(
    "unichunk_documents",
    "Documents by what the pipeline did with them.",
    ["outcome"],  # processed | skipped | failed | deleted
)
CHUNKS_WRITTEN = Counter("unichunk_chunks_written", "Chunks written by the pipeline, per sink.", ["sink"])
ALIGNMENT_MISMATCHES = Gauge(
    "unichunk_alignment_mismatches",
    "Chunk IDs missing from or extra in a sink at the last alignment check.",
    ["sink", "kind"],  # kind: missing | extra
)

log = logging.getLogger(__name__)


class MetricsSettings(BaseSettings):
    """Where short flow runs push their metrics (Prometheus cannot scrape a process that has exited)."""

    model_config = SettingsConfigDict(extra="ignore")

    pushgateway_url: str | None = Field(
        None, validation_alias="PUSHGATEWAY_URL", description="A Prometheus Pushgateway; unset = no push."
    )


@contextmanager
def timed(task: str, sink: str = "") -> Iterator[None]:
    """Observe the duration of the block, whether it succeeds or raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        TASK_SECONDS.labels(task=task, sink=sink).observe(time.perf_counter() - start)


def push_metrics(flow_name: str, url: str | None = None) -> bool:
    """Push the registry to PUSHGATEWAY_URL (job "unichunk", grouped by flow); never raises."""
    url = url or MetricsSettings().pushgateway_url
    if not url:
        return False
    try:
        pushadd_to_gateway(
            url, job="unichunk", grouping_key={"flow": flow_name}, registry=REGISTRY, timeout=5
        )
    except Exception as exc:  # a monitoring outage must not fail ingestion
        log.warning("could not push metrics to %s: %s", url, exc)
        return False
    return True
