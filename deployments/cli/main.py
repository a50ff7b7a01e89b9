"""`unichunk`: ingest, search, inspect and verify from a shell.

Every command parses its arguments, asks the application layer (`unichunk.interface.IndexService`) and
renders the typed result it gets back: from the service `unichunk serve` runs for this data dir (or
UNICHUNK_SERVICE_URL) for `search`, `status`, `delete` and `generations list` when there is one
(`unichunk.deployments.cli.service_client`), else from a `unichunk.Pipeline` in this process. Flows report
to PREFECT_API_URL, else to the data dir's local Prefect server (`unichunk.local_stack`).

Two rules: data goes to stdout (`--json`: one JSON document and nothing else), progress, warnings and the
one `error:` line to stderr, with the exit codes of `unichunk.deployments.cli.exit_codes`; and settings,
unknown documents and generations are refused before any flow or server starts. The Pipeline, and so the
stores' clients, the models and Prefect, is imported only on the in-process paths: a command a running
service answers imports none of them (`tests/deployments/test_cli_imports.py`).
"""

from __future__ import annotations

import os

# Before Prefect is imported: no telemetry; Prefect's own loggers at WARNING, except the flow-run and
# task-run loggers, whose INFO lines are what the Prefect UI shows (`flow_runs` keeps them off the
# terminal); no model-loading progress bars (the CLI draws its own).
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
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.text import Text

from unichunk import local_stack as stack
from unichunk.access import AccessDenied
from unichunk.deployments.cli.console import (
    ProgressBar,
    console,
    err_console,
    fail,
    literal,
    print_failed,
    print_json,
    print_table,
)
from unichunk.deployments.cli.exit_codes import ExitCode, help_epilog
from unichunk.deployments.cli.failures import friendly_errors, option_errors
from unichunk.deployments.cli.flow_runs import prefect_api
from unichunk.deployments.cli.service_client import ServiceUnavailable, running_service
from unichunk.deployments.settings import SAMPLE_CORPUS, ServiceSettings
from unichunk.errors import UsageError
from unichunk.interface import DocumentState, IndexService, Mode
from unichunk.request_limits import check_entity_name, check_query
from unichunk.results import DocumentInfo, GenerationInfo, Generations
from unichunk.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_GATE_TOLERANCE,
    DEFAULT_RETENTION_HOURS,
    SINK_NAMES,
    ChunkStrategy,
    SinkName,
    SinkSettings,
)
from unichunk.stopping import exit_now, stop_on_signals

if TYPE_CHECKING:
    from unichunk.access import Principal
    from unichunk.pipeline import Pipeline
    from unichunk.results import EntityResult, IngestSummary
    from unichunk.tokens import TokenRecord, Tokens

T = TypeVar("T")

# Click's plain help, not Typer's Rich tables: at 80 columns those squeezed the help to a few words a line,
# cut option names and words with `…`, kept the docstrings' source line breaks and showed every flag as
# taking a value (`--json <bool>`); tests/deployments/test_cli_help.py reads every page at 80 columns.
app = typer.Typer(
    help="Chunk each document once; keep Qdrant, BM25 and the knowledge graph in step.",
    epilog=help_epilog(),
    no_args_is_help=True,
    rich_markup_mode=None,
)

DEMO_QUERY = "how does the pipeline keep the stores aligned"

# Options `ingest` and `rebuild` share.
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


# --- which implementation ------------------------------------------------------------------------------

_BAR = ProgressBar()


@contextlib.contextmanager
def _flow_runs() -> Iterator[None]:
    """What each flow run of the CLI's Pipeline runs inside: its Prefect server and a readable terminal,
    under the progress bar."""
    with stop_on_signals(_say_stopping, before_exit=_quit_now), prefect_api(), _BAR.shown():
        yield


def _nothing_ingested(index: IndexService) -> bool:
    """Whether no index exists yet (the hint after an empty search); a reader who may not see the
    generations (admins only) is not told, and gets no hint."""
    try:
        return index.generations().live is None
    except AccessDenied:
        return False


def _say_stopping(line: str) -> None:
    err_console.print(line, style="yellow")


def _quit_now() -> None:
    """The second Ctrl-C or SIGTERM: exiting at once (`unichunk.stopping`), the terminal given back."""
    _BAR.abandon("quit: the documents this run did not finish are redone by the next run")


def _pipeline(
    settings: SinkSettings | None = None,
    *,
    strategy: ChunkStrategy | None = None,
    sinks: list[str] | None = None,
) -> Pipeline:
    """A Pipeline in this process, over the checked settings (the stores' and models' code loads here)."""
    from unichunk.pipeline import Pipeline

    chosen: tuple[SinkName, ...] = tuple(sinks) if sinks else SINK_NAMES  # type: ignore[arg-type]
    settings = settings or _startup_checks()
    pipeline = Pipeline(
        settings, strategy=strategy, sinks=chosen, flow_context=_flow_runs, progress=_BAR.update
    )
    token = _caller_token()
    if token is not None:  # a token given: run as its principal, as a service would (a fresh Pipeline)
        pipeline.principal = _principal_of(token, settings)
    return pipeline


def _principal_of(token: str, settings: SinkSettings) -> Principal:
    """The principal `token` names in this data dir; a usage error (exit 2) when it names none."""
    from unichunk.tokens import Tokens  # the records' database layer: not for commands a service answers

    admin = ServiceSettings().api_token
    principal = Tokens(settings, admin_token=admin.get_secret_value() if admin else None).principal(token)
    if principal is None:
        raise UsageError("the token is unknown or revoked (`unichunk tokens list` shows the live ones)")
    return principal


def _ask(call: Callable[[IndexService], T], *, models: bool = True) -> T:
    """`call` on the service running for this data dir; when none is running or reachable, on a Pipeline
    in this process (whose settings must suit the models too, unless the call reads records only). The
    service's own error answers are raised, not retried in-process."""
    client = running_service(_caller_token())
    if client is not None:
        try:
            return call(client)
        except ServiceUnavailable:
            pass
        finally:
            client.close()
    with _pipeline(None if models else SinkSettings()) as pipeline:
        return call(pipeline)


def _startup_checks(settings: SinkSettings | None = None) -> SinkSettings:
    """Before a command opens a store or starts anything: the settings parse (an error names its
    variable), and the models they name can work at all. `UNICHUNK_EMBEDDER=openai` needs a key (for
    api.openai.com) or a base URL (a local OpenAI-compatible server may need no key): with neither, every
    request would fail, after the embedder's retries; the LLM extractor needs its base URL."""
    settings = settings or SinkSettings()
    key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else ""
    if settings.embedder == "openai" and not key and not settings.embedding_base_url:
        raise UsageError(
            "UNICHUNK_EMBEDDER=openai needs UNICHUNK_EMBEDDING_API_KEY (for api.openai.com) or "
            "UNICHUNK_EMBEDDING_BASE_URL (an OpenAI-compatible server; with no key if it needs none)"
        )
    if settings.extractor == "llm" and not settings.llm_base_url:
        raise UsageError(
            "UNICHUNK_EXTRACTOR=llm needs UNICHUNK_LLM_BASE_URL (an OpenAI-compatible /v1 endpoint; "
            "UNICHUNK_LLM_API_KEY if it needs a key)"
        )
    return settings


def _check_source(path: Path | None, pattern: list[str] | None, source: str | None) -> None:
    """PATH and the options that go with it make sense (before anything starts)."""
    if path is None and (pattern or source):
        raise UsageError("--pattern and --source go with a PATH")
    if path is not None and not path.expanduser().exists():
        raise UsageError(f"no such file or directory: {path.expanduser()}")


def _strategy(name: str | None, **sizes: int | None) -> ChunkStrategy:
    """`--strategy` (and `--chunk-size`/`--chunk-overlap`) where given, else UNICHUNK_CHUNK_* from the
    environment; an invalid value is named by its option or its variable."""
    given = {"name": name, **sizes}
    options = {field: "--strategy" if field == "name" else "--" + field.replace("_", "-") for field in given}
    with option_errors(**{f: options[f] if value is not None else None for f, value in given.items()}):
        return ChunkStrategy(**{field: value for field, value in given.items() if value is not None})


def _print_ingest(summary: IngestSummary, *, as_json: bool) -> None:
    """The run's line, then what a dry run would do and one line per failed document; or its JSON."""
    if as_json:
        print_json(summary.model_dump(mode="json"))
        return
    console.print(summary.line())
    if summary.dry_run:
        for source_id in summary.would_process:
            console.print(f"  would process  {literal(source_id)}")
        for source_id in summary.would_delete:
            console.print(f"  would delete   {literal(source_id)}")
    for failure in summary.failed:
        print_failed(failure.source_id or failure.document_id, failure.error)


def _version(value: bool) -> None:
    if value:
        from unichunk import __version__  # only when asked: --help does not pay for it

        console.print(f"unichunk {__version__}")
        raise typer.Exit()


# The caller's token for this command (`--token`), else UNICHUNK_TOKEN (`ServiceSettings.token`).
_TOKEN: list[str] = []


def _caller_token() -> str | None:
    if _TOKEN:
        return _TOKEN[0]
    configured = ServiceSettings().token
    return configured.get_secret_value() if configured else None


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Your access token (`unichunk tokens create`; default: UNICHUNK_TOKEN): sent to a running "
            "service, and in-process the command runs as its principal. Unset: UNICHUNK_API_TOKEN to a "
            "service; in-process, the owner of the data dir.",
            show_default=False,
        ),
    ] = None,
) -> None:
    _TOKEN.clear()
    if token is not None:
        _TOKEN.append(token)


# --- commands ------------------------------------------------------------------------------------------


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
    delete_missing: Annotated[
        bool,
        typer.Option(
            "--delete-missing/--no-delete-missing",
            help="Delete from every store the documents gone from the source.",
        ),
    ] = True,
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
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="An access label every document of the source carries (repeatable; none: only admin "
            "tokens read them). Kept for the source; changing them relabels without re-embedding.",
        ),
    ] = None,
    label_rule: Annotated[
        list[str] | None,
        typer.Option(
            "--label-rule",
            help="PATTERN=LABEL[,LABEL...]: documents whose path in the source matches the glob carry "
            "those labels too, e.g. 'hr/**=hr' (repeatable).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Ingest PATH into every sink, re-doing only new and changed documents.

    A document is identified by its source and its path in it: two folders never share document IDs, and
    the same folder keeps them (`--source` names the source, to keep IDs when the folder moves)."""
    _check_source(path, pattern, source)
    if path is None and (label or label_rule):
        raise UsageError("--label and --label-rule go with a PATH")
    chosen = _strategy(strategy)
    with (
        option_errors(
            sinks="--sink",
            source_system="--source",
            patterns="--pattern",
            labels="--label",
            label_rules="--label-rule",
        ),
        _pipeline(strategy=chosen, sinks=sink) as pipeline,
    ):
        summary = pipeline.ingest(
            path,
            source_name=source,
            patterns=pattern,
            delete_missing=delete_missing,
            dry_run=dry_run,
            batch_size=batch_size,
            shards=shards,
            labels=label,
            label_rules=label_rule,
        )
    _print_ingest(summary, as_json=as_json)
    if summary.failed and not summary.dry_run:
        raise typer.Exit(ExitCode.NOT_ALL_RIGHT)


@app.command()
@friendly_errors
def search(
    query: Annotated[list[str], typer.Argument(help="What to look for (quotes optional).")],
    k: Annotated[int, typer.Option("-k", "--top", min=1, max=100, help="How many hits.")] = 5,
    mode: Annotated[
        Mode,
        typer.Option(
            "--mode",
            help="hybrid (BM25 and vectors fused), keywords, vectors, or graph (the chunks of the entities "
            "the query names).",
        ),
    ] = "hybrid",
    as_json: JsonOption = False,
) -> None:
    """Hybrid search: BM25 and vector hits fused by their scores (--mode: one retriever alone). With
    --json, the whole result (`unichunk.results.SearchResult`, as `GET /search` serves it)."""
    text = " ".join(query)
    check_query(text)  # blank or too long: exit 2 before any service or store is asked

    def ask(index: IndexService) -> tuple[Any, bool]:
        found = index.search(text, k, mode=mode, graph=False, expand=False)
        return found, not found.hits and _nothing_ingested(index)

    result, nothing_ingested = _ask(ask)
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    if not result.hits:
        console.print(
            "no results: nothing is ingested yet (`unichunk ingest PATH`, or `unichunk demo`)"
            if nothing_ingested
            else "no results"
        )
        return
    for hit in result.hits:
        where = hit.source_id or hit.document_id
        ranks = " ".join(f"{name}#{rank}" for name, rank in sorted(hit.ranks.items()))
        heading = " > ".join(hit.heading_chain) or "-"
        shown = result.preview(hit)  # its best passage, where the search cut it into some
        preview = literal(" ".join(shown.split())[:200])  # a document's ESC must not reach the terminal
        console.print(f"{hit.rank}. {hit.chunk_id}  score={hit.score:.4f}  ({ranks})", style="bold")
        console.print(f"   {literal(where)} [{hit.start_char}:{hit.end_char}]  {literal(heading)}")
        console.print(f"   {preview}")


@app.command()
@friendly_errors
def entity(
    name: Annotated[list[str], typer.Argument(help="The entity's name, any spelling (quotes optional).")],
    hops: Annotated[int, typer.Option("--hops", min=1, max=3, help="Relation steps out.")] = 1,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=200, help="The strongest relations shown.")
    ] = 20,
    as_json: JsonOption = False,
) -> None:
    """What the knowledge graph holds of one entity: where it was learnt, the entities its name reaches in
    other documents (an acronym and its expansion; a surname of several people is ambiguous, never one
    person), the spellings merged into it per chunk, and its strongest relations. With --json, the whole
    result (`unichunk.results.EntityResult`, as `GET /entities/{name}` serves it). An unknown entity is
    exit 1."""
    text = " ".join(name)
    check_entity_name(text)  # blank or too long: exit 2 before any service or store is asked
    found = _ask(lambda index: index.entity(text, hops=hops, limit=limit))
    if as_json:
        print_json(found.model_dump(mode="json"))
        return
    _print_entity(found)


def _print_entity(found: EntityResult) -> None:
    if found.entity is None:
        console.print(
            f"{literal(found.query)} is the {found.matched_by} of {len(found.candidates)} entities; the graph "
            "cannot tell which is meant:",
            style="bold",
        )
        for number, candidate in enumerate(found.candidates, start=1):
            documents = ", ".join(dict.fromkeys(s.source_id or s.document_id for s in candidate.sources))
            console.print(f"{number}. {literal(candidate.name)} ({candidate.type}, {literal(candidate.key)})")
            console.print(f"   in {literal(documents)}")
        return
    entity = found.entity
    console.print(f"{literal(entity.name)}  ({entity.type}, key {literal(entity.key)!r})", style="bold")
    for line in entity.description.splitlines()[:3]:
        console.print(f"   {literal(line)}")
    count = len(entity.sources)
    console.print(f"sources ({count} chunk{'' if count == 1 else 's'}):", style="bold")
    for source in entity.sources[:20]:
        written = f"  as {literal(source.written)!r}" if source.written else ""
        console.print(f"   {literal(source.source_id or source.document_id)}  {source.chunk_id}{written}")
    if len(entity.sources) > 20:
        console.print(f"   ... and {len(entity.sources) - 20} more (--json lists them all)")
    where_of = {s.chunk_id: s.source_id or s.document_id for s in entity.sources}
    decided = [m for m in found.merges if m.merged_from]
    if decided:
        console.print("merged here (inside one document):", style="bold")
        for merge in decided:
            spelled = ", ".join(repr(literal(k)) for k in merge.merged_from)
            where = where_of.get(merge.chunk_id, merge.document_id)
            console.print(f"   {spelled} -> {literal(merge.into)}  in {literal(where)} {merge.chunk_id}")
    if variants := sum(1 for m in found.merges if m.variants):
        console.print(
            f"{'   ' if decided else ''}({variants} chunk{'' if variants == 1 else 's'} wrote the name with an article, a possessive, "
            "a title or dots: --json lists them)"
        )
    if found.also_known_as:
        console.print("also known as (in other documents, not merged):", style="bold")
        for alias in found.also_known_as:
            maybe = ", ambiguous: several entities claim it" if alias.ambiguous else ""
            where = ", ".join(alias.source_ids or alias.document_ids)
            console.print(f"   {literal(alias.name)} ({alias.via}{maybe})  in {literal(where)}")
    if found.relations:
        console.print(f"relations (strongest first, {len(found.relations)}):", style="bold")
        for relation in found.relations:
            keywords = f"  {literal(relation.keywords)}" if relation.keywords else ""
            console.print(
                f"   {literal(relation.source)} -- {literal(relation.target)}  weight={relation.weight:g}{keywords}"
            )


@app.command()
@friendly_errors
def status(
    failed: Annotated[bool, typer.Option("--failed", help="Only failed documents.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The index generations (live, being built, retained) and the live one's document states; then each
    failed document with its whole error, one line each."""
    found = _ask(lambda index: index.status(failed_only=failed), models=False)
    if as_json:
        print_json(found.model_dump(mode="json"))
        return
    _print_generations(found)
    _print_documents(found.documents)
    console.print(", ".join(f"{name}: {n}" for name, n in found.counts.items()))


@app.command()
@friendly_errors
def documents(
    failed: Annotated[bool, typer.Option("--failed", help="Only failed documents.")] = False,
    state: Annotated[
        DocumentState | None, typer.Option("--state", help="Only documents in this state.")
    ] = None,
    source: Annotated[str | None, typer.Option("--source", help="Only this source's documents.")] = None,
    as_json: JsonOption = False,
) -> None:
    """The documents you may read, by source: each one's state and chunk count, then each failed one's
    whole error. What `status` shows an admin, for any token (UNICHUNK_TOKEN or --token)."""
    if failed and state not in (None, "failed"):
        raise UsageError(f"--failed and --state {state} ask for two states: give one")
    wanted: DocumentState | None = "failed" if failed else state
    found = _ask(lambda index: index.documents(state=wanted, source=source), models=False)
    if as_json:
        print_json([d.model_dump(mode="json") for d in found.values()])
        return
    _print_documents(list(found.values()))
    console.print(f"{len(found)} document(s)")


def _print_documents(documents: Sequence[DocumentInfo]) -> None:
    """A table of documents, then each failed one's error whole: a table cell wraps or cuts it, and it is
    what the user needs."""
    if documents:
        print_table(
            ("document", "source", "state", "chunks", "updated"),
            [
                (d.document_id, d.source_id or "", d.state, str(d.chunk_count), d.updated_at[:19])
                for d in documents
            ],
        )
    for d in documents:
        if d.state == "failed":
            print_failed(f"{d.source_id or d.document_id} ({d.document_id})", d.error or "")


def _describe(generation: GenerationInfo) -> str:
    """One line naming the settings of a generation: strategy and sizes, embedder, extractor."""
    chunking = generation.settings.get("chunking", {})
    size, overlap = chunking.get("chunk_size"), chunking.get("chunk_overlap")
    sizes = (
        ""
        if size is None and overlap is None
        else f"{size or 'default'}/{overlap if overlap is not None else 'default'}"
    )
    embedder = generation.settings.get("embedder", "?")
    if embedder == "openai":
        embedder = f"openai:{generation.settings.get('embedding_model')}"
    extractor = generation.settings.get("extractor")
    return f"{chunking.get('name', '?')}{' ' + sizes if sizes else ''}, {embedder}, {extractor}"


def _print_generations(found: Generations) -> None:
    if not found.generations:
        console.print("no index generation yet (nothing ingested)")
        return
    rows = []
    for gen in found.generations:
        done = gen.counts.get("processed", 0)
        building = gen.state in ("building", "failed") and gen.listed
        when = {"live": f"live since {gen.live_since}", "retired": f"kept until {gen.drop_after}"}.get(
            gen.state, f"started {gen.created_at}"
        )
        rows.append(
            (
                gen.generation_id,
                gen.state,
                gen.fingerprint,
                _describe(gen),
                f"{done}/{gen.listed}" if building else str(done),
                when,
                (gen.last_error or "")[:100],
            )
        )
    print_table(
        ("generation", "state", "fingerprint", "settings", "documents", "since / until", "note"), rows
    )


def _verify(pipeline: Pipeline, *, as_json: bool = False) -> bool:
    report = pipeline.verify()
    if as_json:
        print_json(report.as_dict())
        return report.ok and not report.stored_twice
    kinds = {
        "missing": report.missing,
        "extra": report.extra,
        "altered": report.altered,
        "mislabelled": report.mislabelled,  # other access labels than the records give
    }
    print_table(
        ("sink", "chunks", *kinds),
        [
            (name, str(report.counts[name]), *(str(len(ids.get(name, ()))) for ids in kinds.values()))
            for name in report.counts
        ],
    )
    for name in report.counts:
        for kind, ids in kinds.items():  # altered: the store holds other content than the ID names
            for chunk_id in sorted(ids.get(name, ()))[:10]:
                console.print(f"  {name}: {kind} {chunk_id}")
    verdict = ("aligned", "green") if report.ok else (f"{report.mismatch_count()} mismatch(es)", "red")
    console.print(Text.assemble(f"{report.expected_count} expected chunk IDs: ", verdict))
    for path, ids in sorted(report.stored_twice.items())[:10]:  # two sources over one file
        console.print(Text(f"stored twice: {path} under document IDs {', '.join(ids)}", style="red"))
    if report.same_content:
        console.print(f"{len(report.same_content)} content(s) stored under several document IDs (copies?)")
        for content_hash, files in sorted(report.same_content.items())[:10]:
            console.print(Text(f"  same content {content_hash[:12]}: {', '.join(files)}"))
    return report.ok and not report.stored_twice


@app.command()
@friendly_errors
def verify(as_json: JsonOption = False) -> None:
    """Check every sink holds exactly the chunk IDs the status table expects, each with the content its ID
    names (exit 1 if not). With --json, `AlignmentReport.as_dict()`: counts and example IDs per sink."""
    with _pipeline() as pipeline:
        ok = _verify(pipeline, as_json=as_json)
    if not ok:
        raise typer.Exit(ExitCode.NOT_ALL_RIGHT)


@app.command()
@friendly_errors
def delete(
    document_id: Annotated[str, typer.Argument(help="A document ID, as shown by `unichunk status`.")],
    as_json: JsonOption = False,
) -> None:
    """Remove one document from every sink and from the pipeline's records."""
    removed = _ask(lambda index: index.delete(document_id))
    if as_json:
        print_json({"document_id": document_id, "removed": removed})
        return
    console.print(f"deleted {document_id}: " + ", ".join(f"{k}={v}" for k, v in sorted(removed.items())))


@app.command("forget-source")
@friendly_errors
def forget_source(
    name: Annotated[
        str, typer.Argument(help="A source name, as an overlap error or `unichunk status` names it.")
    ],
) -> None:
    """Delete every document of one source and stop re-indexing it (to ingest the folder around it)."""
    with _pipeline() as pipeline:
        count = pipeline.forget_source(name)
    console.print(f"forgot the source {name}: {count} document(s) deleted")


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
    gate: Annotated[
        Path | None,
        typer.Option(
            "--gate",
            help="Questions (as `eval` takes): switch only if the new generation retrieves no worse on them.",
        ),
    ] = None,
    tolerance: Annotated[
        float,
        typer.Option("--tolerance", min=0, max=1, help="With --gate: allowed recall drop at any budget."),
    ] = DEFAULT_GATE_TOLERANCE,
    as_json: JsonOption = False,
) -> None:
    """Build a new index generation with new settings beside the live one, verify it, then switch to it.

    Queries keep answering from the live generation until the switch. Change the embedder or extractor
    with UNICHUNK_* variables; the chunking with the options here. With --gate QUESTIONS, both generations
    are evaluated on the questions first and the switch happens only if the new one's character recall is
    at no budget lower than the live one's by more than --tolerance (else exit 5, the live one kept).
    """
    _check_source(path, pattern, source)
    chosen = _strategy(strategy, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    with option_errors(source_system="--source", patterns="--pattern"), _pipeline() as pipeline:
        summary = pipeline.rebuild(
            path,
            strategy=chosen,
            source_name=source,
            patterns=pattern,
            switch=switch,
            retention_hours=retention_hours,
            max_document_loss=max_document_loss,
            batch_size=batch_size,
            gate=gate,
            tolerance=tolerance,
        )
    if as_json:
        print_json(summary.model_dump(mode="json"))
    else:
        console.print(summary.line())
        for failure in summary.failed:
            print_failed(failure.source_id or failure.document_id, failure.error)
        if summary.evaluation:
            console.print(f"evaluation: {summary.evaluation}")
    if summary.outcome == "refused":
        raise typer.Exit(ExitCode.NOT_ALL_RIGHT)
    if summary.outcome == "gated":
        raise typer.Exit(ExitCode.GATED)


def _budgets(text: str) -> list[int]:
    """`--budgets 1000,2000,4000` as positive integers (a bad value is a usage error naming the option)."""
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        budgets = []
    if not budgets or any(b <= 0 for b in budgets):
        raise UsageError(f"--budgets wants positive character counts separated by commas, not {text!r}")
    return budgets


@app.command("eval")
@friendly_errors
def eval_command(
    questions: Annotated[
        Path,
        typer.Argument(
            help="Questions: a CSV (question, references, corpus_id) or JSONL (docs/evaluation.md)."
        ),
    ],
    against: Annotated[
        str | None,
        typer.Option("--against", help="A second generation (ID) to compare, paired per question."),
    ] = None,
    generation: Annotated[
        str | None, typer.Option("--generation", help="The generation to evaluate (default: the live one).")
    ] = None,
    budgets: Annotated[
        str, typer.Option("--budgets", help="Character budgets, comma-separated (and the same in tokens).")
    ] = "1000,2000,4000",
    k: Annotated[int, typer.Option("-k", min=1, max=100, help="Hits judged for hit@k and MRR.")] = 10,
    retrievers: Annotated[
        bool, typer.Option("--retrievers", help="Also each retriever alone (keywords, vectors, graph).")
    ] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write the report as an HTML file.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Score the search on your questions: character recall / precision / IoU of a budget of retrieved
    text, hit@k and MRR; with --against, the difference with its bootstrap interval. The report is also
    saved as <data dir>/evaluations/latest.json."""
    from unichunk.deployments.cli.evaluation import print_report, write_html

    chosen = _budgets(budgets)
    if not questions.is_file():
        raise UsageError(f"no questions file at {questions}")
    with _pipeline() as pipeline:
        report = pipeline.eval(
            questions, generation=generation, against=against, budgets=chosen, k=k, retrievers=retrievers
        )
    if html is not None:
        write_html(report, html)
    if as_json:
        print_json(report)
    else:
        print_report(report)


generations_app = typer.Typer(
    help="List, switch (roll back) and drop index generations.",
    epilog=help_epilog(),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(generations_app, name="generations")


@generations_app.command("list")
@friendly_errors
def generations_list(as_json: JsonOption = False) -> None:
    """Every index generation: live, being built, ready, retained for rollback."""
    found = _ask(lambda index: index.generations(), models=False)
    if as_json:
        print_json(found.model_dump(mode="json"))
        return
    _print_generations(found)


@generations_app.command("switch")
@friendly_errors
def generations_switch(
    generation_id: Annotated[
        str | None, typer.Argument(help="Generation to make live (default: the last retired one).")
    ] = None,
    retention_hours: Annotated[
        float, typer.Option("--retention-hours", min=0, help="Keep the replaced generation this long.")
    ] = DEFAULT_RETENTION_HOURS,
    as_json: JsonOption = False,
) -> None:
    """Roll back (or forward): verify a retained or ready generation, then make it live."""
    with _pipeline() as pipeline:
        result = pipeline.switch_generation(generation_id, retention_hours=retention_hours)
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    console.print(f"live generation: {result.live} (was {result.previous or result.live})")


@generations_app.command("drop")
@friendly_errors
def generations_drop(
    generation_id: Annotated[str, typer.Argument(help="A generation that is not live.")],
    as_json: JsonOption = False,
) -> None:
    """Delete a generation's stores now, without waiting for its retention."""
    with _pipeline() as pipeline:
        dropped = pipeline.drop_generation(generation_id)
    if as_json:
        print_json(dropped.model_dump(mode="json"))
        return
    console.print(f"dropped {dropped.dropped} (was {dropped.state})")


tokens_app = typer.Typer(
    help="Access tokens: create (shown once), list, revoke. Stored only as hashes in the data dir's records.",
    epilog=help_epilog(),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(tokens_app, name="tokens")


def _token_row(record: TokenRecord) -> dict[str, object]:
    return {
        "id": record.id,
        "name": record.name,
        "labels": list(record.labels),
        "may_write": record.may_write,
        "admin": record.admin,
        "created_at": record.created_at,
        "revoked_at": record.revoked_at,
    }


def _tokens() -> Tokens:
    from unichunk.tokens import Tokens

    return Tokens(SinkSettings())


@tokens_app.command("create")
@friendly_errors
def tokens_create(
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="A label it may read (repeatable).")
    ] = None,
    write: Annotated[bool, typer.Option("--write", help="It may also ingest, delete and rebuild.")] = False,
    admin: Annotated[
        bool, typer.Option("--admin", help="It may read and do everything, status and verify included.")
    ] = False,
    name: Annotated[
        str | None, typer.Option("--name", help="A unique name for `list` and `revoke` (default: its id).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a token and print it, this once: only its hash is kept. Without --label it reads nothing
    (unless --admin)."""
    token, record = _tokens().create(label or [], name=name, may_write=write, admin=admin)
    if as_json:
        print_json({"token": token, **_token_row(record)})
        return
    console.print(token, highlight=False, soft_wrap=True)
    err_console.print(
        f"token {record.name} ({record.id}): labels {', '.join(record.labels) or '(none)'}"
        f"{'; may write' if record.may_write else ''}{'; admin' if record.admin else ''}. "
        "Shown this once: keep it now."
    )


@tokens_app.command("list")
@friendly_errors
def tokens_list(as_json: JsonOption = False) -> None:
    """Every token, revoked ones too: id, name, labels, rights, dates (never a token or its hash)."""
    records = _tokens().list()
    if as_json:
        print_json({"tokens": [_token_row(record) for record in records]})
        return
    print_table(
        ["id", "name", "labels", "write", "admin", "created", "revoked"],
        [
            [
                r.id,
                r.name,
                ",".join(r.labels),
                "yes" if r.may_write else "",
                "yes" if r.admin else "",
                r.created_at,
                r.revoked_at or "",
            ]
            for r in records
        ],
    )


@tokens_app.command("revoke")
@friendly_errors
def tokens_revoke(
    token: Annotated[str, typer.Argument(help="The token's id or name, as `unichunk tokens list` shows.")],
) -> None:
    """Revoke a token: a running service refuses it from its next request."""
    record = _tokens().revoke(token)
    console.print(f"revoked {record.name} ({record.id}) at {record.revoked_at}")


def _refuse_open_listener(host: str) -> None:
    """Listening beyond loopback needs UNICHUNK_API_TOKEN: one line, exit 2 (`service_auth`)."""
    from unichunk.deployments.service.auth import listen_refusal

    refusal = listen_refusal(host)
    if refusal:
        fail(("error:", "red"), " ", refusal)
        raise typer.Exit(ExitCode.USAGE)


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
    service = ServiceSettings()
    secret = service.webhook_secret
    if webhook and not (secret and secret.get_secret_value()) and not service.webhook_secrets:
        err_console.print(
            Text.assemble(
                ("warning:", "yellow"),
                " neither UNICHUNK_WEBHOOK_SECRET nor UNICHUNK_WEBHOOK_SECRETS is set: the webhook receiver "
                "refuses every delivery (401) until one is",
            )
        )
    with prefect_api(route_logs=False):
        from unichunk.deployments.service.webhook import run_receiver
        from unichunk.deployments.serving.serve import serve_all

        if webhook:
            threading.Thread(target=run_receiver, args=(host, port), name="webhook", daemon=True).start()
            err_console.print(f"webhook receiver on http://{host}:{port}")
        serve_all()
    # Stopped (the only way serve_all returns). Daemon threads may still be inside native code (a model
    # load, a C++ import of the deployments' flows): the interpreter's teardown under them hung one CI run
    # and aborted another ("FATAL: exception not rethrown", exit -6), so exit past it, as a stopped run
    # does, withdrawing the service file first (its atexit hook will not run).
    from unichunk.deployments.service.discovery import service_file, withdraw

    withdraw(service_file())
    exit_now(0)


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
    with prefect_api(route_logs=False):
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

    `ingest` reads only inside UNICHUNK_MCP_ROOTS (else UNICHUNK_SOURCE_ROOT). The tools run as `--token`'s
    principal (UNICHUNK_TOKEN), or over HTTP as each request's bearer token's. stdout carries the protocol
    alone; everything else goes to stderr (see docs/operations.md, "MCP server for agents")."""
    if http:
        _refuse_open_listener(host)
    _startup_checks()
    with prefect_api(route_logs=False):  # the ingest tool runs the ingest flow in this process
        from unichunk.deployments.mcp.server import run_server

        run_server(http=http, host=host, port=port, token=_caller_token())


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
        print_json(dataclasses.asdict(urls))


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
        raise UsageError(f"the sample corpus is missing: {SAMPLE_CORPUS}")
    with _pipeline() as pipeline:
        console.rule("ingest")
        summary = pipeline.ingest(SAMPLE_CORPUS)
        _print_ingest(summary, as_json=False)
    console.rule(f"search: {query}")
    search(query.split(), k=3)
    console.rule("verify")
    with _pipeline() as pipeline:
        ok = _verify(pipeline)
    left = stack.running()
    if left:
        console.rule("left running")
        for line in left:
            console.print(line)
        console.print("`unichunk down` stops them.")
    if summary.failed or not ok:
        raise typer.Exit(ExitCode.NOT_ALL_RIGHT)


def main() -> None:  # pragma: no cover - console entry point alternative
    app(prog_name="unichunk")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
