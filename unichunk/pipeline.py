"""`Pipeline`: unichunk from Python, in a few lines, through the very code the CLI and the served runs use.

    from unichunk import Pipeline
    p = Pipeline()                                   # embedded defaults (or Pipeline(settings=...), env)
    p.ingest("docs/")
    p.search("how are deletions propagated", k=5)

Writes run the Prefect flows (`unichunk.flows.ingest`, `unichunk.flows.rebuild`, `unichunk.flows.documents`) in this process: against
PREFECT_API_URL when it is set (the runs show in the service's UI), else against the data dir's local
Prefect server, the CLI's (`unichunk.local_stack.prefect_api`). Reads call `unichunk.retrieval.search` and the stores' read side directly.
So there is one implementation of each operation, whoever calls it.

The stores a Pipeline opens stay open between calls (warm searches) until `close()` or the end of a
`with` block. With Qdrant in local mode only one process may hold its folder: close the Pipeline before a
CLI command or a served run needs the same data dir (a Qdrant server has no such limit).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from prefect.states import State

from unichunk import local_stack
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.sources import DEFAULT_PATTERNS
from unichunk.engine.params import (
    FailedDocument,
    IngestParams,
    IngestSummary,
    RebuildParams,
    RebuildSummary,
    SourceParams,
)
from unichunk.flows.documents import delete_document
from unichunk.flows.ingest import ingest as ingest_flow
from unichunk.flows.rebuild import rebuild as rebuild_flow
from unichunk.index.alignment import AlignmentReport, verify_live
from unichunk.index.defaults import DEFAULT_BATCH_SIZE, DEFAULT_RETENTION_HOURS
from unichunk.index.generations import reading_settings
from unichunk.index.status import StatusStore
from unichunk.index_status import IndexStatus, index_status
from unichunk.inline_documents import INLINE_FOLDER, inline_root, named_texts, write_documents
from unichunk.retrieval.context import DEFAULT_BUDGET
from unichunk.retrieval.ranking import Mode
from unichunk.retrieval.readers import Readers
from unichunk.retrieval.results import SearchResult
from unichunk.retrieval.search import SearchOptions, search
from unichunk.settings_env import environment, settings_environment
from unichunk.sinks.base import SINK_NAMES, InvalidRequest, SinkName, StoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks, release_sinks

PathLike = str | Path
SEARCH_SINKS: tuple[SinkName, ...] = ("keywords", "vectors", "graph")


class Pipeline:
    """Ingest, search, delete, check and rebuild one data dir's index, from Python.

    `settings` are the stores and models (default: `UNICHUNK_*` variables, then the embedded defaults);
    `strategy` the chunking of `ingest` (default: `UNICHUNK_CHUNK_*`, `auto`); `sinks` the stores ingest
    writes. Not for concurrent calls from several threads with different settings (see
    `unichunk.settings_env`).
    """

    def __init__(
        self,
        settings: SinkSettings | None = None,
        *,
        data_dir: PathLike | None = None,
        strategy: ChunkStrategy | None = None,
        sinks: Sequence[SinkName] = SINK_NAMES,
    ) -> None:
        base = settings or SinkSettings()
        folder = Path(data_dir) if data_dir is not None else base.data_dir
        # absolute, so a later chdir (notebooks do) cannot point the Pipeline at another index
        self.settings = base.model_copy(update={"data_dir": folder.expanduser().resolve()})
        self.strategy = strategy or ChunkStrategy()
        self.sinks: tuple[SinkName, ...] = tuple(sinks)
        self._env = settings_environment(self.settings)
        self._opened: list[tuple[SinkSettings, tuple[SinkName, ...]]] = []

    # --- writes -----------------------------------------------------------------------------------------

    def ingest(
        self,
        source: PathLike | Sequence[PathLike] | Sequence[Document] | Mapping[str, str] | None = None,
        *,
        source_name: str | None = None,
        patterns: Sequence[str] | None = None,
        delete_missing: bool = True,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        shards: int = 1,
    ) -> IngestSummary:
        """Bring the index in line with `source`, re-doing only new and changed documents.

        `source` is a directory (every matching file, `patterns` default to the readable formats; files
        gone from it are deleted unless `delete_missing=False`), one file, a list of files, in-memory
        documents (`Document`s with a `source_id`, or a mapping name -> text: they need `source_name`,
        and are added or updated, never deleted by omission), or None: every source ingested before.
        `source_name` names the source, part of every document ID (default: derived from the folder).
        `shards` > 1 splits the run into that many `ingest-shard` runs on the workers of the Prefect work
        pool (or a `unichunk serve`), which must run with the same settings (docs/operations.md).

        Returns the run's summary; documents that failed are listed in `summary.failed` (the rest is
        stored), never raised. Raises for what stops the whole run (`GenerationMismatch`: other settings
        than the live index's; a store unreachable)."""
        rejected: list[FailedDocument] = []
        params_source: SourceParams | None
        if isinstance(source, Mapping) or _is_documents(source):
            params_source, rejected = self._inline_source(source, source_name)  # type: ignore[arg-type]
            delete_missing = False
        else:
            params_source = _source_params(source, source_name, patterns)
        params = IngestParams(
            source=params_source,
            strategy=self.strategy,
            sinks=list(self.sinks),
            delete_missing=delete_missing,
            dry_run=dry_run,
            batch_size=batch_size,
            shards=shards,
        )
        summary = self._run(lambda: ingest_flow(params, return_state=True))
        summary.failed.extend(rejected)
        summary.listed += len(rejected)
        return summary

    def delete(self, document_id: str) -> dict[str, int]:
        """Remove one document from every store and the pipeline's records; chunks removed per store. An
        in-memory document's file goes too, so a re-index cannot bring it back. Raises `InvalidRequest`
        for an unknown document."""
        row = self._status().get(document_id)
        removed = self._run(lambda: delete_document(document_id))
        if row is None and not any(removed.values()):
            raise InvalidRequest("documents", f"no such document: {document_id}")
        if row is not None and row.path and _inside(Path(row.path), self.settings.data_dir / INLINE_FOLDER):
            Path(row.path).unlink(missing_ok=True)
        return removed

    def rebuild(
        self,
        source: PathLike | None = None,
        *,
        strategy: ChunkStrategy | None = None,
        source_name: str | None = None,
        switch: bool = True,
        retention_hours: float = DEFAULT_RETENTION_HOURS,
        max_document_loss: float = 0.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> RebuildSummary:
        """Build a new index generation with `strategy` (and these settings) beside the live one, verify
        it, switch readers to it. `summary.outcome` says what happened (`refused` leaves the live one)."""
        params = RebuildParams(
            source=_source_params(source, source_name, None) if source is not None else None,
            strategy=strategy or self.strategy,
            switch=switch,
            retention_hours=retention_hours,
            max_document_loss=max_document_loss,
            batch_size=batch_size,
        )
        self.close()  # the flow writes and switches generations: let it open what it needs
        summary = self._run(lambda: rebuild_flow(params, return_state=True))
        if summary.outcome == "switched":
            self.strategy = params.strategy
        return summary

    # --- reads ------------------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: Mode = "hybrid",
        document_ids: Sequence[str] | None = None,
        budget: int = DEFAULT_BUDGET,
        expand: bool = True,
        graph: bool = True,
    ) -> SearchResult:
        """The `k` best chunks for `query` (offsets exact into their documents, scores per retriever), the
        context assembled around them within `budget` tokens (neighbours added when `expand`), and what
        the graph knows of them. `document_ids` restricts the search to those documents."""
        options = SearchOptions(
            mode=mode,
            budget=budget,
            expand=expand,
            graph=graph,
            filter={"document_id": list(document_ids)} if document_ids else None,
        )
        return search(self.readers(), query, k, options)

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[StoredChunk]:
        """Stored chunks by ID, in the order asked (unknown IDs left out)."""
        store = self.readers().neighbour_store()
        found = store.get_chunks(chunk_ids) if store is not None else {}
        return [found[c] for c in dict.fromkeys(chunk_ids) if c in found]

    def neighbours(self, chunk_id: str, radius: int = 1) -> list[StoredChunk]:
        """The chunk and up to `radius` chunks either side of it in its document, in document order."""
        store = self.readers().neighbour_store()
        chunk = (store.get_chunks([chunk_id]) if store is not None else {}).get(chunk_id)
        if store is None or chunk is None:
            raise InvalidRequest("documents", f"no such chunk: {chunk_id}")
        positions = range(max(0, chunk.chunk_index - radius), chunk.chunk_index + radius + 1)
        return store.chunks_at(chunk.document_id, positions)

    def status(self, *, failed_only: bool = False) -> IndexStatus:
        """The index generations and the live one's documents (only the failed ones if asked)."""
        return index_status(self.settings, failed_only=failed_only)

    def verify(self) -> AlignmentReport:
        """Check every store holds exactly the chunks the status table expects, each with the content its
        ID names (`report.ok`). Also publishes the alignment gauges."""
        self.close()  # the check opens every store of the live generation itself
        return verify_live(self.settings)

    def readers(self) -> Readers:
        """The live generation's stores for reading, opened on first use and kept open until `close()`."""
        pinned = reading_settings(self.settings)
        sinks = get_sinks(SEARCH_SINKS, pinned)
        if (pinned, SEARCH_SINKS) not in self._opened:
            self._opened.append((pinned, SEARCH_SINKS))
        return Readers.of(sinks)

    # --- lifetime ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the stores this Pipeline opened for reading (the next read opens them again)."""
        while self._opened:
            settings, names = self._opened.pop()
            release_sinks(names, settings)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- helpers ----------------------------------------------------------------------------------------

    def _run(self, call: Any) -> Any:
        """Run a flow under this Pipeline's settings; its summary (also when it ended Failed because
        documents failed); what ended a run that returned none is raised."""
        with environment(self._env), local_stack.prefect_api(self.settings):
            outcome = call()
        if isinstance(outcome, State):
            outcome = outcome.result(raise_on_failure=False)
            if isinstance(outcome, BaseException):
                raise outcome
        return outcome

    def _status(self) -> StatusStore:
        return StatusStore.of(reading_settings(self.settings), readonly=True)

    def _inline_source(
        self, documents: Sequence[Document] | Mapping[str, str], source_name: str | None
    ) -> tuple[SourceParams, list[FailedDocument]]:
        if not source_name:
            raise InvalidRequest("source", "in-memory documents need a source_name (e.g. 'notes')")
        params = SourceParams(kind="directory", root="/", patterns=["**/*"], source_system=source_name)
        root = inline_root(self.settings.data_dir, source_name)
        rejected = write_documents(root, named_texts(documents))
        root.mkdir(parents=True, exist_ok=True)
        failed = [FailedDocument(document_id="", source_id=r.name, error=r.error) for r in rejected]
        return params.model_copy(update={"root": str(root)}), failed


def _is_documents(source: object) -> bool:
    return (
        isinstance(source, Sequence)
        and not isinstance(source, str)
        and any(isinstance(item, Document) for item in source)
    )


def _source_params(
    source: PathLike | Sequence[PathLike] | None, name: str | None, patterns: Sequence[str] | None
) -> SourceParams | None:
    """A path, or several, as flow parameters; None: every source ingested before."""
    if source is None:
        if name or patterns:
            raise InvalidRequest("source", "source_name and patterns go with a source")
        return None
    paths = [Path(source)] if isinstance(source, str | Path) else [Path(p) for p in source]
    for path in paths:
        if not path.expanduser().exists():
            raise InvalidRequest("source", f"no such file or directory: {path}")
    if len(paths) == 1 and paths[0].expanduser().is_dir():
        return SourceParams(
            kind="directory",
            root=str(paths[0].expanduser().resolve()),
            patterns=list(patterns or DEFAULT_PATTERNS),
            source_system=name,
        )
    files = [p.expanduser().resolve() for p in paths]
    if any(f.is_dir() for f in files):
        raise InvalidRequest("source", "give one directory, or files: not both")
    # their IDs are their paths relative to their common folder, as a scan of that folder would give
    root = Path(_common_folder(files))
    return SourceParams(kind="paths", root=str(root), paths=[str(f) for f in files], source_system=name)


def _common_folder(files: Sequence[Path]) -> str:
    return os.path.commonpath([str(f.parent) for f in files])


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True
