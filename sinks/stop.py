"""A stop asked of this process (the first Ctrl-C or SIGTERM of a CLI run), checked by the long model work.

Embedding or extracting one batch can take minutes on a busy laptop CPU, and Prefect's task runner waits
for a running task before its flow can end, so the model work itself checks `STOP` between small
sub-batches (`STOP.check()`), and a stopped run ends within one sub-batch instead of one batch. The flag
lives here, in the lowest layer that checks it (the sinks may not import the engine); the batch loop
checks it too (`unichunk.engine.stop`), and the application layer sets it from its signal handlers
(`unichunk.stopping`). Nothing here touches a store: a prepare that stops has written nothing.

Loading a model (importing torch, transformers and spaCy, reading the weights) takes seconds and cannot be
interrupted, so `STOP.unless_stopped` runs a load in a daemon thread and stops waiting for it once a stop is
asked: the task returns at once and the load is left behind (`STOP.abandoned`). The command then exits
without waiting for it (`unichunk.stopping.leave`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def asked_by(signum: int | None) -> str:
    """The signal a stop was asked with, as a run's messages name it ("SIGINT"; "a stop request" without one)."""
    return signal.Signals(signum).name if signum else "a stop request"


class StopRequested(BaseException):
    """Raised inside model work once a stop is asked for (its argument: the signal number). A
    BaseException, as KeyboardInterrupt is: it passes every `except Exception` (a sink's per-document
    isolation, a task's retries) on its way out, so a stopped batch is abandoned, never recorded as
    failed."""

    @property
    def asked_by(self) -> str:
        return asked_by(self.args[0] if self.args else None)


class StopFlag:
    """Whether this process has been asked to stop its runs, and by which signal (the first one counts)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None
        # The signal handler a CLI command installed (`unichunk.stopping`), which the flows put back over
        # Prefect's own SIGTERM handler for their body (`unichunk.engine.stop.signals_stop_runs`).
        self.handler: Callable[[int, Any], None] | None = None
        self.abandoned: list[threading.Thread] = []  # loads left running by `unless_stopped`

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signum: int = signal.SIGINT) -> bool:
        """Ask for a stop; True the first time (the caller announces it), False after."""
        if self._event.is_set():
            return False
        self.signum = signum
        self._event.set()
        return True

    def clear(self) -> None:
        """Forget a stop once the command that asked for it is done (in-process callers run on)."""
        self._event.clear()
        self.signum = None

    def check(self) -> None:
        """Raise `StopRequested` if a stop was asked for: called between sub-batches of model work."""
        if self._event.is_set():
            raise StopRequested(self.signum)

    def unless_stopped(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)`, which cannot check for a stop itself (a model load), run in a daemon thread
        and waited for until it returns or a stop is asked: then `StopRequested`, and the thread is left
        in `abandoned`. Without a stop handler installed (no CLI command runs) it is simply called."""
        if self.handler is None:
            return fn(*args, **kwargs)
        self.check()
        outcome: list[Any] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                outcome.append(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the waiting thread, which raises it
                failure.append(exc)

        worker = threading.Thread(target=run, name=f"load-{getattr(fn, '__name__', 'model')}", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
            if self._event.is_set() and worker.is_alive():
                self.abandoned.append(worker)
                raise StopRequested(self.signum)
        if failure:
            raise failure[0]
        return outcome[0]

    def abandoned_work(self) -> bool:
        """Whether a load left behind by a stop still runs (the process should not wait for it)."""
        return any(thread.is_alive() for thread in self.abandoned)

    def checked(self, items: Iterable[T]) -> Iterator[T]:
        """`items`, checking for a stop before each (for a lazy pipeline such as spaCy's `nlp.pipe`)."""
        for item in items:
            self.check()
            yield item


STOP = StopFlag()
