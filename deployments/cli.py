"""`unichunk`: ingest, search, inspect and verify from a shell.

`ingest`, `delete`, `rebuild`, `generations` and `demo` run the real Prefect flows in this process
(against PREFECT_API_URL, or an ephemeral local Prefect server when none is set); `search`, `status` and
`verify` read the stores directly, so they answer in seconds. A user mistake prints one line and exits 2;
a failed document or a misaligned store exits 1.

Imports of the flows (and so of Prefect) happen inside the commands that run a flow: measured on the
reference machine, `import flows.ingest` takes 3.1 s (Prefect alone 1.7 s), which `status`, `search`,
`verify` and `--help` would otherwise pay for nothing.
"""

from __future__ import annotations

import os

# Before Prefect is imported: no telemetry, time for the ephemeral server to start on a slow machine, and
# only warnings from Prefect's own console logging (the CLI prints its own summary).
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import functools
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from chunking.config import ChunkStrategy
from chunking.errors import UnichunkError
from chunking.sources import DEFAULT_PATTERNS
from deployments import stack
from deployments.settings import SAMPLE_CORPUS, ServiceSettings
from index.alignment import record_alignment, verify_alignment
from index.generations import (
    DEFAULT_RETENTION_HOURS,
    generation_counts,
    reading_settings,
    registry_of,
)
from index.run import DEFAULT_BATCH_SIZE
from index.status import StatusStore
from retrieval import Readers, SearchOptions
from retrieval import search as run_search
from sinks.base import SINK_NAMES
from sinks.config import SinkSettings
from sinks.pool import flow_sinks

app = typer.Typer(
    help="Chunk each document once; keep Qdrant, BM25 and the knowledge graph in step.", no_args_is_help=True
)
console = Console()
err_console = Console(stderr=True)

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


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        return f"invalid {where}: {first['msg']}"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def friendly_errors(fn: F) -> F:
    """One clear line instead of a traceback (UNICHUNK_DEBUG=1 shows tracebacks)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if ServiceSettings().debug:
                raise
            expected = (UnichunkError, ValidationError, OSError, ValueError)
            prefix = "error" if isinstance(exc, expected) else f"error ({type(exc).__name__})"
            err_console.print(
                f"[red]{prefix}:[/red] {escape(_one_line(exc))}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _live_status(settings: SinkSettings) -> StatusStore:
    return StatusStore.of(settings, readonly=True)


def _with_progress(run: Callable[[], Any]) -> Any:
    """Run a flow call under a progress bar fed by `flows.progress`."""
    from flows import progress  # see the module docstring: Prefect loads only for flow commands

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
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


def _run_ingest(params: Any) -> Any:
    """Run the ingest flow with a progress bar; returns the IngestSummary (exits 1 if documents failed)."""
    from flows.ingest import ingest

    state = _with_progress(lambda: ingest(params, return_state=True))
    summary = state.result(raise_on_failure=False)
    if isinstance(summary, BaseException):  # the flow crashed before producing a summary
        raise summary
    console.print(summary.line(), highlight=False, soft_wrap=True, markup=False)
    if summary.dry_run:
        for source_id in summary.would_process:
            console.print(f"  would process  {source_id}", highlight=False, markup=False)
        for source_id in summary.would_delete:
            console.print(f"  would delete   {source_id}", highlight=False, markup=False)
    for failure in summary.failed:
        console.print(
            f"  [red]failed[/red]  {escape(failure.source_id or failure.document_id)}: {escape(failure.error)}",
            highlight=False,
        )
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
        raise typer.Exit(1)


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
        console.print(
            f"{hit.rank}. {hit.chunk_id}  score={hit.score:.4f}  ({ranks})",
            highlight=False,
            soft_wrap=True,
            markup=False,
            style="bold",
        )
        console.print(
            f"   {where} [{hit.start_char}:{hit.end_char}]  {heading}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
        console.print(f"   {preview}", highlight=False, soft_wrap=True, markup=False)


@app.command()
@friendly_errors
def status(failed: Annotated[bool, typer.Option("--failed", help="Only failed documents.")] = False) -> None:
    """The index generations (live, being built, retained) and the live one's document states."""
    settings = reading_settings()
    _print_generations(settings)
    store = _live_status(settings)
    rows = store.rows(state="failed" if failed else None)
    counts = store.counts()
    table = Table("document", "source", "state", "chunks", "updated", "error")
    for row in rows:
        table.add_row(
            row.document_id,
            escape(row.source_id or ""),
            row.state,
            str(row.chunk_count),
            row.updated_at[:19],
            escape((row.error or "")[:120]),
        )
    if rows:
        console.print(table)
    console.print(", ".join(f"{name}: {n}" for name, n in counts.items()), highlight=False)


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
            escape(_describe(gen.description)),
            documents,
            when,
            escape((gen.last_error or "")[:100]),
        )
    console.print(table)


def _verify() -> bool:
    settings = reading_settings()
    with flow_sinks(SINK_NAMES, settings) as sinks:
        report = verify_alignment(sinks, expected=_live_status(settings).expected_chunk_ids())
    record_alignment(report)
    table = Table("sink", "chunks", "missing", "extra", "altered")
    kinds = {"missing": report.missing, "extra": report.extra, "altered": report.altered}
    for name in report.counts:
        table.add_row(
            escape(name), str(report.counts[name]), *(str(len(ids.get(name, ()))) for ids in kinds.values())
        )
    console.print(table)
    for name in report.counts:
        for kind, ids in kinds.items():  # altered: the store holds other content than the ID names
            for chunk_id in sorted(ids.get(name, ()))[:10]:
                console.print(f"  {name}: {kind} {chunk_id}", highlight=False, markup=False)
    verdict = "[green]aligned[/green]" if report.ok else f"[red]{report.mismatch_count()} mismatch(es)[/red]"
    console.print(f"{report.expected_count} expected chunk IDs: {verdict}")
    return report.ok


@app.command()
@friendly_errors
def verify() -> None:
    """Check every sink holds exactly the chunk IDs the status table expects, each with the content its ID
    names (exit 1 if not)."""
    if not _verify():
        raise typer.Exit(1)


@app.command()
@friendly_errors
def delete(
    document_id: Annotated[str, typer.Argument(help="A document ID, as shown by `unichunk status`.")],
) -> None:
    """Remove one document from every sink and from the pipeline's records."""
    from flows.documents import delete_document

    known = _live_status(reading_settings()).get(document_id) is not None
    removed = delete_document(document_id)
    if not known and not any(removed.values()):
        raise UserError(f"no such document: {document_id}")
    console.print(
        f"deleted {document_id}: " + ", ".join(f"{k}={v}" for k, v in sorted(removed.items())), markup=False
    )


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
    from flows.params import RebuildParams
    from flows.rebuild import rebuild as rebuild_flow

    sizes = {
        k: v for k, v in {"chunk_size": chunk_size, "chunk_overlap": chunk_overlap}.items() if v is not None
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
    state = _with_progress(lambda: rebuild_flow(params, return_state=True))
    summary = state.result(raise_on_failure=False)
    if isinstance(summary, BaseException):
        raise summary
    console.print(summary.line(), highlight=False, soft_wrap=True, markup=False)
    if summary.outcome == "refused":
        raise typer.Exit(1)


generations_app = typer.Typer(
    help="List, switch (roll back) and drop index generations.", no_args_is_help=True
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
    from flows.switch import switch_generation

    state = switch_generation(generation_id, retention_hours, return_state=True)
    result = state.result(raise_on_failure=False)
    if isinstance(result, BaseException):
        raise result
    console.print(f"live generation: {result['live']} (was {result['previous'] or result['live']})")


@generations_app.command("drop")
@friendly_errors
def generations_drop(
    generation_id: Annotated[str, typer.Argument(help="A generation that is not live.")],
) -> None:
    """Delete a generation's stores now, without waiting for its retention."""
    from flows.switch import drop_generation_now

    state = drop_generation_now(generation_id, return_state=True)
    result = state.result(raise_on_failure=False)
    if isinstance(result, BaseException):
        raise result
    console.print(f"dropped {generation_id}", markup=False)


@app.command()
@friendly_errors
def serve(
    webhook: Annotated[
        bool, typer.Option("--webhook/--no-webhook", help="Also run the webhook receiver.")
    ] = True,
    host: Annotated[str, typer.Option(help="Webhook receiver host.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Webhook receiver port.")] = 8787,
) -> None:
    """Serve the deployments (cron reindex, event-triggered document flows, rebuild) and the webhook receiver."""
    from deployments.serve import serve_all
    from deployments.webhook import run_receiver

    if webhook:
        threading.Thread(target=run_receiver, args=(host, port), name="webhook", daemon=True).start()
        err_console.print(f"webhook receiver on http://{host}:{port}", markup=False)
    serve_all()


@app.command()
@friendly_errors
def up() -> None:
    """Start a local Prefect server and the embedded FalkorDB for development."""
    stack.up()


@app.command()
@friendly_errors
def demo(query: Annotated[str, typer.Option(help="The sample search.")] = DEMO_QUERY) -> None:
    """Ingest the bundled sample corpus, run a sample search, and verify the stores agree."""
    from flows.params import IngestParams, SourceParams

    if not SAMPLE_CORPUS.is_dir():
        raise UserError(f"the sample corpus is missing: {SAMPLE_CORPUS}")
    console.rule("ingest")
    summary = _run_ingest(IngestParams(source=SourceParams(kind="directory", root=str(SAMPLE_CORPUS))))
    console.rule(f"search: {escape(query)}")
    search(query, k=3)
    console.rule("verify")
    ok = _verify()
    if summary.failed or not ok:
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover - console entry point alternative
    app(prog_name="unichunk")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
