"""`unichunk worker`: a Prefect process worker whose flow runs' metrics add up on one /metrics page.

`prefect worker start --pool unichunk` runs each flow run in a subprocess that ends with the run; with
PUSHGATEWAY_URL set, each run pushes its own counts on exit, grouped by instance and flow, so two runs of
one flow on one worker (two shards of a sharded run, say) overwrite each other's group and counts are
lost. `unichunk worker` is that same worker (Prefect's `ProcessWorker`, polling the pool, running runs as
subprocesses, creating the pool as a process pool if it does not exist) in prometheus_client's
multiprocess mode (`deployments.multiprocess_metrics`): every run it spawns writes its samples to files
in the worker's own directory (`PROMETHEUS_MULTIPROC_DIR`, else a fresh one under the system's temp dir,
removed when the worker exits), and the worker serves their sum on `/metrics`. Counters then only go up
while the worker lives, `increase()` is right, and runs push nothing (a served run never does). One
Prometheus scrape target per worker; see deployments/prometheus.yml.

Signals are Prefect's own worker's (`setup_signal_handlers_worker`, as `prefect worker start`): the first
SIGINT or SIGTERM stops polling and lets the runs in flight finish (they are processes of their own), a
second one kills.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import shutil
import tempfile
from pathlib import Path

from prefect.utilities.processutils import setup_signal_handlers_worker
from prefect.workers.process import ProcessWorker

from deployments.serve import RUN_LOG_LEVELS, start_metrics_server

DEFAULT_POOL = "unichunk"

log = logging.getLogger(__name__)


def worker_metrics_dir() -> Path:
    """This worker's multiprocess directory when PROMETHEUS_MULTIPROC_DIR is unset: named by the pid, which
    the re-exec of `enter_multiprocess_mode` keeps, so both images of the process agree on it."""
    return Path(tempfile.gettempdir()) / f"unichunk-worker-{os.getpid()}-metrics"


def run_worker(pool: str, *, limit: int | None, metrics_port: int, name: str | None = None) -> None:
    """Poll `pool` and run its flow runs (at most `limit` at once) until stopped; /metrics on
    `metrics_port` (0: none). Blocking."""
    for variable, level in RUN_LOG_LEVELS.items():  # the runs' INFO lines reach the UI, as under `serve`
        os.environ.setdefault(variable, level)
    directory = worker_metrics_dir()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") == str(directory):  # ours, not one the user named
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
    port = start_metrics_server(metrics_port)
    if port:
        log.info("metrics on http://0.0.0.0:%s/metrics", port)
    setup_signal_handlers_worker(os.getpid(), "the unichunk worker", print)
    worker = ProcessWorker(work_pool_name=pool, limit=limit, name=name)
    try:
        asyncio.run(worker.start())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"unichunk worker {worker.name!r} stopped", flush=True)
