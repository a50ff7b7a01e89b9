"""A run asked to stop (the first Ctrl-C or SIGTERM of a CLI run) ends within seconds, leaving nothing half-written.

The request is one process-wide flag, `unichunk.sinks.stop.STOP` (set by `unichunk.stopping`'s signal
handlers). The batch loop (`unichunk.engine.batches`) checks it between batches, and while it waits for a
batch's prepare tasks (`wait_or_stop`): the batch being prepared is abandoned (its model work sees the flag
too and ends within one sub-batch), the one being written is settled (two-phase, undone on failure) and
recorded, the documents chunked but not written go back to `pending`, the leases are released, and
`RunInterrupted` is raised. The flows turn it into a Cancelled flow run (`cancelled`), so the Prefect UI
never shows a stopped run as Running.

Prefect's flow engine puts its own SIGTERM handler in place for the length of a flow run (it raises
`TerminationSignal` wherever the main thread is, and marks the run Crashed); `signals_stop_runs` puts the
application's handler back over it for the flow's body, so SIGTERM stops a CLI run as Ctrl-C does, and
gives a served run (a worker's subprocess, where no command installed one) a handler of its own that does
the same: a shard run stopped by its worker ends Cancelled, its leases released, and its parent retries it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from unichunk.chunking.errors import UnichunkError
from unichunk.sinks.stop import STOP, StopRequested, asked_by

if TYPE_CHECKING:  # Prefect loads with the flows, not with the CLI's handlers (`unichunk.stopping`)
    from prefect.futures import PrefectFuture
    from prefect.states import State

POLL_SECONDS = 0.2  # how often a wait for a prepare task looks at the flag


class RunInterrupted(UnichunkError):
    """The run stopped because it was asked to (`signum`: SIGINT, SIGTERM; `by`: who asked, where the signal
    carried out a cancel from Prefect): what it wrote stays, recorded; what it did not write is left
    `pending` for the next run."""

    def __init__(self, signum: int | None, written: int | None = None, by: str | None = None) -> None:
        self.signum = signum
        self.written = written
        self.by = by
        done = "" if written is None else f"{written} document(s) written by this run; "
        super().__init__(
            f"{by or f'stopped by {asked_by(signum)}'}: {done}any document not written is done by the next run"
        )

    def counting(self, written: int) -> RunInterrupted:
        """The same stop, saying how many documents the run wrote before it."""
        return RunInterrupted(self.signum, written, self.by)

    def __reduce__(self) -> tuple[Any, ...]:  # the flow's Cancelled state carries it
        return (type(self), (self.signum, self.written, self.by))


CANCELLED_IN_PREFECT = "cancelled from Prefect"


def cancelling_in_prefect() -> bool:
    """Whether this flow run is Cancelling in Prefect (Cancel in the UI, `prefect flow-run cancel`): then
    the SIGTERM that stopped it was its runner (serve's, a worker's) carrying the cancel out. Asked only in
    a served run's process (no command installed a stop handler: a CLI run is no runner's to cancel), with
    a short timeout; False outside a flow run and where the API does not answer (the stop goes on, named
    by its signal)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    if STOP.handler is not None or context is None or context.flow_run is None:
        return False
    try:
        with get_client(httpx_settings={"timeout": 3.0}, sync_client=True) as client:
            state = client.read_flow_run(context.flow_run.id).state
    except Exception:  # only the wording of the message depends on it
        return False
    return state is not None and state.type == StateType.CANCELLING


def stopping() -> bool:
    """Whether a stop was asked for (no new batch is taken once it was)."""
    return STOP.requested


def interrupted() -> RunInterrupted:
    """The stop asked of this process, as the run's exception (a SIGTERM carrying out a cancel from
    Prefect says so)."""
    by = CANCELLED_IN_PREFECT if STOP.signum == signal.SIGTERM and cancelling_in_prefect() else None
    return RunInterrupted(STOP.signum, by=by)


def wait_or_stop(future: PrefectFuture[Any]) -> None:
    """Wait for `future` unless a stop is asked for (before or meanwhile): then raise `RunInterrupted` at
    once, whatever the task did (it is abandoned: a prepare touches no store, and ends by itself within one
    sub-batch of its model work)."""
    while not STOP.requested:
        if future.wrapped_future.done():  # type: ignore[attr-defined]
            return
        try:
            future.wait(timeout=POLL_SECONDS)
        except StopRequested:  # the task saw the stop first; Prefect's wait re-raises what it let through
            break
    raise interrupted()


def cancelled(exc: RunInterrupted) -> State:
    """The flow run's final state for a run that stopped when asked: Cancelled, carrying `exc` (the
    caller's `run_result` raises it, and the CLI exits 130 or 143)."""
    from prefect.states import Cancelled

    return Cancelled(message=str(exc), data=exc)


def _stop_served_run(signum: int, frame: Any) -> None:
    """SIGTERM in a served run's own process (a worker's or `unichunk serve`'s subprocess for this run, where
    no command installed a handler): the first asks the run to stop, as a CLI run's does; a second exits at
    once, as a second Ctrl-C does."""
    if not STOP.request(signum):
        os._exit(128 + signum)


@contextmanager
def signals_stop_runs() -> Iterator[None]:
    """For a flow's body: SIGTERM stops the run instead of going to Prefect's crash bridge; restored
    afterwards. The handler is the application's (`STOP.handler`) when a CLI command installed one; in a
    served run's process (none installed) it is `_stop_served_run`, and the stop it asked is forgotten at
    the end (the process may run on). Model loads stay uninterruptible there (`STOP.unless_stopped` needs
    a command to leave a load behind): the run stops after one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = STOP.handler or _stop_served_run
    previous = signal.signal(signal.SIGTERM, handler)
    own = STOP.handler is None and previous is not _stop_served_run  # not nested in another guarded run
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if own:
            STOP.clear()
