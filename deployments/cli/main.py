"""`unichunk`: ingest, search, inspect and verify from a shell.

`ingest`, `delete`, `rebuild`, `generations` and `demo` run the real Prefect flows in this process, and
`serve` serves them, against PREFECT_API_URL; with it unset, against the data dir's **local Prefect
server**, which the first such command starts (detached, on a free port, recorded under
`<data dir>/stack`) and later ones reuse, each saying so in one line (`unichunk.local_stack` says why not
Prefect's ephemeral server). `unichunk down` stops it and the embedded FalkorDB; `demo` ends by naming
what it left running. `search`, `status` and `delete` ask the service `unichunk serve` runs for this data
dir (or UNICHUNK_SERVICE_URL) when there is one (`unichunk.deployments.cli.service_client`); otherwise `search`,
`status` and `verify` read the stores directly.

Output. Everything printed that comes from data (file names, source IDs, error texts, queries) is printed
literally: the consoles interpret no Rich markup and no emoji codes, so `[red]x[bold] y.txt` or an error's
`[vectors]` prints as it is; styling is applied to our own words only (`Text`). A failed document is one
line, `failed  <source>: <error>`, and a command that cannot finish is one line, `error: <cause>`: Prefect's
console logging of flow and task runs, with its tracebacks, is kept off the terminal (the flow-run logs still
reach the Prefect API at INFO, for the UI; the flows' warnings are shown as `warning: ...` lines).
UNICHUNK_DEBUG=1 shows tracebacks and Prefect's console logging again.

Exit codes (also in `--help` and docs/operations.md):

- 0: done.
- 1: not everything is right: a document failed, `verify` found the stores misaligned, a rebuild was
  refused, or the document or generation the command names does not exist (`delete`, `generations drop`:
  nothing done, as `rm` or `kubectl delete` of a missing name). Re-running after fixing the documents (or
  `unichunk verify` after a repair) gives 0.
- 2: nothing was done, the command cannot run as given: a bad option or argument, a missing path, or
  settings that differ from the live index generation
  (`GenerationMismatch`). The last is here, not under 3, because nothing is broken and retrying will not
  help: the user chooses between `unichunk rebuild` and setting the old settings back.
- 3: infrastructure failure: a store, model or service unreachable or failing (FalkorDB, Neo4j, Qdrant,
  an embedding endpoint), the Prefect API unreachable, a run that crashed, or an unexpected error.
  Retrying once the cause is fixed is the remedy; the documents' states are intact either way.
- 130: interrupted with Ctrl-C (128 + SIGINT, as shells report it; Click's own handling would exit 1, as if
  a document had failed). The next run redoes what the interrupted one left.

Output for scripts: `--json` on every command that prints data (`ingest`, `rebuild`, `search`, `status`,
`verify`, `delete`, `generations list/switch/drop`, `up`) prints one JSON document on stdout and nothing
else there; progress bars, announcements, warnings and the `error:` line go to stderr, and the exit codes
are the same. `unichunk --version` prints `unichunk.__version__`.

Logs. While a command runs flows in this process, what reaches the root logger (libraries' and our sinks'
warnings) is printed through the progress bar's console, one `warning: ...` line each, so it never tears
the bar; the vector sink's per-document warnings of chunks over the embedder's input limit are counted and
printed once, after the run (`_TerminalLog`).

Settings are checked before anything starts (`_startup_checks`): a pydantic error names the option
(`--strategy`) or the variable (`UNICHUNK_EMBEDDER`) it came from, an OpenAI embedder with neither key nor
base URL and an LLM extractor without a base URL fail in one line, an unknown document or generation is
refused before any flow or Prefect server starts, and a PREFECT_API_URL that does not answer fails at once
(exit 3) instead of after Prefect's retries.

Imports of the flows (and so of Prefect) happen inside the commands that run a flow: measured on the
reference machine, `import unichunk.flows.ingest` takes 3.1 s (Prefect alone 1.7 s), which `status`, `search`,
`verify` and `--help` would otherwise pay for nothing. Likewise the stores' clients and the chunker load
inside the paths that open them (`search` without a service, `verify`): a command answered by a running
service imports neither (`tests/deployments/test_cli_imports.py` checks the closure), which took
`import unichunk.deployments.cli.main` from 2.7 s to 0.4 s. `--version` imports `unichunk` only when asked.
"""

from __future__ import annotations

import os

# Before Prefect is imported: no telemetry; Prefect's own loggers at WARNING, except the flow-run and
# task-run loggers, whose INFO lines are what the Prefect UI shows (`_prefect` keeps them off the terminal);
# no model-loading progress bars (the CLI draws its own).
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "INFO")
os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "INFO")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import contextlib
import dataclasses
import functools
import json
import logging
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from unichunk import local_stack as stack
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.errors import UnichunkError
from unichunk.deployments.cli.service_client import ServiceRefused, ask_service
from unichunk.deployments.settings import SAMPLE_CORPUS, ServiceSettings
from unichunk.index.defaults import DEFAULT_BATCH_SIZE, DEFAULT_RETENTION_HOURS
from unichunk.index.errors import GenerationError
from unichunk.retrieval.ranking import RetrievalError
from unichunk.retrieval.results import SearchResult
from unichunk.sinks.base import InvalidRequest
from unichunk.sinks.config import SinkSettings

EXIT_DOCUMENTS = 1
EXIT_NOT_FOUND = 1  # shares 1 with failed documents: "not everything is right", and nothing to retry as is
EXIT_USAGE = 2
EXIT_INFRASTRUCTURE = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped with Ctrl-C
EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 a document failed, the stores are misaligned, a rebuild was refused, or "
    "the named document or generation does not exist; 2 nothing done: a bad option or argument, a "
    "missing path, settings that differ from the live index generation; 3 infrastructure: a store, "
    "model, service or the Prefect API unreachable or failing, a crashed run; 130 interrupted (Ctrl-C)."
)

app = typer.Typer(
    help="Chunk each document once; keep Qdrant, BM25 and the knowledge graph in step.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
)
# No markup, no emoji codes, no highlighting, no hard wrapping: what we print from data (a file named
# `[red]x.txt`, an error naming `[vectors]`, `:smile:` in a query) appears exactly as it is, one line each.
console = Console(markup=False, emoji=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, markup=False, emoji=False, highlight=False, soft_wrap=True)

DEMO_QUERY = "how does the pipeline keep the stores aligned"

F = TypeVar("F", bound=Callable[..., Any])

# Options `ingest` and `rebuild` share.
PatternOption = Annotated[
    list[str] | None,
    typer.Option("--pattern", "-p", help="gitignore-style glob (repeatable); default: all formats."),
]
BatchSizeOption = Annotated[int, typer.Option("--batch-size", min=1, max=1000, help="Documents per round.")]
SourceOption = Annotated[
    str | None,
    typer.Option(
        "--source",
        help="Name of the source, part of its document IDs (default: derived from the folder's absolute path).",
    ),
]
StrategyOption = Annotated[
    str | None,
    typer.Option(
        "--strategy", "-s", help="auto, token_window, sentence, markdown, ... (default: UNICHUNK_CHUNK_NAME)"
    ),
]
JsonOption = Annotated[
    bool,
    typer.Option(
        "--json", help="Print one JSON document on stdout (progress, warnings and errors go to stderr)."
    ),
]


class UserError(UnichunkError):
    """A mistake the user can fix from the message alone."""


class NotFound(UserError):
    """The document or generation a command names does not exist (exit 1, like `rm` of a missing file)."""


class Unreachable(UnichunkError):
    """A service named by the settings does not answer (exit 3)."""


# Errors that mean "the command cannot run as given" (exit 2); anything else that ends a command is an
# infrastructure failure (exit 3). See the module docstring for why GenerationMismatch (a GenerationError)
# is one.
USAGE_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    GenerationError,
    ServiceRefused,  # a running service's 4xx (no such document, a bad token)
    ValidationError,
    InvalidRequest,
    RetrievalError,
)


def exit_code_for(exc: BaseException) -> int:
    """1 for something named that does not exist (here or at the service: its 404), 2 for a usage error,
    3 for everything else (a store, a service, Prefect, a crash, a bug)."""
    if isinstance(exc, NotFound) or (isinstance(exc, ServiceRefused) and exc.status == 404):
        return EXIT_NOT_FOUND
    return EXIT_USAGE if isinstance(exc, USAGE_ERRORS) else EXIT_INFRASTRUCTURE


def _one_line(exc: BaseException) -> str:
    """The cause in one line: ours and OS errors say it themselves, anything else is named by its type."""
    if isinstance(exc, ValidationError):
        return validation_line(exc)
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(exc, UnichunkError | OSError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# The settings models read from the environment, by the name pydantic gives their errors: an error in a
# field nobody passed as an option came from the variable `<prefix><FIELD>`.
SETTINGS_MODELS: dict[str, tuple[type[Any], str]] = {
    "ChunkStrategy": (ChunkStrategy, "UNICHUNK_CHUNK_"),
    "SinkSettings": (SinkSettings, "UNICHUNK_"),
    "ServiceSettings": (ServiceSettings, "UNICHUNK_"),
}
_SECRET_FIELD = re.compile(r"key|password|secret|token", re.IGNORECASE)


def validation_line(exc: ValidationError, options: Mapping[str, str] | None = None) -> str:
    """A pydantic error in one line that names where the bad value came from: the CLI option for a field in
    `options` (field -> `--option`), else the environment variable of a settings model, e.g.
    `--strategy: 'foo' is not one of auto, token_window, ...` or `UNICHUNK_EMBEDDER: 'x' is not one of ...`."""
    options = options or {}
    model, prefix = SETTINGS_MODELS.get(exc.title, (None, None))
    errors = exc.errors()
    first = errors[0]
    path = [str(part) for part in first["loc"] if not isinstance(part, int)]  # list indices say nothing

    def name_of(field: str) -> str | None:
        if field in options:
            return options[field]
        if prefix and model is not None and field in model.model_fields:
            return f"{prefix}{field.upper()}"
        return None

    where = (name_of(path[0]) or ".".join(path)) if path else None
    what = _explain(first, secret=bool(path and _SECRET_FIELD.search(path[-1])))
    if not path and model is not None:  # a model-level check names fields in its text: name them as set
        fields = "|".join(sorted(model.model_fields, key=len, reverse=True))
        what = re.sub(rf"\b({fields})\b", lambda m: name_of(m[1]) or m[1], what)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {what}{more}" if where else f"{what}{more}"


def _explain(error: Mapping[str, Any], *, secret: bool = False) -> str:
    """What is wrong with the value, in words: the choices of a literal, a validator's own message, or
    pydantic's message with the value given (never the value of a key, password or secret)."""
    kind, value, message = error["type"], error.get("input"), str(error["msg"])
    shown = repr(value) if isinstance(value, str | int | float | bool) and not secret else None
    if kind in ("literal_error", "enum"):
        choices = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        if choices and shown:
            return f"{shown} is not one of {', '.join(choices)}"
    if kind in ("value_error", "assertion_error"):
        return (
            message.split(", ", 1)[1]
            if message.startswith(("Value error, ", "Assertion failed, "))
            else message
        )
    text = message[:1].lower() + message[1:]
    return f"{text} (got {shown})" if shown and kind != "missing" else text


@contextlib.contextmanager
def _options(**fields: str | None) -> Iterator[None]:
    """Around building settings or flow parameters from options: a ValidationError inside becomes a usage
    error naming the option of each field given (`name="--strategy"`; None: not given, so the variable)."""
    try:
        yield
    except ValidationError as exc:
        given = {field: option for field, option in fields.items() if option is not None}
        raise UserError(validation_line(exc, given)) from None


def _debug() -> bool:
    """UNICHUNK_DEBUG=1; an invalid ServiceSettings must not turn a one-line error into a traceback."""
    try:
        return ServiceSettings().debug
    except ValidationError:
        return os.environ.get("UNICHUNK_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def _fail(*parts: str | tuple[str, str]) -> None:
    err_console.print(Text.assemble(*parts))


def friendly_errors(fn: F) -> F:
    """One line, `error: <cause>`, instead of a traceback, and the exit code of its kind (2 or 3, see the
    module docstring). UNICHUNK_DEBUG=1 shows the traceback instead."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:  # Click would say "Aborted!" and exit 1, as if a document had failed
            if _debug():
                raise
            _fail(("interrupted", "red"))
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            if _debug():
                raise
            _fail(("error:", "red"), " ", _one_line(exc))
            raise typer.Exit(exit_code_for(exc)) from None

    return wrapper  # type: ignore[return-value]


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
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
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
def _terminal_logging() -> Iterator[None]:
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


def _check_prefect_api(api_url: str) -> None:
    """Fail at once, in one line, when PREFECT_API_URL does not answer, instead of after Prefect's client
    retries. Only a transport failure counts: any HTTP answer (an auth-protected or Cloud API answering 401
    or 404 on /health) means something is there, and Prefect's client reports the rest."""
    try:
        httpx.get(f"{api_url.rstrip('/')}/health", timeout=httpx.Timeout(10.0, connect=5.0))
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise UserError(f"PREFECT_API_URL={api_url}: not an http(s) URL ({exc})") from None
    except httpx.TransportError as exc:
        cause = f"{type(exc).__name__}: {str(exc).strip()}".rstrip(": ")
        raise Unreachable(f"cannot reach the Prefect API at {api_url} (PREFECT_API_URL): {cause}") from None


@contextlib.contextmanager
def _prefect(*, route_logs: bool = True) -> Iterator[None]:
    """Around every command that talks to Prefect (enter it before importing any flow):
    PREFECT_API_URL (checked to answer), or else the data dir's local Prefect server (started or reused,
    one line saying which), and a terminal free of Prefect's run logging (`_quiet_run_loggers`) with the
    rest of the logging routed through the CLI's console (`_terminal_logging`; not for the long-running
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
        _check_prefect_api(api.url)
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
            if not _debug():
                stack_.enter_context(_quiet_run_loggers())
                if route_logs:
                    stack_.enter_context(_terminal_logging())
            yield
    finally:
        if started_here:
            os.environ.pop("PREFECT_API_URL", None)
        in_use.close()


def _print_json(data: Any) -> None:
    """`--json`: one JSON document on stdout, and nothing else there. ASCII-escaped, so any file name
    (undecodable bytes included) prints on any terminal encoding and parses back exactly."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _startup_checks(settings: SinkSettings | None = None) -> SinkSettings:
    """Before a command opens a store or starts anything: the settings parse (an error names its
    variable), and the models they name can work at all. `UNICHUNK_EMBEDDER=openai` needs a key (for
    api.openai.com) or a base URL (a local OpenAI-compatible server may need no key): with neither, every
    request would fail, after the embedder's retries; the LLM extractor needs its base URL."""
    settings = settings or SinkSettings()
    key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else ""
    if settings.embedder == "openai" and not key and not settings.embedding_base_url:
        raise UserError(
            "UNICHUNK_EMBEDDER=openai needs UNICHUNK_EMBEDDING_API_KEY (for api.openai.com) or "
            "UNICHUNK_EMBEDDING_BASE_URL (an OpenAI-compatible server; with no key if it needs none)"
        )
    if settings.extractor == "llm" and not settings.llm_base_url:
        raise UserError(
            "UNICHUNK_EXTRACTOR=llm needs UNICHUNK_LLM_BASE_URL (an OpenAI-compatible /v1 endpoint; "
            "UNICHUNK_LLM_API_KEY if it needs a key)"
        )
    return settings


def _with_progress(run: Callable[[], Any]) -> Any:
    """Run a flow call under a progress bar fed by `unichunk.engine.progress` (on a terminal only: in a pipe or a log
    file a transient bar leaves nothing useful, only an empty line)."""
    from unichunk.engine import progress  # see the module docstring: Prefect loads only for flow commands

    if not err_console.is_terminal:
        return run()
    with _progress() as bar:
        task_id = bar.add_task("documents", total=None)

        def update(stage: str, done: int, total: int) -> None:
            bar.update(task_id, description=stage, completed=done, total=total)

        with progress.listening(update):
            return run()


def _check_source(path: Path | None, pattern: list[str] | None, source: str | None) -> None:
    """PATH and the options that go with it make sense (before anything starts)."""
    if path is None and (pattern or source):
        raise UserError("--pattern and --source go with a PATH")
    if path is not None and not path.expanduser().exists():
        raise UserError(f"no such file or directory: {path.expanduser()}")


def _source_params(path: Path | None, pattern: list[str] | None, source: str | None) -> Any:
    """PATH as flow parameters (None: every source ingested before); `--source` names it."""
    from unichunk.chunking.sources import DEFAULT_PATTERNS
    from unichunk.engine.params import SourceParams

    _check_source(path, pattern, source)
    if path is None:
        return None
    path = path.expanduser()
    with _options(source_system="--source", patterns="--pattern"):
        if path.is_dir():
            return SourceParams(
                kind="directory",
                root=str(path),
                patterns=pattern or list(DEFAULT_PATTERNS),
                source_system=source,
            )
        # one file: its ID is its name relative to its directory, as a scan of that directory would give
        return SourceParams(
            kind="paths", root=str(path.resolve().parent), paths=[str(path.resolve())], source_system=source
        )


def _strategy(name: str | None, **sizes: int | None) -> ChunkStrategy:
    """`--strategy` (and `--chunk-size`/`--chunk-overlap`) where given, else UNICHUNK_CHUNK_* from the
    environment; an invalid value is named by its option or its variable."""
    given = {"name": name, **sizes}
    options = {field: "--strategy" if field == "name" else "--" + field.replace("_", "-") for field in given}
    with _options(**{field: options[field] if value is not None else None for field, value in given.items()}):
        return ChunkStrategy(**{field: value for field, value in given.items() if value is not None})


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta", style="dim"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )


def _result(state: Any) -> Any:
    """A finished flow run's return value; what ended a run that returned none is raised (it crashed,
    or failed before it had a summary)."""
    result = state.result(raise_on_failure=False)
    if isinstance(result, BaseException):
        raise result
    return result


def _print_failed(name: str, error: str) -> None:
    console.print(Text.assemble("  ", ("failed", "red"), f"  {name}: {error}"))


def _run_ingest(params: Any, *, as_json: bool = False) -> Any:
    """Run the ingest flow with a progress bar; returns the IngestSummary (the caller exits 1 if documents
    failed): its line, then one line per failed document; with `as_json`, the summary as JSON instead."""
    from unichunk.flows.ingest import ingest

    summary = _result(_with_progress(lambda: ingest(params, return_state=True)))
    if as_json:
        _print_json(summary.model_dump(mode="json"))
        return summary
    console.print(summary.line())
    if summary.dry_run:
        for source_id in summary.would_process:
            console.print(f"  would process  {source_id}")
        for source_id in summary.would_delete:
            console.print(f"  would delete   {source_id}")
    for failure in summary.failed:
        _print_failed(failure.source_id or failure.document_id, failure.error)
    return summary


def _version(value: bool) -> None:
    if value:
        from unichunk import __version__  # only when asked: --help does not pay for it

        console.print(f"unichunk {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    pass


@app.command()
@friendly_errors
def ingest(
    path: Annotated[
        Path | None,
        typer.Argument(help="A directory to scan, or one file (default: every source ingested before)."),
    ] = None,
    pattern: PatternOption = None,
    source: SourceOption = None,
    strategy: StrategyOption = None,
    sink: Annotated[list[str] | None, typer.Option("--sink", help="Only these sinks (repeatable).")] = None,
    delete_missing: Annotated[bool, typer.Option("--delete-missing/--no-delete-missing")] = True,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would happen; write nothing.")
    ] = False,
    batch_size: BatchSizeOption = DEFAULT_BATCH_SIZE,
    shards: Annotated[
        int,
        typer.Option(
            "--shards",
            min=1,
            max=64,
            help="Split the run into this many `ingest-shard` runs on the workers of the work pool (or "
            "`unichunk serve`); 1: this process does everything.",
        ),
    ] = 1,
    as_json: JsonOption = False,
) -> None:
    """Ingest PATH into every sink, re-doing only new and changed documents.

    A document is identified by its source and its path in it: two folders never share document IDs, and
    the same folder keeps them (`--source` names the source, to keep IDs when the folder moves)."""
    _check_source(path, pattern, source)
    chosen = _strategy(strategy)
    _startup_checks()
    with _prefect():
        from unichunk.engine.params import IngestParams

        with _options(sinks="--sink"):
            params = IngestParams(
                source=_source_params(path, pattern, source),
                strategy=chosen,
                delete_missing=delete_missing,
                dry_run=dry_run,
                batch_size=batch_size,
                shards=shards,
                **({"sinks": sink} if sink else {}),
            )
        summary = _run_ingest(params, as_json=as_json)
    if summary.failed and not summary.dry_run:
        raise typer.Exit(EXIT_DOCUMENTS)


@app.command()
@friendly_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", "--top", min=1, max=100, help="How many hits.")] = 5,
    as_json: JsonOption = False,
) -> None:
    """Hybrid search: BM25 and vector hits fused by reciprocal rank (`unichunk.retrieval.search`). With --json, the
    whole result (`unichunk.retrieval.results.SearchResult`, as `GET /search` serves it)."""
    if not query.strip():
        raise UserError("the query is empty")
    result = ask_service(lambda service: service.search(query, k, graph=False, expand=False))
    if result is None:  # no service running: load the models here
        from unichunk.index.generations import live_generation, reading_settings
        from unichunk.retrieval.readers import Readers
        from unichunk.retrieval.search import SearchOptions
        from unichunk.retrieval.search import search as run_search
        from unichunk.sinks.pool import flow_sinks

        base = _startup_checks()
        if base.generation is None and live_generation(base) is None:  # nothing to open: say so
            if as_json:
                _print_json(SearchResult(query=query, k=k, route="hybrid").model_dump(mode="json"))
            else:
                console.print(
                    "no results: nothing is ingested yet (`unichunk ingest PATH`, or `unichunk demo`)"
                )
            return
        with flow_sinks(("keywords", "vectors"), reading_settings(base)) as sinks:  # closed at the end
            result = run_search(Readers.of(sinks), query, k, SearchOptions(graph=False, expand=False))
    if as_json:
        _print_json(result.model_dump(mode="json"))
        return
    if not result.hits:
        console.print("no results")
        return
    for hit in result.hits:
        where = hit.source_id or hit.document_id
        ranks = " ".join(f"{name}#{rank}" for name, rank in sorted(hit.ranks.items()))
        heading = " > ".join(hit.heading_chain) or "-"
        preview = " ".join(hit.content.split())[:200]
        console.print(f"{hit.rank}. {hit.chunk_id}  score={hit.score:.4f}  ({ranks})", style="bold")
        console.print(f"   {where} [{hit.start_char}:{hit.end_char}]  {heading}")
        console.print(f"   {preview}")


@app.command()
@friendly_errors
def status(
    failed: Annotated[bool, typer.Option("--failed", help="Only failed documents.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The index generations (live, being built, retained) and the live one's document states; then each
    failed document with its whole error, one line each."""
    data = ask_service(lambda service: service.status(failed=failed))
    if data is None:  # no service running: read the records here
        from unichunk.deployments.service.status import status_json

        data = status_json(failed=failed)
    if as_json:
        _print_json(data)
        return
    _print_generations(data)
    rows, counts = data["documents"], data["counts"]
    table = Table("document", "source", "state", "chunks", "updated")
    for row in rows:
        table.add_row(
            row["document_id"],
            row["source_id"] or "",
            row["state"],
            str(row["chunk_count"]),
            row["updated_at"][:19],
        )
    if rows:
        console.print(table)
    # Errors outside the table: a table cell wraps or cuts them, and they are what the user needs whole.
    for row in rows:
        if row["state"] == "failed":
            where = f"{row['source_id'] or row['document_id']} ({row['document_id']})"
            _print_failed(where, row["error"] or "")
    console.print(", ".join(f"{name}: {n}" for name, n in counts.items()))


def _describe(description: dict[str, Any]) -> str:
    """One line naming the settings of a generation: strategy and sizes, embedder, extractor."""
    chunking = description.get("chunking", {})
    size, overlap = chunking.get("chunk_size"), chunking.get("chunk_overlap")
    sizes = (
        ""
        if size is None and overlap is None
        else f"{size or 'default'}/{overlap if overlap is not None else 'default'}"
    )
    embedder = description.get("embedder", "?")
    if embedder == "openai":
        embedder = f"openai:{description.get('embedding_model')}"
    return f"{chunking.get('name', '?')}{' ' + sizes if sizes else ''}, {embedder}, {description.get('extractor')}"


def _print_generations(data: dict[str, Any]) -> None:
    """The generations table from `service_status.generations_json` (or a service's `/status`)."""
    generations = data["generations"]
    if not generations:
        console.print("no index generation yet (nothing ingested)")
        return
    table = Table("generation", "state", "fingerprint", "settings", "documents", "since / until", "note")
    for gen in generations:
        counts = gen["counts"]
        done = counts["processed"]
        documents = (
            f"{done}/{gen['listed']}"
            if gen["state"] in ("building", "failed") and gen["listed"]
            else str(done)
        )
        when = {
            "live": f"live since {gen['live_since']}",
            "retired": f"kept until {gen['drop_after']}",
        }.get(gen["state"], f"started {gen['created_at']}")
        table.add_row(
            gen["generation_id"],
            gen["state"],
            gen["fingerprint"],
            _describe(gen["description"]),
            documents,
            when,
            (gen["last_error"] or "")[:100],
        )
    console.print(table)


def _verify(*, as_json: bool = False) -> bool:
    from unichunk.index.alignment import (
        verify_live,  # the chunker and every store's client: only when verifying
    )

    report = verify_live()
    if as_json:
        _print_json(report.as_dict())
        return report.ok
    table = Table("sink", "chunks", "missing", "extra", "altered")
    kinds = {"missing": report.missing, "extra": report.extra, "altered": report.altered}
    for name in report.counts:
        table.add_row(
            name, str(report.counts[name]), *(str(len(ids.get(name, ()))) for ids in kinds.values())
        )
    console.print(table)
    for name in report.counts:
        for kind, ids in kinds.items():  # altered: the store holds other content than the ID names
            for chunk_id in sorted(ids.get(name, ()))[:10]:
                console.print(f"  {name}: {kind} {chunk_id}")
    verdict = ("aligned", "green") if report.ok else (f"{report.mismatch_count()} mismatch(es)", "red")
    console.print(Text.assemble(f"{report.expected_count} expected chunk IDs: ", verdict))
    return report.ok


@app.command()
@friendly_errors
def verify(as_json: JsonOption = False) -> None:
    """Check every sink holds exactly the chunk IDs the status table expects, each with the content its ID
    names (exit 1 if not). With --json, `AlignmentReport.as_dict()`: counts and example IDs per sink."""
    _startup_checks()
    if not _verify(as_json=as_json):
        raise typer.Exit(EXIT_DOCUMENTS)


def _known_document(settings: SinkSettings, document_id: str) -> bool:
    """Whether a generation a deletion reaches (live, or being built) records `document_id`."""
    from unichunk.index.generations import registry_of
    from unichunk.index.status import StatusStore

    return any(
        g.state in ("live", "building", "failed", "ready")
        and StatusStore.of(settings.for_generation(g.generation_id), readonly=True).get(document_id)
        is not None
        for g in registry_of(settings).all()
    )


@app.command()
@friendly_errors
def delete(
    document_id: Annotated[str, typer.Argument(help="A document ID, as shown by `unichunk status`.")],
    as_json: JsonOption = False,
) -> None:
    """Remove one document from every sink and from the pipeline's records."""
    answer = ask_service(lambda service: service.delete(document_id))  # its served run deletes it
    if answer is not None:
        removed = answer.get("removed") or {"flow run": answer["flow_run_name"]}
    else:
        settings = _startup_checks()
        if not _known_document(settings, document_id):  # before any flow or Prefect server starts
            raise NotFound(f"no such document: {document_id} (`unichunk status` lists them)")
        with _prefect():
            from unichunk.flows.documents import delete_document

            removed = delete_document(document_id)
    if as_json:
        _print_json({"document_id": document_id, "removed": removed})
        return
    console.print(f"deleted {document_id}: " + ", ".join(f"{k}={v}" for k, v in sorted(removed.items())))


@app.command()
@friendly_errors
def rebuild(
    path: Annotated[
        Path | None,
        typer.Argument(
            help="The whole source: a directory or one file (default: every source ingested before)."
        ),
    ] = None,
    pattern: PatternOption = None,
    source: SourceOption = None,
    strategy: StrategyOption = None,
    chunk_size: Annotated[int | None, typer.Option("--chunk-size", help="The new chunk size.")] = None,
    chunk_overlap: Annotated[int | None, typer.Option("--chunk-overlap", help="The new overlap.")] = None,
    switch: Annotated[
        bool, typer.Option("--switch/--no-switch", help="Switch readers once the new generation is verified.")
    ] = True,
    retention_hours: Annotated[
        float, typer.Option("--retention-hours", min=0, help="Keep the replaced generation this long.")
    ] = DEFAULT_RETENTION_HOURS,
    max_document_loss: Annotated[
        float, typer.Option("--max-document-loss", min=0, max=1, help="Allowed share of fewer documents.")
    ] = 0.0,
    batch_size: BatchSizeOption = DEFAULT_BATCH_SIZE,
    as_json: JsonOption = False,
) -> None:
    """Build a new index generation with new settings beside the live one, verify it, then switch to it.

    Queries keep answering from the live generation until the switch. Change the embedder or extractor
    with UNICHUNK_* variables; the chunking with the options here.
    """
    _check_source(path, pattern, source)
    chosen = _strategy(strategy, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    _startup_checks()
    with _prefect():
        from unichunk.engine.params import RebuildParams
        from unichunk.flows.rebuild import rebuild as rebuild_flow

        params = RebuildParams(
            source=_source_params(path, pattern, source),
            strategy=chosen,
            switch=switch,
            retention_hours=retention_hours,
            max_document_loss=max_document_loss,
            batch_size=batch_size,
        )
        summary = _result(_with_progress(lambda: rebuild_flow(params, return_state=True)))
    if as_json:
        _print_json(summary.model_dump(mode="json"))
    else:
        console.print(summary.line())
        for failure in summary.failed:
            _print_failed(failure.source_id or failure.document_id, failure.error)
    if summary.outcome == "refused":
        raise typer.Exit(EXIT_DOCUMENTS)


generations_app = typer.Typer(
    help="List, switch (roll back) and drop index generations.", epilog=EXIT_CODES_HELP, no_args_is_help=True
)
app.add_typer(generations_app, name="generations")


@generations_app.command("list")
@friendly_errors
def generations_list(as_json: JsonOption = False) -> None:
    """Every index generation: live, being built, ready, retained for rollback."""
    from unichunk.deployments.service.status import generations_json
    from unichunk.index.generations import reading_settings

    if as_json:
        _print_json(generations_json(reading_settings()))
        return
    _print_generations(generations_json(reading_settings()))


@generations_app.command("switch")
@friendly_errors
def generations_switch(
    generation_id: Annotated[
        str | None, typer.Argument(help="Generation to make live (default: the last retired one).")
    ] = None,
    retention_hours: Annotated[float, typer.Option("--retention-hours", min=0)] = DEFAULT_RETENTION_HOURS,
    as_json: JsonOption = False,
) -> None:
    """Roll back (or forward): verify a retained or ready generation, then make it live."""
    from unichunk.index.generations import rollback_target, switchable

    settings = _startup_checks()
    # Before any flow or Prefect server starts: a generation that does not exist or may not go live.
    switchable(settings, generation_id or rollback_target(settings))
    with _prefect():
        from unichunk.flows.switch import switch_generation

        result = _result(switch_generation(generation_id, retention_hours, return_state=True))
    if as_json:
        _print_json(result)
        return
    console.print(f"live generation: {result['live']} (was {result['previous'] or result['live']})")


@generations_app.command("drop")
@friendly_errors
def generations_drop(
    generation_id: Annotated[str, typer.Argument(help="A generation that is not live.")],
    as_json: JsonOption = False,
) -> None:
    """Delete a generation's stores now, without waiting for its retention."""
    from unichunk.index.generations import registry_of

    settings = _startup_checks()
    found = registry_of(settings).get(generation_id)  # before any flow or Prefect server starts
    if found is None:
        raise NotFound(f"no such generation: {generation_id} (`unichunk generations list` lists them)")
    if found.state == "live":
        raise UserError(f"generation {generation_id} is live; switch to another one before dropping it")
    with _prefect():
        from unichunk.flows.switch import drop_generation_now

        _result(drop_generation_now(generation_id, return_state=True))
    if as_json:
        _print_json({"dropped": generation_id, "state": found.state})
        return
    console.print(f"dropped {generation_id} (was {found.state})")


def _refuse_open_listener(host: str) -> None:
    """Listening beyond loopback needs UNICHUNK_API_TOKEN: one line, exit 2 (`service_auth`)."""
    from unichunk.deployments.service.auth import listen_refusal

    refusal = listen_refusal(host)
    if refusal:
        _fail(("error:", "red"), " ", refusal)
        raise typer.Exit(EXIT_USAGE)


@app.command()
@friendly_errors
def serve(
    webhook: Annotated[
        bool, typer.Option("--webhook/--no-webhook", help="Also run the webhook receiver.")
    ] = True,
    host: Annotated[str, typer.Option(help="Webhook receiver host.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Webhook receiver port.")] = 8787,
) -> None:
    """Serve the deployments (cron reindex, event-triggered document flows, rebuild) and the webhook receiver.

    Stops within 10 s of SIGTERM or Ctrl-C: in-flight runs are cancelled, and their documents are redone by
    the next run (`unichunk.deployments.serving.serve.ServeRunner`)."""
    _refuse_open_listener(host)
    _startup_checks()
    from unichunk.deployments.serving.multiprocess_metrics import enter_multiprocess_mode

    enter_multiprocess_mode(SinkSettings().data_dir)  # re-executes this command once, in multiprocess mode
    secret = ServiceSettings().webhook_secret
    if webhook and not (secret and secret.get_secret_value()):
        err_console.print(
            Text.assemble(
                ("warning:", "yellow"),
                " UNICHUNK_WEBHOOK_SECRET is not set: the webhook receiver refuses every delivery (401) "
                "until it is",
            )
        )
    with _prefect(route_logs=False):
        from unichunk.deployments.service.webhook import run_receiver
        from unichunk.deployments.serving.serve import serve_all

        if webhook:
            threading.Thread(target=run_receiver, args=(host, port), name="webhook", daemon=True).start()
            err_console.print(f"webhook receiver on http://{host}:{port}")
        serve_all()


@app.command()
@friendly_errors
def worker(
    pool: Annotated[str, typer.Option("--pool", "-p", help="The Prefect work pool to poll.")] = "unichunk",
    limit: Annotated[
        int | None,
        typer.Option(min=1, max=64, help="Flow runs at once (default: UNICHUNK_SERVE_RUN_LIMIT)."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            help="/metrics port; 0 = off (default: UNICHUNK_METRICS_PORT).",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="The worker's name in the Prefect UI.")] = None,
) -> None:
    """Run the flow runs of a work pool (a Prefect process worker), with one /metrics for all of them.

    For many machines: `prefect deploy --all` registers the deployments (prefect.yaml) on the pool, and
    every machine runs `unichunk worker` with the same UNICHUNK_* settings (docs/operations.md, "Scaling
    out"). The first SIGTERM or Ctrl-C stops polling and lets runs in flight finish; a second kills."""
    _startup_checks()
    from unichunk.deployments.serving.multiprocess_metrics import enter_multiprocess_mode

    # re-executes this command once, in multiprocess mode, with a temporary metrics directory of its own
    enter_multiprocess_mode(SinkSettings().data_dir, temporary=True)
    service = ServiceSettings()
    with _prefect(route_logs=False):
        from unichunk.deployments.serving.worker import run_worker

        run_worker(
            pool,
            limit=limit or service.serve_run_limit,
            metrics_port=service.metrics_port if metrics_port is None else metrics_port,
            name=name,
        )


@app.command()
@friendly_errors
def mcp(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")] = False,
    host: Annotated[str, typer.Option(help="HTTP host (with --http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="HTTP port (with --http).")] = 8765,
) -> None:
    """Serve search, chunks, context, status and ingest to agents over MCP (stdio, or HTTP at /mcp).

    `ingest` reads only inside UNICHUNK_MCP_ROOTS (else UNICHUNK_SOURCE_ROOT). stdout carries the protocol
    alone; everything else goes to stderr (see docs/operations.md, "MCP server for agents")."""
    _startup_checks()
    with _prefect(route_logs=False):  # the ingest tool runs the ingest flow in this process
        from unichunk.deployments.mcp.server import run_server

        run_server(http=http, host=host, port=port)


@app.command()
@friendly_errors
def up(
    host: Annotated[
        str, typer.Option(help="Host the Prefect server binds (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port of the Prefect server and its UI.")] = (
        stack.UP_PORT
    ),
    as_json: JsonOption = False,
) -> None:
    """Start (or reuse) the data dir's local Prefect server (UI on --port, 4200 by default) and the embedded
    FalkorDB; print the `export` lines that point other terminals at them."""
    _refuse_open_listener(host)
    urls = stack.up(host=host, port=port, echo=not as_json)
    if as_json:
        _print_json(dataclasses.asdict(urls))


@app.command()
@friendly_errors
def down() -> None:
    """Stop what `up`, `demo` and the other commands started for this data dir: the local Prefect server
    and the embedded FalkorDB (a server named by PREFECT_API_URL or UNICHUNK_FALKORDB_URL is not ours)."""
    stack.down()


@app.command()
@friendly_errors
def demo(query: Annotated[str, typer.Option(help="The sample search.")] = DEMO_QUERY) -> None:
    """Ingest the bundled sample corpus, run a sample search, and verify the stores agree; then say what
    it left running."""
    if not SAMPLE_CORPUS.is_dir():
        raise UserError(f"the sample corpus is missing: {SAMPLE_CORPUS}")
    _startup_checks()
    with _prefect():
        from unichunk.engine.params import IngestParams, SourceParams

        console.rule("ingest")
        summary = _run_ingest(IngestParams(source=SourceParams(kind="directory", root=str(SAMPLE_CORPUS))))
    console.rule(f"search: {query}")
    search(query, k=3)
    console.rule("verify")
    ok = _verify()
    left = stack.running()
    if left:
        console.rule("left running")
        for line in left:
            console.print(line)
        console.print("`unichunk down` stops them.")
    if summary.failed or not ok:
        raise typer.Exit(EXIT_DOCUMENTS)


def main() -> None:  # pragma: no cover - console entry point alternative
    app(prog_name="unichunk")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
