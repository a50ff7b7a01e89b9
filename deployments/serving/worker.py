"""`unichunk worker`: a Prefect process worker whose flow runs' metrics add up on one /metrics page.

Under `prefect worker start`, each run pushes its own counts to the Pushgateway, grouped by instance and
flow, so two runs of one flow on one worker (two shards) overwrite each other's. This is the same worker
(Prefect's `ProcessWorker`, creating the pool as a process pool if it is missing) in prometheus_client's
multiprocess mode, in a temporary directory of its own (`unichunk.deployments.serving.multiprocess_metrics`):
its runs push nothing and its /metrics sums them, one Prometheus target per worker.

The first SIGTERM or SIGINT cancels the worker's main task, which stops polling and stops the runs in flight
(a shard's parent retries it elsewhere); a second exits at once. Prefect's own handler, which forwards
SIGTERM as SIGINT, is not used: under `asyncio.run` here that SIGINT was swallowed and the worker never
stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from prefect.workers.process import ProcessWorker

from unichunk.deployments.serving.serve import RUN_LOG_LEVELS, start_metrics_server

DEFAULT_POOL = "unichunk"

log = logging.getLogger(__name__)


def run_worker(pool: str, *, limit: int | None, metrics_port: int, name: str | None = None) -> None:
    """Poll `pool` and run its flow runs (at most `limit` at once) until stopped; /metrics on
    `metrics_port` (0: none). Blocking."""
    for variable, level in RUN_LOG_LEVELS.items():  # the runs' INFO lines reach the UI, as under `serve`
        os.environ.setdefault(variable, level)
    port = start_metrics_server(metrics_port)
    if port:
        log.info("metrics on http://0.0.0.0:%s/metrics", port)
    worker = ProcessWorker(work_pool_name=pool, limit=limit, name=name)
    asyncio.run(_work_until_stopped(worker))
    print(f"unichunk worker {worker.name!r} stopped", flush=True)


async def _work_until_stopped(worker: ProcessWorker) -> None:
    """`worker.start()` until the first SIGTERM or SIGINT cancels it (see the module docstring)."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None

    def stop(signum: signal.Signals) -> None:
        print(f"unichunk worker: {signum.name} received, stopping (again: exit at once)", flush=True)
        for again in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(again, os._exit, 1)
        main.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    with contextlib.suppress(asyncio.CancelledError):
        await worker.start()
