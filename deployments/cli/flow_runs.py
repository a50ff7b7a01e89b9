"""The CLI around the flows it runs in this process: which Prefect server they report to, and a terminal
kept readable while they run.

PREFECT_API_URL when set (checked to answer, so a dead one fails at once in one line instead of after
Prefect's retries); else the data dir's local Prefect server (`unichunk.local_stack`), started or reused,
one line saying which. Prefect's console logging of flow and task runs, with its tracebacks, stays off the
terminal (the flow-run logs still reach the Prefect API at INFO, for the UI); the flows' warnings and what
reaches the root logger print as `warning: ...` lines through the progress bar's console, so they never
tear the bar; the vector sink's per-document truncation warnings are counted and printed once, after the
run. UNICHUNK_DEBUG=1 keeps Prefect's own console logging.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterator

import httpx
from rich.text import Text

from unichunk import local_stack as stack
from unichunk.deployments.cli.console import err_console
from unichunk.deployments.cli.failures import debug
from unichunk.errors import Unreachable, UsageError
from unichunk.run_logs import RUN_LOGGERS
from unichunk.settings import SinkSettings


class _FlowWarnings(logging.Handler):
    """The flows' warnings (a source skipped, known-unreadable files) on the terminal, one line each.

    Errors are not repeated here: each failed document and a failed run get the CLI's own line."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            return
        try:
            message = record.getMessage()
        except Exception:  # a malformed log call must not end the command
            message = str(record.msg)
        err_console.print(Text.assemble(("warning:", "yellow"), " ", message))


_FLOW_WARNINGS = _FlowWarnings()
# Prefect's background senders of events and logs say "Still processing items: N items remaining..." as a
# WARNING while they drain at exit, after the command's last line: progress, not a problem.
DRAINING_LOGGERS = ("EventsWorker", "APILogWorker")


@contextlib.contextmanager
def _quiet_run_loggers() -> Iterator[None]:
    """While a command runs flows in this process: Prefect's flow-run and task-run loggers stop
    propagating to the root logger, whose console handler would print every run error with its
    traceback, and print their warnings through `_FlowWarnings`; their own handler still sends every
    line (INFO and up) to the Prefect API. Restored afterwards, for in-process callers (tests) that
    capture those logs from the root logger. Prefect's draining workers are quieted for good."""
    for name in DRAINING_LOGGERS:  # they speak at exit, after this context: not restored
        logging.getLogger(name).setLevel(logging.ERROR)
    loggers = [logging.getLogger(name) for name in RUN_LOGGERS]
    saved = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.propagate = False
        logger.addHandler(_FLOW_WARNINGS)
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, saved, strict=True):
            logger.propagate = propagate
            logger.removeHandler(_FLOW_WARNINGS)


# The vector sink's warning for a document whose chunks were longer than the embedder's input
# (`unichunk.sinks.vectors.sink`, one per document): counted during a command and reported once, with the count.
TRUNCATION_LOGGER = "unichunk.sinks.vectors.sink"
_TRUNCATION = re.compile(r"(\d+) chunk\(s\) over (.+?)'s limit of (\d+) tokens")


class _TerminalLog(logging.Handler):
    """While a command runs flows: what reaches the root logger (libraries' and our sinks' warnings),
    printed through the CLI's stderr console, one `warning: ...` line each (the first line of the message:
    tracebacks stay for UNICHUNK_DEBUG=1). A progress bar draws on that console, so these lines print above
    it instead of through it. The vector sink's truncation warnings are only counted; `summary()` is the
    one line about them, printed when the command's flows are done."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.truncated: dict[tuple[str, str], list[int]] = {}  # (embedder, limit) -> [documents, chunks]

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed log call must not end the command
            message = str(record.msg)
        if record.name == TRUNCATION_LOGGER and (found := _TRUNCATION.search(message)):
            counts = self.truncated.setdefault((found[2], found[3]), [0, 0])
            counts[0] += 1
            counts[1] += int(found[1])
            return
        first = message.strip().splitlines()[0] if message.strip() else record.levelname.lower()
        err_console.print(Text.assemble(("warning:", "yellow"), " ", first))

    def summary(self) -> list[str]:
        return [
            f"{documents} document(s) had chunks over {embedder}'s limit of {limit} tokens ({chunks} "
            "chunk(s) in all): only the start of each is embedded; smaller chunks suit this embedder "
            "better (`unichunk rebuild --chunk-size ...`)"
            for (embedder, limit), (documents, chunks) in self.truncated.items()
        ]


@contextlib.contextmanager
def terminal_logging() -> Iterator[None]:
    """Prefect's console handler on the root logger (its `| WARNING |` lines, written straight to stderr
    through any progress bar) replaced by `_TerminalLog` while the command runs flows, and Python warnings
    (`warnings.warn`, also written straight to stderr) logged there too; then the truncation summary.
    The truncation records reach it whatever level a logging configuration set for our loggers: the summary is the command's report, not a log line. Restored afterwards, for in-process
    callers (tests)."""
    from prefect.logging.handlers import PrefectConsoleHandler

    root = logging.getLogger()
    replaced = [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]
    terminal = _TerminalLog()
    for handler in replaced:
        root.removeHandler(handler)
    root.addHandler(terminal)
    truncation = logging.getLogger(TRUNCATION_LOGGER)
    truncation_level = truncation.level
    if truncation.getEffectiveLevel() > logging.WARNING:
        truncation.setLevel(logging.WARNING)
    capture = warnings.showwarning is not logging._showwarning  # type: ignore[attr-defined]
    if capture:
        logging.captureWarnings(True)
    try:
        yield
    finally:
        if capture:
            logging.captureWarnings(False)
        root.removeHandler(terminal)
        truncation.setLevel(truncation_level)
        for handler in replaced:
            root.addHandler(handler)
        for line in terminal.summary():
            err_console.print(Text.assemble(("warning:", "yellow"), " ", line))


def check_prefect_api(api_url: str) -> None:
    """Fail at once, in one line, when PREFECT_API_URL does not answer, instead of after Prefect's client
    retries. Only a transport failure counts: any HTTP answer (an auth-protected or Cloud API answering 401
    or 404 on /health) means something is there, and Prefect's client reports the rest."""
    try:
        httpx.get(f"{api_url.rstrip('/')}/health", timeout=httpx.Timeout(10.0, connect=5.0))
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise UsageError(f"PREFECT_API_URL={api_url}: not an http(s) URL ({exc})") from None
    except httpx.TransportError as exc:
        cause = f"{type(exc).__name__}: {str(exc).strip()}".rstrip(": ")
        raise Unreachable(f"cannot reach the Prefect API at {api_url} (PREFECT_API_URL): {cause}") from None


@contextlib.contextmanager
def prefect_api(*, route_logs: bool = True) -> Iterator[None]:
    """Around every command that talks to Prefect (enter it before importing any flow):
    PREFECT_API_URL (checked to answer), or else the data dir's local Prefect server (started or reused,
    one line saying which), and a terminal free of Prefect's run logging (`_quiet_run_loggers`) with the
    rest of the logging routed through the CLI's console (`terminal_logging`; not for the long-running
    servers, `serve` and `mcp`, whose logs stay Prefect's). Neither with UNICHUNK_DEBUG=1."""
    started_here = False
    in_use = contextlib.ExitStack()  # the local server stays in use until the command ends
    api = in_use.enter_context(stack.prefect_api(SinkSettings(), in_process=False))
    if api.local is not None:
        err_console.print(api.local.announce(), style="dim")
        # Before Prefect is first imported, so its global settings and every thread's see it.
        os.environ["PREFECT_API_URL"] = api.url
        started_here = True
    else:
        check_prefect_api(api.url)
    # Prefect loads only here. It configures its logging (replacing the handlers of its loggers) when its
    # flow API is first imported, which would undo `_quiet_run_loggers`: configure it first.
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.settings import PREFECT_API_URL, temporary_settings

    ensure_logging_setup()
    try:
        with contextlib.ExitStack() as stack_:
            if started_here:  # Prefect may have been imported already (in-process callers)
                stack_.enter_context(
                    temporary_settings(updates={PREFECT_API_URL: os.environ["PREFECT_API_URL"]})
                )
            if not debug():
                stack_.enter_context(_quiet_run_loggers())
                if route_logs:
                    stack_.enter_context(terminal_logging())
            yield
    finally:
        if started_here:
            os.environ.pop("PREFECT_API_URL", None)
        in_use.close()
