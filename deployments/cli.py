"""`unichunk`: ingest, search, inspect and verify from a shell.

`ingest`, `delete`, `rebuild`, `generations` and `demo` run the real Prefect flows in this process, and
`serve` serves them, against PREFECT_API_URL; with it unset, against the data dir's **local Prefect
server**, which the first such command starts (detached, on a free port, recorded under
`<data dir>/stack`) and later ones reuse, each saying so in one line (`deployments.stack` says why not
Prefect's ephemeral server). `unichunk down` stops it and the embedded FalkorDB; `demo` ends by naming
what it left running. `search`, `status` and `verify` read the stores directly, so they answer in seconds.

Output. Everything printed that comes from data (file names, source IDs, error texts, queries) is printed
literally: the consoles interpret no Rich markup and no emoji codes, so `[red]x[bold] y.txt` or an error's
`[vectors]` prints as it is; styling is applied to our own words only (`Text`). A failed document is one
line, `failed  <source>: <error>`, and a command that cannot finish is one line, `error: <cause>`: Prefect's
console logging of flow and task runs, with its tracebacks, is kept off the terminal (the flow-run logs still
reach the Prefect API at INFO, for the UI; the flows' warnings are shown as `warning: ...` lines).
UNICHUNK_DEBUG=1 shows tracebacks and Prefect's console logging again.

Exit codes (also in `--help` and docs/operations.md):

- 0: done.
- 1: done, but not everything is right: a document failed, `verify` found the stores misaligned, a rebuild
  was refused. Re-running after fixing the documents (or `unichunk verify` after a repair) gives 0.
- 2: nothing was done, the command cannot run as given: a bad option or argument, a missing path, an
  unknown document or generation, or settings that differ from the live index generation
  (`GenerationMismatch`). The last is here, not under 3, because nothing is broken and retrying will not
  help: the user chooses between `unichunk rebuild` and setting the old settings back.
- 3: infrastructure failure: a store, model or service unreachable or failing (FalkorDB, Neo4j, Qdrant,
  an embedding endpoint), the Prefect API unreachable, a run that crashed, or an unexpected error.
  Retrying once the cause is fixed is the remedy; the documents' states are intact either way.
- 130: interrupted with Ctrl-C (128 + SIGINT, as shells report it; Click's own handling would exit 1, as if
  a document had failed). The next run redoes what the interrupted one left.

Imports of the flows (and so of Prefect) happen inside the commands that run a flow: measured on the
reference machine, `import flows.ingest` takes 3.1 s (Prefect alone 1.7 s), which `status`, `search`,
`verify` and `--help` would otherwise pay for nothing.
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
import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from chunking.config import ChunkStrategy
from chunking.errors import UnichunkError
from chunking.sources import DEFAULT_PATTERNS
from deployments import stack
from deployments.settings import SAMPLE_CORPUS, ServiceSettings
from index.alignment import verify_live
from index.generations import (
    DEFAULT_RETENTION_HOURS,
    generation_counts,
    reading_settings,
    registry_of,
)
from index.registry import GenerationError
from index.run import DEFAULT_BATCH_SIZE
from index.status import StatusStore
from retrieval import Readers, SearchOptions
from retrieval import search as run_search
from retrieval.ranking import RetrievalError
from sinks.base import InvalidRequest
from sinks.config import SinkSettings
from sinks.pool import flow_sinks

EXIT_DOCUMENTS = 1
EXIT_USAGE = 2
EXIT_INFRASTRUCTURE = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped with Ctrl-C
EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 done, but a document failed, the stores are misaligned or a rebuild was "
    "refused; 2 nothing done: a bad option or argument, a missing path, an unknown document or "
    "generation, settings that differ from the live index generation; 3 infrastructure: a store, model, "
    "service or the Prefect API unreachable or failing, a crashed run; 130 interrupted (Ctrl-C)."
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


class UserError(UnichunkError):
    """A mistake the user can fix from the message alone."""


# Errors that mean "the command cannot run as given" (exit 2); anything else that ends a command is an
# infrastructure failure (exit 3). See the module docstring for why GenerationMismatch (a GenerationError)
# is here.
USAGE_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    ValidationError,
    GenerationError,
    InvalidRequest,
    RetrievalError,
)


def exit_code_for(exc: BaseException) -> int:
    """2 for a usage error, 3 for everything else (a store, a service, Prefect, a crash, a bug)."""
    return EXIT_USAGE if isinstance(exc, USAGE_ERRORS) else EXIT_INFRASTRUCTURE


def _one_line(exc: BaseException) -> str:
    """The cause in one line: ours and OS errors say it themselves, anything else is named by its type."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        return f"invalid {where}: {first['msg']}"
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(exc, UnichunkError | OSError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
            if ServiceSettings().debug:
                raise
            _fail(("interrupted", "red"))
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            if ServiceSettings().debug:
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


@contextlib.contextmanager
def _prefect() -> Iterator[None]:
    """Around every command that talks to Prefect (enter it before importing any flow):
    PREFECT_API_URL, or else the data dir's local Prefect server (started or reused, one line saying
    which), and a terminal free of Prefect's run logging (`_quiet_run_loggers`; not with UNICHUNK_DEBUG=1)."""
    started_here = False
    if not os.environ.get("PREFECT_API_URL"):
        server = stack.ensure_prefect_server(SinkSettings().data_dir)
        err_console.print(server.announce(), style="dim")
        # Before Prefect is first imported, so its global settings and every thread's see it.
        os.environ["PREFECT_API_URL"] = server.api_url
        started_here = True
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
            if not ServiceSettings().debug:
                stack_.enter_context(_quiet_run_loggers())
            yield
    finally:
        if started_here:
            os.environ.pop("PREFECT_API_URL", None)


def _live_status(settings: SinkSettings) -> StatusStore:
    return StatusStore.of(settings, readonly=True)


def _with_progress(run: Callable[[], Any]) -> Any:
    """Run a flow call under a progress bar fed by `flows.progress` (on a terminal only: in a pipe or a log
    file a transient bar leaves nothing useful, only an empty line)."""
    from flows import progress  # see the module docstring: Prefect loads only for flow commands

    if not err_console.is_terminal:
        return run()
    with _progress() as bar:
        task_id = bar.add_task("documents", total=None)

        def update(stage: str, done: int, total: int) -> None:
            bar.update(task_id, description=stage, completed=done, total=total)

        with progress.listening(update):
            return run()


def _source_params(path: Path | None, pattern: list[str] | None, source: str | None) -> Any:
    """PATH as flow parameters (None: every source ingested before); `--source` names it."""
    from flows.params import SourceParams

    if path is None:
        if pattern or source:
            raise UserError("--pattern and --source go with a PATH")
        return None
    path = path.expanduser()
    if not path.exists():
        raise UserError(f"no such file or directory: {path}")
    if path.is_dir():
        return SourceParams(
            kind="directory", root=str(path), patterns=pattern or list(DEFAULT_PATTERNS), source_system=source
        )
    # one file: its ID is its name relative to its directory, as a scan of that directory would give
    return SourceParams(
        kind="paths", root=str(path.resolve().parent), paths=[str(path.resolve())], source_system=source
    )


def _strategy(name: str | None) -> ChunkStrategy:
    """`--strategy` if given, else UNICHUNK_CHUNK_* from the environment."""
    return ChunkStrategy(name=name) if name else ChunkStrategy()  # type: ignore[arg-type]


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
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


def _run_ingest(params: Any) -> Any:
    """Run the ingest flow with a progress bar; returns the IngestSummary (the caller exits 1 if documents
    failed): its line, then one line per failed document."""
    from flows.ingest import ingest

    summary = _result(_with_progress(lambda: ingest(params, return_state=True)))
    console.print(summary.line())
    if summary.dry_run:
        for source_id in summary.would_process:
            console.print(f"  would process  {source_id}")
        for source_id in summary.would_delete:
            console.print(f"  would delete   {source_id}")
    for failure in summary.failed:
        _print_failed(failure.source_id or failure.document_id, failure.error)
    return summary


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
) -> None:
    """Ingest PATH into every sink, re-doing only new and changed documents.

    A document is identified by its source and its path in it: two folders never share document IDs, and
    the same folder keeps them (`--source` names the source, to keep IDs when the folder moves)."""
    with _prefect():
        from flows.params import IngestParams

        params = IngestParams(
            source=_source_params(path, pattern, source),
            strategy=_strategy(strategy),
            delete_missing=delete_missing,
            dry_run=dry_run,
            batch_size=batch_size,
            **({"sinks": sink} if sink else {}),
        )
        summary = _run_ingest(params)
    if summary.failed and not summary.dry_run:
        raise typer.Exit(EXIT_DOCUMENTS)


@app.command()
@friendly_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", "--top", min=1, max=100, help="How many hits.")] = 5,
) -> None:
    """Hybrid search: BM25 and vector hits fused by reciprocal rank (`retrieval.search`)."""
    settings = reading_settings()
    with flow_sinks(("keywords", "vectors"), settings) as sinks:  # closed when the command ends
        result = run_search(Readers.of(sinks), query, k, SearchOptions(graph=False, expand=False))
    if not result.hits:
        console.print("no results (is anything ingested? try `unichunk demo`)")
        return
    rows = _live_status(settings).get_many(h.document_id for h in result.hits)
    for hit in result.hits:
        row = rows.get(hit.document_id)
        where = row.source_id if row and row.source_id else hit.document_id
        ranks = " ".join(f"{name}#{rank}" for name, rank in sorted(hit.ranks.items()))
        heading = " > ".join(hit.heading_chain) or "-"
        preview = " ".join(hit.content.split())[:200]
        console.print(f"{hit.rank}. {hit.chunk_id}  score={hit.score:.4f}  ({ranks})", style="bold")
        console.print(f"   {where} [{hit.start_char}:{hit.end_char}]  {heading}")
        console.print(f"   {preview}")


@app.command()
@friendly_errors
def status(failed: Annotated[bool, typer.Option("--failed", help="Only failed documents.")] = False) -> None:
    """The index generations (live, being built, retained) and the live one's document states; then each
    failed document with its whole error, one line each."""
    settings = reading_settings()
    _print_generations(settings)
    store = _live_status(settings)
    rows = store.rows(state="failed" if failed else None)
    counts = store.counts()
    table = Table("document", "source", "state", "chunks", "updated")
    for row in rows:
        table.add_row(
            row.document_id, row.source_id or "", row.state, str(row.chunk_count), row.updated_at[:19]
        )
    if rows:
        console.print(table)
    # Errors outside the table: a table cell wraps or cuts them, and they are what the user needs whole.
    for row in rows:
        if row.state == "failed":
            _print_failed(f"{row.source_id or row.document_id} ({row.document_id})", row.error or "")
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


def _print_generations(settings: SinkSettings) -> None:
    generations = registry_of(settings).all()
    if not generations:
        console.print("no index generation yet (nothing ingested)")
        return
    table = Table("generation", "state", "fingerprint", "settings", "documents", "since / until", "note")
    for gen in sorted(generations, key=lambda g: (g.state != "live", g.created_at)):
        counts = generation_counts(settings, gen.generation_id)
        done = counts["processed"]
        documents = (
            f"{done}/{gen.listed}" if gen.state in ("building", "failed") and gen.listed else str(done)
        )
        when = {
            "live": f"live since {gen.live_since}",
            "retired": f"kept until {gen.drop_after}",
        }.get(gen.state, f"started {gen.created_at}")
        table.add_row(
            gen.generation_id,
            gen.state,
            gen.fingerprint,
            _describe(gen.description),
            documents,
            when,
            (gen.last_error or "")[:100],
        )
    console.print(table)


def _verify() -> bool:
    report = verify_live()
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
def verify() -> None:
    """Check every sink holds exactly the chunk IDs the status table expects, each with the content its ID
    names (exit 1 if not)."""
    if not _verify():
        raise typer.Exit(EXIT_DOCUMENTS)


@app.command()
@friendly_errors
def delete(
    document_id: Annotated[str, typer.Argument(help="A document ID, as shown by `unichunk status`.")],
) -> None:
    """Remove one document from every sink and from the pipeline's records."""
    with _prefect():
        from flows.documents import delete_document

        known = _live_status(reading_settings()).get(document_id) is not None
        removed = delete_document(document_id)
    if not known and not any(removed.values()):
        raise UserError(f"no such document: {document_id}")
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
) -> None:
    """Build a new index generation with new settings beside the live one, verify it, then switch to it.

    Queries keep answering from the live generation until the switch. Change the embedder or extractor
    with UNICHUNK_* variables; the chunking with the options here.
    """
    with _prefect():
        from flows.params import RebuildParams
        from flows.rebuild import rebuild as rebuild_flow

        sizes = {
            k: v
            for k, v in {"chunk_size": chunk_size, "chunk_overlap": chunk_overlap}.items()
            if v is not None
        }
        chosen = _strategy(strategy)
        params = RebuildParams(
            source=_source_params(path, pattern, source),
            strategy=type(chosen).model_validate({**chosen.model_dump(), **sizes}),
            switch=switch,
            retention_hours=retention_hours,
            max_document_loss=max_document_loss,
            batch_size=batch_size,
        )
        summary = _result(_with_progress(lambda: rebuild_flow(params, return_state=True)))
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
def generations_list() -> None:
    """Every index generation: live, being built, ready, retained for rollback."""
    _print_generations(reading_settings())


@generations_app.command("switch")
@friendly_errors
def generations_switch(
    generation_id: Annotated[
        str | None, typer.Argument(help="Generation to make live (default: the last retired one).")
    ] = None,
    retention_hours: Annotated[float, typer.Option("--retention-hours", min=0)] = DEFAULT_RETENTION_HOURS,
) -> None:
    """Roll back (or forward): verify a retained or ready generation, then make it live."""
    with _prefect():
        from flows.switch import switch_generation

        result = _result(switch_generation(generation_id, retention_hours, return_state=True))
    console.print(f"live generation: {result['live']} (was {result['previous'] or result['live']})")


@generations_app.command("drop")
@friendly_errors
def generations_drop(
    generation_id: Annotated[str, typer.Argument(help="A generation that is not live.")],
) -> None:
    """Delete a generation's stores now, without waiting for its retention."""
    with _prefect():
        from flows.switch import drop_generation_now

        _result(drop_generation_now(generation_id, return_state=True))
    console.print(f"dropped {generation_id}")


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
    the next run (`deployments.serve.ServeRunner`)."""
    with _prefect():
        from deployments.serve import serve_all
        from deployments.webhook import run_receiver

        if webhook:
            threading.Thread(target=run_receiver, args=(host, port), name="webhook", daemon=True).start()
            err_console.print(f"webhook receiver on http://{host}:{port}")
        serve_all()


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
    with _prefect():  # the ingest tool runs the ingest flow in this process
        from deployments.mcp_server import run_server

        run_server(http=http, host=host, port=port)


@app.command()
@friendly_errors
def up() -> None:
    """Start (or reuse) the data dir's local Prefect server (UI on :4200) and the embedded FalkorDB."""
    stack.up()


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
    with _prefect():
        from flows.params import IngestParams, SourceParams

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
