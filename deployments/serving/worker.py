"""`unichunk worker`: a Prefect process worker whose flow runs' metrics add up on one /metrics page.

`prefect worker start --pool unichunk` runs each flow run in a subprocess that ends with the run; with
PUSHGATEWAY_URL set, each run pushes its own counts on exit, grouped by instance and flow, so two runs of
one flow on one worker (two shards of a sharded run, say) overwrite each other's group and counts are
lost. `unichunk worker` is that same worker (Prefect's `ProcessWorker`, polling the pool, running runs as
subprocesses, creating the pool as a process pool if it does not exist) in prometheus_client's
multiprocess mode (`unichunk.deployments.serving.multiprocess_metrics`): every run it spawns writes its samples to files
in the worker's own directory (`PROMETHEUS_MULTIPROC_DIR`, else a fresh one under the system's temp dir,
removed when the worker exits: `enter_multiprocess_mode(temporary=True)`), and the worker serves their sum on `/metrics`. Counters then only go up
while the worker lives, `increase()` is right, and runs push nothing (a served run never does). One
Prometheus scrape target per worker; see deployments/prometheus.yml.

Stopping: the first SIGTERM or SIGINT cancels the worker's main task, as asyncio does for Ctrl-C: it
stops polling and shuts Prefect's worker down, which stops the runs in flight (their processes end; a
shard run's parent sees its process gone and starts the shard again on another worker); a second signal
exits at once. (Prefect's `setup_signal_handlers_worker`, which `prefect worker start` installs, forwards
SIGTERM as SIGINT to the process itself; under `asyncio.run` in this process that SIGINT was swallowed in
3.8.8 and the worker never stopped.)
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
