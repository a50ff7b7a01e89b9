"""The deployments and the process that serves them.

- `ingest`: ad-hoc runs from the Prefect UI or `prefect deployment run`; `reindex`: the nightly safety net
  on UNICHUNK_REINDEX_CRON; `ingest-shard`: one shard of a run given `shards=N`, started by that run
  (`unichunk.engine.shards`), never by hand;
- `rebuild`: a new index generation beside the live one after changing the chunking settings (its form),
  the embedder or the extractor; `switch-generation`: roll back to a retained generation, or on;
- `ingest-document` and `delete-document`: fired by the "document.updated" / "document.deleted" events the
  webhook receiver emits, their parameters Jinja templates the server renders from the event.

`serve_all()` serves them in this one process (Prefect's `Runner`: each flow run is a subprocess), exposes
/metrics on UNICHUNK_METRICS_PORT, and stops within `STOP_DEADLINE_SECONDS` of SIGTERM or SIGINT
(`ServeRunner`). Run processes inherit its environment, so it sets the run loggers to INFO there
(`RUN_LOG_LEVELS`): they would otherwise inherit the WARNING level `unichunk serve` keeps for Prefect's own
loggers, and a successful run would log nothing. One served process suits one machine; prefect.yaml
declares the same deployments for a work pool of `unichunk worker`s (docs/operations.md, "Scaling out").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.events import DeploymentEventTrigger
from prefect.runner import Runner
from prefect.settings import get_current_settings
from prefect.types.entrypoint import EntrypointType
from prometheus_client import start_http_server

from unichunk.deployments.service.prefect_outage import watch_prefect_api
from unichunk.deployments.serving.multiprocess_metrics import enter_multiprocess_mode, exposition_registry
from unichunk.deployments.settings import ServiceSettings
from unichunk.flows.documents import delete_document, ingest_document
from unichunk.flows.ingest import ingest
from unichunk.flows.ingest_shard import ingest_shard
from unichunk.flows.rebuild import rebuild
from unichunk.flows.reindex import reindex
from unichunk.flows.switch import switch_generation
from unichunk.sinks.config import SinkSettings

UPDATED_EVENT = "document.updated"
DELETED_EVENT = "document.deleted"
DOCUMENT_RESOURCE = "unichunk.document.*"
DEPLOYMENT_NAMES = (
    "ingest",
    "reindex",
    "ingest-shard",
    "ingest-document",
    "delete-document",
    "rebuild",
    "switch-generation",
)

# Tags of each deployment's runs, to filter them by in the UI: `unichunk`, what starts the run (`ad-hoc`,
# `scheduled`, `webhook`) and what it does (`ingest`, `delete`, `generations`).
TAGS: dict[str, list[str]] = {
    "ingest": ["unichunk", "ingest", "ad-hoc"],
    "reindex": ["unichunk", "ingest", "scheduled"],
    "ingest-shard": ["unichunk", "ingest", "shard"],
    "ingest-document": ["unichunk", "ingest", "webhook"],
    "delete-document": ["unichunk", "delete", "webhook"],
    "rebuild": ["unichunk", "generations", "ad-hoc"],
    "switch-generation": ["unichunk", "generations", "ad-hoc"],
}

# Runs of one deployment at once, across every process serving it (a Prefect deployment concurrency
# limit, held on the server). One `ingest`, `rebuild` or `switch-generation` at a time, the next waiting
# (ENQUEUE: AwaitingConcurrencySlot, re-checked every 30 s) before any process starts or loads a model;
# a `reindex` that finds the last one still running is cancelled (CANCEL_NEW), since the running one
# covers the same ground. The webhook flows have none: their bursts are throttled by the serving process
# (`UNICHUNK_SERVE_RUN_LIMIT`, `prefect worker start --limit`), which starts a waiting run at its next
# poll, not 30 s later, and document leases already keep two runs off one document. Neither has
# `ingest-shard`: a sharded run's shards must run side by side (the parent's own slot is its limit), each
# worker taking as many as its `--limit` allows. Prefect 3.8.8 keeps
# the slot's lease in the server's memory by default: a server restart ends a limited run that is in
# flight (its lease renewal fails; the next run redoes its documents) unless the server is given
# PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE=prefect.server.concurrency.lease_storage.filesystem.
CONCURRENCY: dict[str, ConcurrencyLimitConfig] = {
    "ingest": ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
    "reindex": ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
    "rebuild": ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
    "switch-generation": ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
}

# The run loggers' level in the run processes (see the module docstring); Prefect reads these variables
# when a run process configures its logging.
RUN_LOG_LEVELS = {
    "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "INFO",
    "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "INFO",
}

# After SIGTERM or SIGINT: Prefect cancels the in-flight runs (each run process gets SIGTERM, its run ends
# Cancelled); a run process still alive after STOP_KILL_AFTER_SECONDS is killed (its run still ends
# Cancelled); at STOP_DEADLINE_SECONDS the process exits whatever is left. All under the 10 s that container
# runtimes and systemd commonly allow before they SIGKILL (docker's default).
STOP_KILL_AFTER_SECONDS = 3.0
STOP_DEADLINE_SECONDS = 8.5

log = logging.getLogger(__name__)


def ingest_document_parameters(settings: ServiceSettings) -> dict[str, Any]:
    """Flow parameters rendered from the triggering event (templates kept whole so types survive)."""
    parameters: dict[str, Any] = {
        "path": "{{ event.payload.path }}",
        "source_system": "{{ event.payload.source_system }}",  # the receiver always fills it in
        "source_id": "{{ event.payload.source_id }}",
        "labels": "{{ event.payload.labels }}",  # null: the document's own labels stay as they are
    }
    if settings.source_root is not None:
        parameters["root"] = str(settings.source_root.resolve())
    if settings.webhook_batching:  # the receiver queued the update under the event's id
        parameters["entry"] = "{{ event.id | string }}"  # a UUID: `tojson` takes no UUID
    return parameters


def build_deployments(
    settings: ServiceSettings | None = None, names: tuple[str, ...] | list[str] = DEPLOYMENT_NAMES
) -> list[Any]:
    """The RunnerDeployments to serve (only those in `names`), with schedules and triggers attached."""
    settings = settings or ServiceSettings()
    # The configured source, or none: then `ingest` and `reindex` re-scan every source ingested before.
    source = {"params": {"source": settings.source()}} if settings.source() else {"params": {}}
    # Module entrypoints: flow runs import `unichunk.flows.*` wherever the package is installed, whatever the cwd.
    base: dict[str, Any] = {"entrypoint_type": EntrypointType.MODULE_PATH}

    def options(name: str) -> dict[str, Any]:
        return {**base, "tags": TAGS[name], "concurrency_limit": CONCURRENCY.get(name)}

    builders = {
        "ingest": lambda: ingest.to_deployment(
            "ingest",
            parameters=source,
            description="Ad-hoc ingestion of a directory or files.",
            **options("ingest"),
        ),
        "reindex": lambda: reindex.to_deployment(
            "reindex",
            cron=settings.reindex_cron,
            parameters=source,
            description="Scheduled full incremental scan plus alignment check and repair.",
            **options("reindex"),
        ),
        "ingest-shard": lambda: ingest_shard.to_deployment(
            "ingest-shard",
            description="One shard of a sharded ingest or reindex run (started by that run).",
            **options("ingest-shard"),
        ),
        "ingest-document": lambda: ingest_document.to_deployment(
            "ingest-document",
            triggers=[
                DeploymentEventTrigger(
                    name="unichunk: document updated",
                    expect={UPDATED_EVENT},
                    match={"prefect.resource.id": DOCUMENT_RESOURCE},
                    parameters=ingest_document_parameters(settings),
                )
            ],
            description="Re-ingest one document when a webhook reports it changed.",
            **options("ingest-document"),
        ),
        "delete-document": lambda: delete_document.to_deployment(
            "delete-document",
            triggers=[
                DeploymentEventTrigger(
                    name="unichunk: document deleted",
                    expect={DELETED_EVENT},
                    match={"prefect.resource.id": DOCUMENT_RESOURCE},
                    parameters={"document_id": "{{ event.payload.document_id }}"},
                )
            ],
            description="Remove one document from every sink when a webhook reports it deleted.",
            **options("delete-document"),
        ),
        "rebuild": lambda: rebuild.to_deployment(
            "rebuild",
            parameters=source,
            description="Build a new index generation with new settings, verify it, switch readers to it.",
            **options("rebuild"),
        ),
        "switch-generation": lambda: switch_generation.to_deployment(
            "switch-generation",
            description="Roll back to the last retired index generation (or switch to a given one).",
            **options("switch-generation"),
        ),
    }
    unknown = set(names) - set(builders)
    if unknown:
        raise ValueError(f"unknown deployment(s) {sorted(unknown)}; known: {list(builders)}")
    return [builders[name]() for name in names]


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> int | None:
    """Expose /metrics (port 0 = disabled); returns the bound port.

    Under `unichunk serve` (multiprocess mode, `unichunk.deployments.serving.multiprocess_metrics`) the page sums this
    process's samples and every flow run's, so counters add up across runs; elsewhere it is this
    process's default registry."""
    if port == 0:
        return None
    server, _thread = start_http_server(port, addr=addr, registry=exposition_registry())
    return server.server_port


def child_pids(pid: int | None = None) -> list[int]:
    """The live child processes of `pid` (default: this process) in its process group, from /proc ([] where
    there is none).

    For `unichunk serve` these are exactly the flow-run processes: the webhook receiver and /metrics are
    threads, and a server it started for others (the local Prefect server) runs in its own session."""
    parent = os.getpid() if pid is None else pid
    try:
        group = os.getpgid(parent)
    except ProcessLookupError:
        return []
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # fields after the command name (which may hold spaces and parentheses): state ppid pgrp ...
            state, ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(ppid) == parent and int(pgrp) == group and state != "Z":
                children.append(int(stat.parent.name))
    return children


class ServeRunner(Runner):
    """Prefect's Runner, stopping within `STOP_DEADLINE_SECONDS` of SIGTERM or SIGINT.

    Not `prefect.serve` as it is: on SIGTERM it leaves its in-flight runs Running in the UI (its handler's
    `Runner.stop()` returns a coroutine nobody awaits), and on SIGINT it waits for every run to finish. Here
    both signals set one stop event, then the runner's `astop()` cancels the in-flight runs (each ends
    Cancelled; the next run of the source redoes what they left), a run process still busy after
    `STOP_KILL_AFTER_SECONDS` is killed (the stores survive a killed writer, `tests/faults/`), and a watchdog
    thread exits the process at `STOP_DEADLINE_SECONDS` whatever is pending. A SIGINT its parent set to be
    ignored (a shell's background job) stays ignored, as Unix programs do.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop_event: asyncio.Event | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._stop_reason: str | None = None

    def handle_sigterm(self, *args: Any, **kwargs: Any) -> None:
        """Installed by `Runner.start()` for SIGTERM; replaces Prefect's (see the class docstring)."""
        self.request_stop("SIGTERM")

    def request_stop(self, reason: str) -> None:
        """Ask the runner to stop (from a signal handler or any thread); later requests change nothing."""
        if self._stop_reason is not None or self._event_loop is None or self._stop_event is None:
            return
        self._stop_reason = reason
        # The stop is set in motion before it is announced: nothing a line on stderr does can lose it.
        threading.Thread(target=self._deadline, name="serve-stop-deadline", daemon=True).start()
        self._event_loop.call_soon_threadsafe(self._stop_event.set)
        _say(f"{reason} received, stopping: in-flight runs are cancelled")

    def _deadline(self) -> None:
        time.sleep(STOP_DEADLINE_SECONDS)
        killed = _kill_children()
        _say(
            f"not stopped after {STOP_DEADLINE_SECONDS:.1f} s: exiting now ({killed} run process(es) killed)"
        )
        os._exit(0)

    async def serve_until_stopped(self) -> None:
        """`start()` until it ends by itself or a stop is requested, then stop as the class docstring says."""
        self._event_loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        stop_signals = _stop_signals()
        if signal.SIGTERM in stop_signals:  # `start()` installs `handle_sigterm`, to the same effect
            signal.signal(signal.SIGTERM, self.handle_sigterm)
        if signal.SIGINT in stop_signals:
            self._event_loop.add_signal_handler(signal.SIGINT, self.request_stop, "SIGINT")
        serving = asyncio.create_task(self.start())
        stopping = asyncio.create_task(self._stop_event.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            stopping.cancel()
            serving.result()  # the runner ended by itself: raise what ended it
            return
        begun = time.monotonic()
        if self.started:
            cancelling = asyncio.create_task(self.astop())
            await asyncio.wait({cancelling}, timeout=STOP_KILL_AFTER_SECONDS)
            if not cancelling.done() and (killed := _kill_children()):
                _say(f"killed {killed} run process(es) still running after {STOP_KILL_AFTER_SECONDS:.0f} s")
            await asyncio.wait({cancelling}, timeout=_left(begun))
        else:  # stopped while registering with the API: nothing runs yet
            serving.cancel()
        await asyncio.wait({serving}, timeout=_left(begun))
        _say(f"stopped ({self._stop_reason}, {time.monotonic() - begun:.1f} s)")


def _left(begun: float) -> float:
    """Seconds left before the watchdog, less a margin for the interpreter to exit."""
    return max(0.1, STOP_DEADLINE_SECONDS - 1.0 - (time.monotonic() - begun))


def _kill_children() -> int:
    killed = 0
    for pid in child_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def _say(message: str) -> None:
    """A lifecycle line on stderr (not the log: an operator reads it in the terminal or `docker logs`).
    Never raises: when stderr is gone (`unichunk serve | tee log` and Ctrl-C, which ends `tee` too) the
    line is lost, not the stop it announces (a BrokenPipeError here once left serve running for ever,
    deaf to every later SIGINT and SIGTERM)."""
    with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed file
        print(f"unichunk serve: {message}", file=sys.stderr, flush=True)


class StopBeforeServing(BaseException):
    """SIGTERM or SIGINT while the deployments are still being registered. A BaseException, as
    KeyboardInterrupt is, so no `except Exception` on the way (a client's retry loop) swallows it."""


def _stop_before_serving(signum: int, _frame: Any) -> None:
    raise StopBeforeServing(signal.Signals(signum).name)


def _stop_signals() -> list[signal.Signals]:
    """SIGTERM, and SIGINT unless the parent set it to be ignored (see `ServeRunner`); none off the main
    thread, where Python allows no signal handler."""
    if threading.current_thread() is not threading.main_thread():
        return []
    ignored = signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None)
    return [signal.SIGTERM] + ([] if ignored else [signal.SIGINT])


def serve_all(
    names: tuple[str, ...] | list[str] = DEPLOYMENT_NAMES,
    settings: ServiceSettings | None = None,
) -> None:
    """Register and serve the deployments against PREFECT_API_URL until SIGTERM or SIGINT (blocking).

    At most `serve_run_limit` flow runs execute at once; the rest stay scheduled until a slot frees, so a
    burst of webhooks queues instead of starting twenty processes that load the models together. A stop
    signal during registration ends it at once (exit 0, nothing runs yet); once serving, `ServeRunner`."""
    settings = settings or ServiceSettings()
    for name, level in RUN_LOG_LEVELS.items():  # before any run process starts: they inherit it
        os.environ.setdefault(name, level)
    watch_prefect_api(get_current_settings().api.url, _say)  # an outage: two lines, not tracebacks
    previous = {signum: signal.signal(signum, _stop_before_serving) for signum in _stop_signals()}
    try:
        deployments = build_deployments(settings, names)
        port = start_metrics_server(settings.metrics_port)
        if port:
            log.info("metrics on http://0.0.0.0:%s/metrics", port)
        runner = ServeRunner(limit=settings.serve_run_limit, pause_on_shutdown=True)
        for deployment in deployments:
            runner.add_deployment(deployment)
        _say(
            f"serving {len(deployments)} deployment(s): {', '.join(d.name for d in deployments)} "
            "(SIGTERM or Ctrl-C stops)"
        )
        asyncio.run(runner.serve_until_stopped())
    except StopBeforeServing as stop:
        _say(f"{stop} received while registering the deployments: stopped")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":  # python -m unichunk.deployments.serving.serve [name ...]
    enter_multiprocess_mode(SinkSettings().data_dir)  # re-executes this command once (see that module)
    logging.basicConfig(level=logging.INFO)
    serve_all(tuple(sys.argv[1:]) or DEPLOYMENT_NAMES)
