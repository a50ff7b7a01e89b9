"""One line when the Prefect API becomes unreachable and one when it answers again, instead of Prefect's
tracebacks while it is down.

While the Prefect server is down, the runner `unichunk serve` runs (Prefect's `FlowRunCancellingObserver`,
its events websocket, the asyncio callbacks it leaves behind) logs a multi-line traceback at each attempt,
though nothing is wrong here and the webhooks are answered 503 `prefect_unavailable` as documented.
`watch_prefect_api` installs a filter on those loggers (`NOISY_LOGGERS`): a record caused by a failed
connection is dropped and asks the tracker to check; any other record carrying an exception is cut to one
line (its traceback dropped, its exception named), so what Prefect says about it is still read.

The state is found by probing, never guessed from a log record (a stale connection error is logged once
more at shutdown, after the server came back): `PrefectReachability.check` starts one probe thread,
which asks `<PREFECT_API_URL>/health` every `PROBE_SECONDS` until it answers, saying one line when it
does not and one when it answers again. The receiver reports what it meets too (`PrefectEventSink`): an
event Prefect did not take starts a check, one it took is an answer.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable

import httpx

# The loggers Prefect's client side logs connection tracebacks on while the server is down.
NOISY_LOGGERS = (
    "prefect.FlowRunCancellingObserver",
    "prefect.events.clients",
    "prefect.events.worker",
    "prefect.runner",
    "prefect.utilities.services.critical_service_loop",
    "asyncio",
)
PROBE_SECONDS = 2.0  # between two probes of the API's /health while it is down
PROBE_TIMEOUT_SECONDS = 5.0


def _connection_failure(exc: BaseException | None) -> bool:
    """`exc` or an error in its cause chain says a connection could not be made or was lost."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ConnectionError | TimeoutError | httpx.TransportError):
            return True
        if type(exc).__module__.startswith("websockets") and "Connection" in type(exc).__name__:
            return True  # websockets' ConnectionClosed*, without importing it here
        exc = exc.__cause__ or exc.__context__
    return False


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


class PrefectReachability:
    """Whether the Prefect API answers, told in one line per change (`say`)."""

    def __init__(self, api_url: str | None, say: Callable[[str], None]) -> None:
        self.api_url = api_url.rstrip("/") if api_url else None
        self.reachable = True
        self._say = say
        self._lock = threading.Lock()
        self._probe: threading.Thread | None = None

    def check(self) -> None:
        """Something failed to reach Prefect: probe it (in one background thread) until it answers."""
        if self.api_url is None:
            return
        with self._lock:
            if self._probe is not None and self._probe.is_alive():
                return
            self._probe = threading.Thread(
                target=self._probe_until_answered, name="prefect-probe", daemon=True
            )
            self._probe.start()

    def answered(self) -> None:
        """Prefect answered a request: reachable, said once if it was not."""
        with self._lock:
            if self.reachable:
                return
            self.reachable = True
        self._say("the Prefect API is reachable again")

    def _unanswered(self, why: str) -> None:
        with self._lock:
            if not self.reachable:
                return
            self.reachable = False
        self._say(
            f"the Prefect API at {self.api_url} is unreachable ({why}): webhooks are answered 503 "
            "`prefect_unavailable` and served runs cannot start until it answers again"
        )

    def _probe_until_answered(self) -> None:
        stop = threading.Event()
        while True:
            try:
                response = httpx.get(f"{self.api_url}/health", timeout=PROBE_TIMEOUT_SECONDS)
                if response.status_code == 200:
                    self.answered()
                    return
                why = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {_first_line(str(exc)) or 'no answer'}"
            self._unanswered(why)
            stop.wait(PROBE_SECONDS)


class _OutageFilter(logging.Filter):
    """On `NOISY_LOGGERS`: connection failures dropped (and checked), other exceptions cut to one line."""

    def __init__(self, tracker: PrefectReachability) -> None:
        super().__init__()
        self.tracker = tracker

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        if _connection_failure(exc):
            self.tracker.check()
            return False
        try:
            message = _first_line(record.getMessage())
        except Exception:  # a malformed log call: say what there is
            message = _first_line(str(record.msg))
        said = _first_line(str(exc))
        record.msg = f"{message} ({type(exc).__name__}{': ' + said if said else ''})"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


_watch: PrefectReachability | None = None
_watch_lock = threading.Lock()


def watch_prefect_api(api_url: str | None, say: Callable[[str], None]) -> PrefectReachability:
    """Install the filter on `NOISY_LOGGERS` and the process's tracker (once; later calls return it)."""
    global _watch
    with _watch_lock:
        if _watch is None:
            _watch = PrefectReachability(api_url, say)
            quiet = _OutageFilter(_watch)
            for name in NOISY_LOGGERS:
                logging.getLogger(name).addFilter(quiet)
            # Prefect's runner schedules this coroutine from a thread without a loop when its
            # cancellation observer gives up during an outage; the warning at exit says nothing more.
            warnings.filterwarnings(
                "ignore", message="coroutine 'Runner._handle_cancellation_observer_failure' was never awaited"
            )
        return _watch


def prefect_reachability() -> PrefectReachability | None:
    """The process's tracker, once `watch_prefect_api` installed it."""
    return _watch
