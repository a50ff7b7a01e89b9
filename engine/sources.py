"""Which sources a run covers: the one it names, or every source the data dir has ingested before.

`ingest` and `rebuild` name a source; the nightly `reindex` (and an `ingest` run from the UI with no
source filled in) re-scans every source recorded in `unichunk.index.source_registry`. A recorded source whose
folder has gone (an unmounted disk) is skipped with a warning and keeps its documents: only a listing
that succeeds may delete what vanished from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import get_run_logger

from unichunk.chunking.sources import Source, SourceItem
from unichunk.engine.batches import RunStores, delete_missing, find_missing, process_items, run_stores, triage
from unichunk.engine.params import IngestParams, IngestSummary, SourceParams
from unichunk.engine.shards import run_in_shards
from unichunk.index.errors import SourceOverlap
from unichunk.index.run import RunConfig
from unichunk.index.source_registry import SourceRecord, SourceRegistry, overlapping
from unichunk.sinks.config import SinkSettings


@dataclass
class Listed:
    """One source and what it lists now."""

    params: SourceParams
    source: Source
    items: list[SourceItem]


def list_sources(named: SourceParams | None, settings: SinkSettings, *, record: bool) -> list[Listed]:
    """List `named`, or every recorded source; `record` remembers a named source for later re-indexing."""
    registry = SourceRegistry.of(settings)
    recorded = registry.all()
    if named is not None:
        enclosing = enclosing_source(named, recorded)
        if enclosing is not None:
            get_run_logger().info(
                "%s lies in the source %s (%s): ingested as part of it, with its document IDs",
                named.root if named.kind == "directory" else ", ".join(named.paths),
                enclosing.source_system,
                enclosing.root,
            )
            named = enclosing
        source = with_own_labels(named.build(), recorded)
        listed = [Listed(named, source, source.list())]  # a named source that cannot be listed is an error
        if enclosing is None:  # the enclosing folder's record already covers it, and stays whole
            claimed = named.record(source)
            if record:  # checked and recorded at once: of two overlapping runs, the second is refused
                registry.claim(claimed, lambda recorded: refuse_overlap(claimed, recorded))
            else:
                refuse_overlap(claimed, registry.all())
        return listed
    found = []
    for record_ in recorded:
        params = SourceParams.from_record(record_)
        source = with_own_labels(params.build(), recorded)
        try:
            found.append(Listed(params, source, source.list()))
        except OSError as exc:
            get_run_logger().warning("source %s skipped, its documents kept: %s", record_.name, exc)
    if not found:
        get_run_logger().info("no source recorded in %s yet: nothing to scan", settings.data_dir)
    return found


def with_own_labels(source: Source, recorded: list[SourceRecord]) -> Source:
    """`source` giving its documents the own labels its record keeps (`SourceRecord.document_labels`)."""
    record = next((r for r in recorded if r.name == source.source_system), None)
    if record is not None:
        source.document_labels = dict(record.document_labels)
    return source


def enclosing_source(named: SourceParams, recorded: list[SourceRecord]) -> SourceParams | None:
    """A part of a folder ingested before, named without a source name: that folder's source, narrowed to
    the part; None if `named` is a source of its own.

    Why: a document's ID is (source name, path within the source root). Ingesting `docs/` and later
    `docs/guide/a.md` on its own (a CLI run on one file, an agent's ingest of a subfolder) would give the
    file a second ID, derived from `docs/guide/`, and the stores two copies. So a file, a list of files or
    a subfolder inside a recorded folder keeps the folder's name and root (a subfolder's patterns are
    anchored to it, so only its documents can be deleted as vanished). An explicit name is never changed.
    """
    if named.source_system is not None or named.root is None:
        return None
    parts = (
        [Path(named.root).expanduser().resolve()]
        if named.kind == "directory"
        else [Path(p).expanduser().resolve() for p in named.paths]
    )
    for record in recorded:
        if record.kind != "directory" or record.root is None:
            continue
        root = Path(record.root)
        if any(not part.is_relative_to(root) for part in parts) or parts == [root]:
            continue
        # The folder's access labels and rules hold for its parts, unless this run names its own.
        access = (
            {}
            if named.labels or named.label_rules
            else {"labels": list(record.labels), "label_rules": list(record.label_rules)}
        )
        if named.kind == "paths":
            return named.model_copy(update={"root": record.root, "source_system": record.name, **access})
        sub = parts[0].relative_to(root).as_posix()
        patterns = [f"{sub}/{pattern.lstrip('/')}" for pattern in named.patterns]
        return named.model_copy(
            update={"root": record.root, "source_system": record.name, "patterns": patterns, **access}
        )
    return None


def refuse_overlap(source: SourceRecord, recorded: list[SourceRecord]) -> None:
    """Raise `SourceOverlap` if a recorded source under another name reaches a file `source` reaches: the
    file would get two document IDs and be stored twice (docs/operations.md, "Sources"). A part of a
    recorded folder named without a name never gets here: it is ingested as part of that folder
    (`enclosing_source`)."""
    other = overlapping(source, recorded)
    if other is None:
        return
    mine, theirs = _where(source), _where(other)
    raise SourceOverlap(
        f"{mine} overlaps the source {other.name} ({theirs}), ingested before: the files under both would "
        "be stored twice, under two document IDs. Ingest one of them only: to index this one instead, "
        f"give the other up first (`unichunk forget-source {other.name}` deletes its documents and stops "
        "re-indexing it); a part of a folder ingested before, named without --source, is ingested as "
        "part of that folder"
    )


def _where(record: SourceRecord) -> str:
    if record.kind == "directory" or not record.paths:
        return str(record.root)
    return ", ".join(record.paths[:3]) + (
        f" and {len(record.paths) - 3} more" if len(record.paths) > 3 else ""
    )


def sync_listed(
    listed: list[Listed],
    run: RunConfig,
    summary: IngestSummary,
    stores: RunStores,
    *,
    batch_size: int,
    dry_run: bool,
    delete: bool,
) -> None:
    """Process what each source lists; with `delete`, remove what vanished from it (and from it only).
    `stores` open only if something is to be written or deleted."""
    for entry in listed:
        process_items(entry.items, run, summary, stores, batch_size=batch_size, dry_run=dry_run)
        if delete:
            delete_missing(entry.source, entry.items, run, summary, stores, dry_run=dry_run)


def sync_in_shards(
    listed: list[Listed], run: RunConfig, summary: IngestSummary, params: IngestParams
) -> list[str]:
    """`sync_listed` split across workers (`unichunk.engine.shards`): what is unchanged by size and mtime is told
    here, from the status table, so only documents to load go to the shards (none: no shard starts);
    then, once, what vanished from each source is deleted. Returns the problems that fail the run."""
    items = [item for entry in listed for item in entry.items]
    rows = run.status_store(readonly=params.dry_run).get_many(item.document_id for item in items)
    todo = triage(items, rows, run, summary)
    problems = run_in_shards(todo, run, summary, params) if todo else []
    if params.delete_missing:
        delete_vanished(listed, run, summary, dry_run=params.dry_run)
    return problems


def delete_vanished(listed: list[Listed], run: RunConfig, summary: IngestSummary, *, dry_run: bool) -> None:
    """Delete what vanished from each listed source, opening the sinks only if something did."""
    vanished = [(entry, find_missing(entry.source, entry.items, run, readonly=dry_run)) for entry in listed]
    if not any(missing for _, missing in vanished):
        return
    with run_stores(run, dry_run) as stores:
        for entry, missing in vanished:
            delete_missing(entry.source, entry.items, run, summary, stores, dry_run=dry_run, missing=missing)
