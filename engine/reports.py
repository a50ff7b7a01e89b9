"""What a run leaves in Prefect besides its logs: the Failed state's message and data, and its artifacts.

The Failed state's message names the failed documents in a line that fits the run list. Its data
(`failed_state`) is the summary for a run called in this process, but `RunFailed` (an exception carrying
the summary) for a deployment's run, because Prefect's engine resolves such a run's final state into the
exception it raises, and a summary is no exception. The artifacts (`publish_ingest`, `publish_rebuild`) are
made on every run, the failures table empty when nothing failed, since a key's latest version is what the
Artifacts page shows. File names and errors are user data: escaped in the markdown (`escape_markdown`),
plain JSON strings in the table. An artifact that cannot be created is a warning, never a failed run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import FlowRunContext
from prefect.states import Failed, State

from unichunk.chunking.errors import UnichunkError
from unichunk.chunking.names import one_line
from unichunk.engine.params import FailedDocument, IngestSummary, RebuildSummary
from unichunk.index.chunk_batch import LOAD_FAILED
from unichunk.retrieval.evaluation.markdown import markdown_report

MESSAGE_DOCUMENTS = 3  # documents named in a Failed state's message
MESSAGE_CAUSE_CHARS = 80  # each one's cause, cut to this
MARKDOWN_FAILURES = 20  # failed documents listed in the markdown summary (the table has them all)
TABLE_ROWS = 1000  # rows in a failures table

# CommonMark lets any ASCII punctuation be backslash-escaped, which then stands for itself: escaping all
# of it neutralises emphasis, links, code spans, HTML and table pipes in a file name or an error.
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


class RunFailed(UnichunkError):
    """A run ended Failed: the message of its state, with what the run did (`summary`) attached."""

    def __init__(self, message: str, summary: Any = None) -> None:
        super().__init__(message)
        self.summary = summary

    def __reduce__(self) -> tuple[Any, ...]:  # picklable with its summary (persisted results)
        return (type(self), (str(self), self.summary))


def failed_state(message: str, summary: Any) -> State:
    """The Failed state a flow returns: the summary as its data in this process, `RunFailed` in a
    deployment's run (see the module docstring)."""
    context = FlowRunContext.get()
    if context is not None and context.flow_run is not None and context.flow_run.deployment_id:
        return Failed(message=message, data=RunFailed(message, summary))
    return Failed(message=message, data=summary)


def cause(failure: FailedDocument) -> str:
    """The error without the `load failed: <file>: ` prefix that repeats the file's name, on one line."""
    error = " ".join(failure.error.split())
    if failure.failure is not None and error.startswith(LOAD_FAILED):
        error = error.removeprefix(LOAD_FAILED)
        names = (failure.path, failure.source_id, failure.path and PurePath(failure.path).name)
        for name in names:
            if name and error.startswith(f"{name}: "):
                error = error.removeprefix(f"{name}: ")
                break
    return error


def named_failures(failures: list[FailedDocument], limit: int = MESSAGE_DOCUMENTS) -> str:
    """`a.eml (UnknownCharset: ...), b.pdf (...) and 3 more`: a few documents with their causes."""
    parts = [f"{_name(f)} ({_cut(cause(f), MESSAGE_CAUSE_CHARS)})" for f in failures[:limit]]
    more = len(failures) - len(parts)
    return ", ".join(parts) + (f" and {more} more" if more else "")


def failure_message(summary: IngestSummary) -> str:
    """`2 document(s) failed (of 40 listed): a.eml (cause), b.pdf (cause)`."""
    return (
        f"{len(summary.failed)} document(s) failed (of {summary.listed} listed): "
        f"{named_failures(summary.failed)}"
    )


def escape_markdown(text: object) -> str:
    """User data (a file name, an error) as literal markdown text, on one line."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", " ".join(str(text).split()))


def publish_ingest(summary: IngestSummary, outcome: str) -> None:
    """The summary and failures artifacts of an `ingest` or `reindex` run; `outcome` heads the summary."""
    _publish(
        summary.flow,
        ingest_markdown(summary, outcome),
        failures_table(summary.failed, summary.unreadable, "would fail" if summary.dry_run else "failed"),
    )


def publish_rebuild(summary: RebuildSummary) -> None:
    """The summary and failures artifacts of a `rebuild` run."""
    lost = [f.model_copy(update={"error": f"lost: {f.error}"}) for f in summary.lost]
    table = failures_table(summary.failed + lost, summary.reported, unreadable_status="reported")
    _publish("rebuild", rebuild_markdown(summary), table)


def ingest_markdown(
    summary: IngestSummary, outcome: str = "", level: int = 3, *, failures: bool = True
) -> str:
    """Markdown of an ingest/reindex summary (a rebuild's passes: `level` 4, their failures listed once by
    the rebuild itself, `failures=False`)."""
    head = f"{'#' * level} {summary.flow}" + (f": {escape_markdown(outcome)}" if outcome else "")
    lines = [head, "", "| figure | value |", "|---|---:|"]
    if summary.dry_run:
        rows: list[tuple[str, object]] = [
            ("listed", summary.listed),
            ("would be processed", len(summary.would_process)),
            ("unchanged", summary.skipped),
            ("would fail", len(summary.failed)),
            ("would be deleted", len(summary.would_delete)),
        ]
    else:
        rows = [
            ("listed", summary.listed),
            ("processed", f"{summary.processed} ({summary.chunked} chunked)"),
            ("vectors embedded / reused", f"{summary.embedded} / {summary.reused}"),
            ("unchanged", summary.skipped),
            ("failed", len(summary.failed)),
            ("known unreadable", len(summary.unreadable)),
            ("deleted", summary.deleted),
        ]
    rows.append(("duration", f"{summary.duration_seconds:.1f} s"))
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines += _sink_lines(summary)
    lines += _shard_lines(summary)
    if summary.alignment is not None:
        lines += ["", _alignment_line(summary.alignment, summary.repaired)]
    if summary.dry_run:
        lines += _name_list("Would be processed", summary.would_process)
        lines += _name_list("Would be deleted", summary.would_delete)
    if failures:
        lines += _failure_lines("Failed documents", summary.failed)
        lines += _failure_lines(
            "Known unreadable (unchanged since they failed to load; not failing this run)", summary.unreadable
        )
    return "\n".join(lines) + "\n"


def rebuild_markdown(summary: RebuildSummary) -> str:
    head = f"### rebuild {escape_markdown(summary.generation)}: {summary.outcome}"
    if summary.previous:
        head += f" (live before: {escape_markdown(summary.previous)})"
    lines = [head]
    if summary.reasons:
        lines += [""] + [f"- {escape_markdown(reason)}" for reason in summary.reasons]
    if summary.counts:
        lines += ["", "| generation | documents | chunks |", "|---|---:|---:|"]
        lines += [
            f"| {name} | {c.get('processed', 0)} | {c.get('chunks', 0)} |"
            for name, c in summary.counts.items()
        ]
    for part in (summary.build, summary.catch_up):
        if part is not None:
            lines += ["", ingest_markdown(part, level=4, failures=False).rstrip()]
    if summary.alignment is not None:
        lines += ["", _alignment_line(summary.alignment, summary.repaired)]
    lines += _failure_lines("Lost (held by the live generation, failed in the new one)", summary.lost)
    lines += _failure_lines("Failed in the new generation", summary.failed)
    lines += _failure_lines("Reported (unreadable in the live generation too)", summary.reported)
    return "\n".join(lines) + "\n"


def failures_table(
    failed: list[FailedDocument],
    unreadable: list[FailedDocument],
    failed_status: str = "failed",
    unreadable_status: str = "known unreadable",
) -> dict[str, list[Any]]:
    """Columns of the failures table (a dict of columns, so an empty table keeps its header)."""
    rows = [(f, failed_status) for f in failed] + [(f, unreadable_status) for f in unreadable]
    rows = rows[:TABLE_ROWS]
    return {
        "document": [_name(f) for f, _ in rows],
        "status": [status for _, status in rows],
        "error": [" ".join(f.error.split()) for f, _ in rows],
        "document_id": [f.document_id for f, _ in rows],
    }


def publish_evaluation(report: dict[str, Any]) -> None:
    """A gated rebuild's evaluation of both generations, as a Markdown table artifact."""
    try:
        create_markdown_artifact(
            markdown_report(report),
            key="rebuild-evaluation",
            description="The gate's evaluation: recall / precision / IoU per budget, live and new generation.",
        )
    except Exception as exc:  # a report must never fail the run it reports on
        get_run_logger().warning("could not create the evaluation artifact: %s: %s", type(exc).__name__, exc)


def _publish(flow_name: str, markdown: str, table: dict[str, list[Any]]) -> None:
    try:
        create_markdown_artifact(
            markdown,
            key=f"{flow_name}-summary",
            description="What the run did: counts, chunks and seconds per sink, duration, failures.",
        )
        create_table_artifact(
            table,
            key=f"{flow_name}-failures",
            description="The documents that failed in the run, and known-unreadable ones (empty: none).",
        )
    except Exception as exc:  # a report must never fail the run it reports on
        get_run_logger().warning("could not create the run's artifacts: %s: %s", type(exc).__name__, exc)


def _sink_lines(summary: IngestSummary) -> list[str]:
    sinks = sorted(set(summary.chunks_written) | set(summary.sink_seconds))
    if not sinks:
        return []
    lines = ["", "| sink | chunks written | seconds (prepare + write) |", "|---|---:|---:|"]
    lines += [
        f"| {name} | {summary.chunks_written.get(name, 0)} | {summary.sink_seconds.get(name, 0.0):.1f} |"
        for name in sinks
    ]
    return lines


def _shard_lines(summary: IngestSummary) -> list[str]:
    """A sharded run's shards: each one's documents, attempts, its last run and what that did."""
    if not summary.shards:
        return []
    lines = [
        "",
        "| shard | documents | attempts | last run | state | processed | failed |",
        "|---:|---:|---:|---|---|---:|---:|",
    ]
    lines += [
        f"| {s.shard + 1} | {s.documents} | {s.attempts} | {escape_markdown(s.flow_run or '')} | "
        f"{escape_markdown(s.state + (f': {_cut(s.message, 200)}' if s.message else ''))} | {s.processed} | "
        f"{s.failed} |"
        for s in summary.shards
    ]
    return lines


def _alignment_line(alignment: dict, repaired: dict | None) -> str:
    text = "alignment: ok" if alignment.get("ok") else "alignment: **mismatches remain**"
    if repaired:
        counts = {
            kind: sum(len(ids) for ids in repaired.get(kind, {}).values())
            for kind in ("rewritten", "deleted")
        }
        text += f" (repaired: {counts['rewritten']} document(s) rewritten, {counts['deleted']} deleted)"
    return text


def _failure_lines(title: str, failures: list[FailedDocument]) -> list[str]:
    if not failures:
        return []
    lines = ["", f"**{title}: {len(failures)}**", "", "| document | error |", "|---|---|"]
    lines += [
        f"| {escape_markdown(_name(f))} | {escape_markdown(_cut(f.error, 300))} |"
        for f in failures[:MARKDOWN_FAILURES]
    ]
    if len(failures) > MARKDOWN_FAILURES:
        lines.append(f"\nand {len(failures) - MARKDOWN_FAILURES} more: the failures table lists them all")
    return lines


def _name_list(title: str, names: Iterable[str]) -> list[str]:
    names = list(names)
    if not names:
        return []
    shown = ", ".join(escape_markdown(name) for name in names[:MARKDOWN_FAILURES])
    more = len(names) - MARKDOWN_FAILURES
    return ["", f"**{title}:** {shown}" + (f" and {more} more" if more > 0 else "")]


def _name(failure: FailedDocument) -> str:
    return one_line(failure.source_id or failure.document_id)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
