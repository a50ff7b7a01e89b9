"""Runs that stop when asked, for a command that runs flows in this process (the CLI).

`stop_on_signals` installs the handlers for the command: the first SIGINT (Ctrl-C) or SIGTERM asks the
running flow to stop (`unichunk.sinks.stop.STOP`, what `unichunk.engine.stop` checks) and says so in one
line; the run then settles the batch being written, puts back what it did not write, ends Cancelled in
Prefect and raises `RunInterrupted` (the CLI exits 130 or 143). A second signal exits at once
(`os._exit`, 128 + the signal): nothing is flushed there that could be half-written, and what the stores
committed stays consistent (qdrant-edge's WAL, SQLite transactions, FalkorDB statements); the rows still
`processing` are redone by the next run, which converges.

Exiting with `os._exit` also keeps the C++ threads of torch and qdrant-edge from being torn down while they
run, which is what printed "terminate called without an active exception" and aborted (exit -6) when the
interpreter shut down in the middle of a batch.

A model load or an embedding call cannot be interrupted; a stop leaves it running in a daemon thread
(`STOP.unless_stopped`), and `leave` ends the command without waiting for it: the run is settled by then
(Cancelled, rows put back), so what is left to do is only to flush what was printed and logged and exit
with `os._exit`, for the same reason as the second signal (and without the seconds of interpreter teardown
a loaded model costs).

`mark_crashed_runs` marks Crashed the runs of a data dir whose process was killed outright
(`unichunk.engine.run_records`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType

from unichunk.engine.run_records import mark_crashed, orphaned
from unichunk.engine.stop import RunInterrupted
from unichunk.local_stack import flush_prefect_queues
from unichunk.sinks.stop import STOP

__all__ = [
    "RunInterrupted",
    "exit_now",
    "exit_status",
    "leave",
    "mark_crashed_runs",
    "stop_on_signals",
    "stopping_line",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(signum: int | None) -> int:
    """What a shell reports for a process ended by `signum`: 128 + its number (130 SIGINT, 143 SIGTERM)."""
    return 128 + int(signum or signal.SIGINT)


def stopping_line(signum: int) -> str:
    """The one line the first signal prints."""
    what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    return (
        f"stopping ({what}): no new batch; the batch being written is finished, the rest is left for the "
        "next run (Ctrl-C again to quit at once)"
    )


@contextmanager
def stop_on_signals(
    announce: Callable[[str], None], before_exit: Callable[[], None] | None = None
) -> Iterator[None]:
    """For the block: the first SIGINT or SIGTERM stops the running flow gracefully (`announce` gets the
    one line), a second one exits at once, after `before_exit` (the CLI gives the terminal back: a
    progress bar hides the cursor, and `os._exit` runs no code that would show it again). Outside the main
    thread (where Python allows no handler) the block runs as it is. The flag is cleared at the end, for
    in-process callers that run on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if STOP.request(signum):
            with suppress(Exception):  # the stop itself must not depend on the terminal
                announce(stopping_line(signum))
            return
        if before_exit is not None:
            with suppress(Exception):
                before_exit()
        for stream in (sys.stdout, sys.stderr):  # what was printed already; no store is flushed here
            with suppress(Exception):
                stream.flush()
        os._exit(exit_status(signum))

    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    STOP.handler = handler
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        STOP.handler = None
        STOP.clear()


def leave(status: int) -> None:
    """End a command whose run was stopped with `status`, at once (`exit_now`): the run is settled
    (Cancelled, rows put back, its stores closed), so what is left is flushing the terminal and Prefect's
    queues. The interpreter's own teardown is skipped: with a model loaded it took 2-6 s of a Ctrl-C's
    wait at load 4-5 (tmux, 2 cores), and a load or an embedding call the stop left behind may still run
    under it."""
    exit_now(status)


def exit_now(status: int) -> None:
    """Exit with `status` at once (`os._exit`), after flushing the terminal and Prefect's log and event
    queues: for a command whose work is done while a model load it cannot interrupt still runs in a daemon
    thread, under which the interpreter's own teardown can hang or abort."""
    flush_prefect_queues()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    os._exit(status)


def mark_crashed_runs(data_dir: Path) -> list[str]:
    """Mark Crashed the flow runs of `data_dir` whose process is gone while Prefect still shows them
    running (the Prefect API of this thread's settings); their IDs. Cheap when there are none: Prefect is
    loaded only when a record names a dead process."""
    if not orphaned(data_dir):
        return []
    return mark_crashed(data_dir)
