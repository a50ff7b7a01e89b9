"""The log lines of the flows a Pipeline runs, when it is used as a library: in the Prefect UI, not on the console.

Prefect's flow-run and task-run loggers send every line to the Prefect API (the UI shows them) and also
pass it up to the root logger, where Prefect's console handler prints it: one `Pipeline.ingest` call would
print a dozen INFO lines ("Beginning flow run", "Finished in state Completed()", ...). While a Pipeline
runs a flow, those loggers stop passing lines up; each line goes to the `unichunk.runs` logger instead, when
that logger is enabled for its level. With Python's and Prefect's defaults (the root logger at WARNING)
warnings and errors still show and INFO lines do not; `logging.getLogger("unichunk.runs").setLevel(
logging.INFO)` shows them all. A caller that already keeps them off its console (the CLI, whose progress
bar they would tear) is left as it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
FORWARDED_TO = "unichunk.runs"


class _Forward(logging.Handler):
    """A run logger's line to `unichunk.runs` (and so to the caller's own handlers), at the level it allows."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(FORWARDED_TO)
        if target.isEnabledFor(record.levelno):
            target.handle(record)


class _Redirect:
    """Who is inside `forwarded` now: the first to enter redirects the run loggers (unless a caller kept
    them off the console already), the last to leave puts them back; Pipelines run flows from threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.owned = False
        self.handler = _Forward()

    def enter(self) -> None:
        loggers = [logging.getLogger(name) for name in RUN_LOGGERS]
        with self.lock:
            if self.inside == 0:
                self.owned = all(logger.propagate for logger in loggers)
                for logger in loggers if self.owned else []:
                    logger.propagate = False
                    logger.addHandler(self.handler)
            self.inside += 1

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1
            if self.inside == 0 and self.owned:
                for logger in (logging.getLogger(name) for name in RUN_LOGGERS):
                    logger.removeHandler(self.handler)
                    logger.propagate = True
                self.owned = False


_REDIRECT = _Redirect()


@contextmanager
def forwarded() -> Iterator[None]:
    """While a Pipeline runs a flow: the run loggers' lines to `unichunk.runs`, not to Prefect's console.
    Enter it after Prefect's server is chosen (it loads Prefect's logging configuration, which would
    otherwise replace the run loggers' set-up when the flow's module first imports Prefect)."""
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()
    _REDIRECT.enter()
    try:
        yield
    finally:
        _REDIRECT.leave()
