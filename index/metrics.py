"""Pipeline metrics in the default Prometheus registry, and how they leave the process.

Two ways out, one per way of running (docs/operations.md, "Metrics"): served runs (subprocesses of
`unichunk serve` or `unichunk worker`) write prometheus_client's multiprocess files, which the serving
process's /metrics sums, so counters only go up and `increase()` is right; one-shot runs push to
PUSHGATEWAY_URL at the end, grouped by {job, instance, flow}, so a pushed counter is one run's counts.

Gauges need a multiprocess mode: `ALIGNMENT_MISMATCHES` is "mostrecent" (the last alignment check, whichever
run made it) and `LAST_SUCCESS` is "max" (the latest success of any run). Neither is a "live" mode, so a
finished run's files stay meaningful and nothing needs `multiprocess.mark_process_dead`.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Metric, pushadd_to_gateway, values
from prometheus_client.core import GaugeMetricFamily
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from unichunk.chunking.metrics import DURATION_BUCKETS

PUSH_JOB = "unichunk"
OUTCOMES = ("processed", "skipped", "failed", "deleted")

TASK_SECONDS = Histogram(
    "unichunk_task_duration_seconds",
    "Wall time of one pipeline task run (sink is empty for tasks not bound to a sink).",
    ["task", "sink"],
    buckets=DURATION_BUCKETS,
)
DOCUMENTS = Counter(
    "unichunk_documents",
    "Documents by what the pipeline did with them.",
    ["outcome"],  # OUTCOMES
)
CHUNKS_WRITTEN = Counter("unichunk_chunks_written", "Chunks written by the pipeline, per sink.", ["sink"])
ALIGNMENT_MISMATCHES = Gauge(
    "unichunk_alignment_mismatches",
    "Chunk IDs missing from or extra in a sink at the last alignment check.",
    ["sink", "kind"],  # kind: missing | extra
    multiprocess_mode="mostrecent",
)
LAST_SUCCESS_NAME = "unichunk_last_success_timestamp_seconds"
LAST_SUCCESS = Gauge(
    LAST_SUCCESS_NAME,
    "Unix time at which a run of the flow last ended with no failed document.",
    ["flow"],
    multiprocess_mode="max",
)

log = logging.getLogger(__name__)


class MetricsSettings(BaseSettings):
    """Where one-shot flow runs push their metrics (Prometheus cannot scrape a process that has exited)."""

    model_config = SettingsConfigDict(extra="ignore")

    pushgateway_url: str | None = Field(
        None,
        validation_alias="PUSHGATEWAY_URL",
        description="A Prometheus Pushgateway for one-shot (CLI) runs; unset = no push. Served runs never "
        "push: the serving process's /metrics has them.",
    )
    metrics_instance: str | None = Field(
        None,
        validation_alias="UNICHUNK_METRICS_INSTANCE",
        description="The `instance` label of pushed metrics; unset = this host's name.",
    )

    def instance(self) -> str:
        return self.metrics_instance or socket.gethostname()


def multiprocess_mode() -> bool:
    """Whether this process records into PROMETHEUS_MULTIPROC_DIR (prometheus_client chose its value class
    from the environment when it was imported): then a serving process exposes these samples."""
    return values.ValueClass is not values.MutexValue


def initialize_series(sinks: tuple[str, ...] = ()) -> None:
    """Create the counters' known label sets at 0, so Prometheus sees each series at 0 before a run
    raises it, and the first run's `increase()` is its whole count rather than 0 (called by the serving
    process at start)."""
    for outcome in OUTCOMES:
        DOCUMENTS.labels(outcome=outcome)
    for sink in sinks:
        CHUNKS_WRITTEN.labels(sink=sink)


@contextmanager
def timed(task: str, sink: str = "") -> Iterator[None]:
    """Observe the duration of the block, whether it succeeds or raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        TASK_SECONDS.labels(task=task, sink=sink).observe(time.perf_counter() - start)


def record_success(flow_name: str) -> None:
    """Mark a run of `flow_name` that ended with no failed document (what the "no reindex" alert reads)."""
    LAST_SUCCESS.labels(flow=flow_name).set(time.time())


def grouping_key(flow_name: str, settings: MetricsSettings) -> dict[str, str]:
    """The Pushgateway group of a one-shot run: one per instance and flow, so workers never overwrite
    each other's pushes (the job is `PUSH_JOB`)."""
    return {"instance": settings.instance(), "flow": flow_name}


class PushedRegistry:
    """The default registry as one flow's group pushes it: `LAST_SUCCESS` carries only this flow's sample,
    without its `flow` label (the grouping key gives it), because the Pushgateway refuses (400) a push whose
    samples name another value of a grouping-key label, as a process that ran two flows would."""

    def __init__(self, flow_name: str) -> None:
        self.flow_name = flow_name

    def collect(self) -> Iterator[Metric]:
        for metric in REGISTRY.collect():
            if metric.name != LAST_SUCCESS_NAME:
                yield metric
                continue
            own = GaugeMetricFamily(metric.name, metric.documentation)
            for sample in metric.samples:
                if sample.labels.get("flow") == self.flow_name:
                    own.add_metric([], sample.value)
            yield own


def push_metrics(flow_name: str, settings: MetricsSettings) -> bool:
    """Push the registry to `settings.pushgateway_url` (job "unichunk", grouped by instance and flow), if
    set; never raises.

    Nothing is pushed in multiprocess mode: a served run's samples are on the serving process's /metrics,
    and pushing them too would count them twice."""
    if multiprocess_mode():
        return False
    url = settings.pushgateway_url
    if not url:
        return False
    try:
        pushadd_to_gateway(
            url,
            job=PUSH_JOB,
            grouping_key=grouping_key(flow_name, settings),
            registry=PushedRegistry(flow_name),
            timeout=5,
        )
    except Exception as exc:  # a monitoring outage must not fail ingestion
        log.warning("could not push metrics to %s: %s", url, exc)
        return False
    return True
