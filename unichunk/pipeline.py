"""`Pipeline`: unichunk from Python, in a few lines, through the very code the CLI and the served runs use.

    from unichunk import Pipeline
    p = Pipeline()                                   # embedded defaults (or Pipeline(settings=...), env)
    p.ingest("docs/")
    p.search("how are deletions propagated", k=5)

The application layer's one implementation of each operation: the CLI, the HTTP API, the MCP server and
the adapters call these methods and render what they return (`unichunk.results`). Writes run the Prefect
flows in this process, against PREFECT_API_URL or the data dir's local server
(`unichunk.local_stack.prefect_api`); reads call `unichunk.retrieval.search` directly. Prefect and the
flows load only when a write needs them: reads do not pay for them, and a caller (the CLI) can point
Prefect at its server first. The stores opened stay open between calls until `close()`; with
Qdrant in local mode one process may hold its folder, so close the Pipeline before a CLI command or a
served run needs the same data dir.

This is also the one place access is enforced (docs/access.md): every method runs as `self.principal`
(`scoped`). Reads go to the stores under the principal's `read_filter`, inside every store query (ranking,
neighbours, records, graph), and a single look-up of a document or chunk the principal may not read answers
exactly as one that does not exist (`NotFound`); writes need `may_write`, the index's own state an admin
(`AccessDenied`). A principal that is no admin never sees where the server keeps a file (`path`): it cites a
document by its source and ID there.
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from pydantic import ValidationError

from unichunk import local_stack, run_logs
from unichunk.access import OWNER, AccessDenied, Principal
from unichunk.chunking.access_labels import BadLabel, document_labels, normalise_labels
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.label_rules import parse_rules
from unichunk.chunking.models import Document
from unichunk.chunking.names import openable_name
from unichunk.chunking.sources import DEFAULT_PATTERNS, DirectorySource
from unichunk.engine.params import (
    FailedDocument,
    IngestParams,
    IngestSummary,
    RebuildParams,
    RebuildSummary,
    SourceParams,
)
from unichunk.engine.run_records import orphaned
from unichunk.errors import NotFound, UsageError
from unichunk.flows.run_settings import caller_settings
from unichunk.index.alignment import AlignmentReport, verify_live
from unichunk.index.defaults import DEFAULT_BATCH_SIZE, DEFAULT_GATE_TOLERANCE, DEFAULT_RETENTION_HOURS
from unichunk.index.document_states import State as DocumentState
from unichunk.index.generations import (
    deletion_targets,
    generation_counts,
    live_generation,
    reading_settings,
    registry_of,
    rollback_target,
    switchable,
)
from unichunk.index.metrics import MetricsSettings
from unichunk.index.source_registry import SourceRegistry
from unichunk.index.status import DocumentStatus, StatusStore
from unichunk.inline_documents import INLINE_FOLDER, Rejected, inline_root, named_texts, write_documents
from unichunk.request_limits import DEFAULT_LISTED, check_entity_name, check_query
from unichunk.results import (
    ChunkContext,
    ChunkRecord,
    DocumentChunks,
    DocumentInfo,
    DocumentList,
    DroppedGeneration,
    GenerationInfo,
    Generations,
    GenerationSwitch,
    IndexStatus,
)
from unichunk.retrieval.context import DEFAULT_BUDGET, Piece, merge_pieces
from unichunk.retrieval.entity_view import document_ids as entity_document_ids
from unichunk.retrieval.entity_view import explore_entity
from unichunk.retrieval.evaluation.metric import BUDGETS
from unichunk.retrieval.evaluation.questions import QuestionsError, load_questions
from unichunk.retrieval.evaluation.run import DEFAULT_K, Target, evaluate, save_report, stores_read
from unichunk.retrieval.ranking import Mode, RetrievalSettings
from unichunk.retrieval.readers import RANKING_SINKS, SEARCH_SINKS, Readers, open_readers
from unichunk.retrieval.results import EntityResult, GraphResult, SearchResult
from unichunk.retrieval.search import SearchOptions, chunk_graphs, search
from unichunk.sinks.base import LABELS_FILTER, SINK_NAMES, SearchFilter, SinkName, StoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.cypher import MAX_HOPS
from unichunk.sinks.pool import release_sinks
from unichunk.stopping import mark_crashed_runs

__all__ = [
    "BUDGETS",
    "DEFAULT_BUDGET",
    "DEFAULT_K",
    "MAX_HOPS",
    "Pipeline",
    "QuestionsFormat",
    "Readers",
    "ReadersProvider",
    "run_result",
    "source_params",
]

PathLike = str | Path
QuestionsFormat = Literal[
    "csv", "jsonl"
]  # the two questions formats (docs/evaluation.md), as `eval_text` takes them
ReadersProvider = Callable[[], AbstractContextManager[Readers]]
# The flows a Pipeline runs, by their Prefect names: `module:function`, imported when first run (`_run`).
FLOWS = {
    "ingest": "unichunk.flows.ingest:ingest",
    "rebuild": "unichunk.flows.rebuild:rebuild",
    "delete-document": "unichunk.flows.documents:delete_document",
    "switch-generation": "unichunk.flows.switch:switch_generation",
    "drop-generation": "unichunk.flows.switch:drop_generation_now",
}


class Pipeline:
    """Ingest, search, delete, check and rebuild one data dir's index, from Python.

    `settings` are the stores and models (default: `UNICHUNK_*` variables, then the embedded defaults);
    `strategy` the chunking of `ingest` (default: `UNICHUNK_CHUNK_*`, `auto`); `sinks` the stores ingest
    writes; `readers` a provider of open readers kept by the caller (a serving process's warm stores),
    instead of the stores this Pipeline opens itself; `flow_context` what each flow run is entered in (the
    CLI's: its Prefect server, progress bar and terminal logging); `progress` is told each run's stage and
    documents done of total. The environment is read here, once, when settings are not given: the flows a
    Pipeline runs get its settings as values (`unichunk.flows.run_settings`), so Pipelines with different
    settings may run at the same time from several threads.
    """

    def __init__(
        self,
        settings: SinkSettings | None = None,
        *,
        data_dir: PathLike | None = None,
        strategy: ChunkStrategy | None = None,
        sinks: Sequence[SinkName] = SINK_NAMES,
        readers: ReadersProvider | None = None,
        flow_context: Callable[[], AbstractContextManager[object]] = nullcontext,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        base = settings or SinkSettings()
        folder = Path(data_dir) if data_dir is not None else base.data_dir
        # absolute, so a later chdir (notebooks do) cannot point the Pipeline at another index
        self.settings = base.model_copy(update={"data_dir": folder.expanduser().resolve()})
        self.strategy = strategy or ChunkStrategy()
        unknown = [name for name in sinks if name not in SINK_NAMES]
        if unknown or not sinks:
            got = f"unknown: {', '.join(map(repr, unknown))}" if unknown else "none given"
            raise UsageError(f"sinks are some of {', '.join(SINK_NAMES)} ({got})")
        self.sinks: tuple[SinkName, ...] = tuple(sinks)
        self._metrics = MetricsSettings()  # where its runs push metrics (PUSHGATEWAY_URL), read once here
        self._provided = readers
        self._flow_context = flow_context
        self._progress = progress
        self._opened: list[tuple[SinkSettings, tuple[SinkName, ...]]] = []
        self.principal: Principal = OWNER

    def scoped(self, principal: Principal) -> Pipeline:
        """This Pipeline as `principal` sees it: the same settings and open stores, every read filtered to
        what the principal may read and every write refused unless it may write (`unichunk.access`). The
        doors call it once per request with the principal their caller's token names."""
        view = copy.copy(self)
        view.principal = principal
        return view

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
        labels: Sequence[str] | None = None,
        label_rules: Sequence[str] | None = None,
    ) -> IngestSummary:
        """Bring the index in line with `source`, re-doing only new and changed documents.

        `source` is a directory (every matching file, `patterns` default to the readable formats; files
        gone from it are deleted unless `delete_missing=False`), one file, a list of files, in-memory
        documents (`Document`s with a `source_id`, or a mapping name -> text: they need `source_name`,
        and are added or updated, never deleted by omission), or None: every source ingested before.
        `source_name` names the source, part of every document ID (default: derived from the folder).
        `shards` > 1 splits the run into that many `ingest-shard` runs on the workers of the Prefect work
        pool (or a `unichunk serve`), which must run with the same settings (docs/operations.md).
        `labels` are the access labels of every document of the source, `label_rules` add labels by path
        (`PATTERN=LABEL[,LABEL...]`, e.g. `hr/**=hr`); both are kept for the source, the latest run's
        winning, and an in-memory `Document` adds its own (`metadata["labels"]`). A document whose labels
        change but not its content is relabelled in every store, nothing embedded again (docs/access.md).

        Returns the run's summary; documents that failed are listed in `summary.failed` (the rest is
        stored), never raised. Raises for what stops the whole run (`GenerationMismatch`: other settings
        than the live index's; a store unreachable)."""
        self.require_write("ingest")
        if labels or label_rules or _carries_labels(source):
            self.require_admin("setting access labels")  # who reads what is an admin's decision
        try:  # checked before anything is written (an in-memory document's file)
            normalise_labels(labels or ())
            parse_rules(label_rules or ())
        except BadLabel as exc:
            raise UsageError(str(exc)) from exc
        rejected: list[FailedDocument] = []
        params_source: SourceParams | None
        if isinstance(source, Mapping) or _is_documents(source):
            params_source, rejected = self._inline_source(source, source_name)  # type: ignore[arg-type]
            delete_missing = False
        else:
            params_source = source_params(source, source_name, patterns)
        if labels or label_rules:
            if params_source is None:
                raise UsageError("labels and label rules go with a source")
            try:
                params_source = SourceParams.model_validate(
                    params_source.model_dump()
                    | {
                        "labels": list(labels or ()),
                        "label_rules": list(label_rules or ()),
                    }
                )
            except ValidationError as exc:
                raise UsageError(_first_error(exc)) from exc
        params = IngestParams(
            source=params_source,
            strategy=self.strategy,
            sinks=list(self.sinks),
            delete_missing=delete_missing,
            dry_run=dry_run,
            batch_size=batch_size,
            shards=shards,
        )
        summary = self._run("ingest", params)
        summary.failed.extend(rejected)
        summary.listed += len(rejected)
        return summary

    def delete(self, document_id: str) -> dict[str, int]:
        """Remove one document from every store and the pipeline's records; chunks removed per store. An
        in-memory document's file goes too, so a re-index cannot bring it back. Raises `NotFound` for a
        document no generation a deletion reaches records (before any flow runs), or one the principal
        may not read (as if it did not exist)."""
        self.require_write("delete")
        if not self.knows(document_id):
            raise NotFound(f"no such document: {document_id}")
        row = self._status().get(document_id)
        removed = self._run("delete-document", document_id)
        if row is not None and row.path and _inside(Path(row.path), self.settings.data_dir / INLINE_FOLDER):
            Path(row.path).unlink(missing_ok=True)
        return removed

    def relabel(self, document_id: str, labels: Sequence[str]) -> IngestSummary:
        """Give one document its own access `labels` (besides its source's labels and matching rules),
        in every store and its record, without embedding anything: kept beside its source (so every
        later re-index keeps them), then applied by an ingest of that one file, which relabels it and
        converges like any write. `labels=[]` drops the document's own labels. Raises
        `NotFound` for a document not recorded, `UsageError` for a bad label; admins only (it decides
        who reads the document)."""
        self.require_admin("relabel")
        row = self._status().get(document_id)
        if row is None or not row.source_system or not row.source_id or not row.path:
            raise NotFound(f"no such document: {document_id}")
        try:
            recorded = SourceRegistry.of(self.settings).set_document_labels(
                row.source_system, {row.source_id: labels}
            )
        except BadLabel as exc:
            raise UsageError(str(exc)) from exc
        if not recorded:
            raise NotFound(f"no such source: {row.source_system} (the document's source is not recorded)")
        return self.ingest(Path(openable_name(row.path)), delete_missing=False)

    def forget_source(self, name: str) -> int:
        """Delete every document of the source `name` (each as `delete` does) and its record, so no
        re-index scans it again: how an overlapping source is given up for the folder around it
        (`SourceOverlap`). Returns the documents deleted; raises `NotFound` for a source not recorded."""
        self.require_write("forget a source")
        registry = SourceRegistry.of(self.settings)
        if name not in {record.name for record in registry.all()}:
            raise NotFound(f"no such source: {name} (`unichunk status` lists the sources of the documents)")
        documents = [row.document_id for row in self._status().rows(source_system=name)]
        for document_id in documents:
            self._run("delete-document", document_id)
        registry.forget(name)
        return len(documents)

    def rebuild(
        self,
        source: PathLike | None = None,
        *,
        strategy: ChunkStrategy | None = None,
        source_name: str | None = None,
        patterns: Sequence[str] | None = None,
        switch: bool = True,
        retention_hours: float = DEFAULT_RETENTION_HOURS,
        max_document_loss: float = 0.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        gate: PathLike | None = None,
        tolerance: float = DEFAULT_GATE_TOLERANCE,
    ) -> RebuildSummary:
        """Build a new index generation with `strategy` (and these settings) beside the live one, verify
        it, switch readers to it. `summary.outcome` says what happened (`refused` leaves the live one).
        With `gate` (a questions file, as `eval` takes), both generations are evaluated on it first and
        the switch happens only if the new one's character recall is at no budget lower than the live
        one's by more than `tolerance`; else `outcome` is `gated`, the new generation stays ready beside
        the live one and `summary.gate` says where and by how much (the report is saved as `eval`'s)."""
        if gate is not None:
            load_questions(gate)  # a questions file that cannot be read is refused before the build
        self.require_write("rebuild")
        params = RebuildParams(
            source=source_params(source, source_name, patterns),
            strategy=strategy or self.strategy,
            switch=switch,
            gate=None if gate is None else str(Path(gate).resolve()),
            tolerance=tolerance,
            retention_hours=retention_hours,
            max_document_loss=max_document_loss,
            batch_size=batch_size,
        )
        self.close()  # the flow writes and switches generations: let it open what it needs
        summary = self._run("rebuild", params)
        if summary.outcome == "switched":
            self.strategy = params.strategy
        return summary

    def switch_generation(
        self, generation_id: str | None = None, *, retention_hours: float = DEFAULT_RETENTION_HOURS
    ) -> GenerationSwitch:
        """Verify a retained or ready generation (default: the last retired one: a rollback), then make it
        live. A generation that does not exist or may not go live is refused before any flow runs."""
        self.require_admin("switch generations")
        switchable(self.settings, generation_id or rollback_target(self.settings))
        self.close()
        done = self._run("switch-generation", generation_id, retention_hours)
        return GenerationSwitch.model_validate(done)

    def drop_generation(self, generation_id: str) -> DroppedGeneration:
        """Delete a generation that is not live now, without waiting for its retention."""
        self.require_admin("drop a generation")
        found = registry_of(self.settings).get(generation_id)
        if found is None:
            raise NotFound(f"no such generation: {generation_id}")
        if found.state == "live":
            raise UsageError(f"generation {generation_id} is live; switch to another one before dropping it")
        self._run("drop-generation", generation_id)
        return DroppedGeneration(dropped=generation_id, state=found.state)

    # --- evaluation -------------------------------------------------------------------------------------

    def eval(
        self,
        questions: PathLike,
        *,
        generation: str | None = None,
        against: str | None = None,
        budgets: Sequence[int] = BUDGETS,
        k: int = DEFAULT_K,
        retrievers: bool = False,
    ) -> dict[str, Any]:
        """Score the shipped search on `questions` (a questions CSV or JSONL: docs/evaluation.md) over
        `generation` (default: the live one), and with `against` a second generation (any generation by
        ID, read without switching), paired question by question (candidate minus the first). Returns the
        report (the JSON of `unichunk eval --json`), also saved as `<data_dir>/evaluations/latest.json`
        and a stamped copy. References that cannot be located are in `report["unlocated"]`. For admins:
        the references quote any document, and the scores are of the whole index."""
        return self._eval(Path(questions), None, generation, against, budgets, k, retrievers)

    def eval_text(
        self,
        questions: str,
        questions_format: QuestionsFormat,
        *,
        generation: str | None = None,
        against: str | None = None,
        budgets: Sequence[int] = BUDGETS,
        k: int = DEFAULT_K,
        retrievers: bool = False,
    ) -> dict[str, Any]:
        """`eval` of questions given as text (`questions_format`: "csv" or "jsonl"), for a door that is
        sent them (the HTTP API) rather than a path it would have to open on the caller's word. The text
        goes through a private temporary file, removed after; the report names it `(sent as csv)`."""
        self.require_admin("eval")
        with tempfile.TemporaryDirectory(prefix="unichunk-eval-") as folder:
            path = Path(folder) / f"questions.{questions_format}"
            path.write_bytes(questions.encode("utf-8", "surrogatepass"))  # exact: no newline translation
            try:
                return self._eval(
                    path, f"(sent as {questions_format})", generation, against, budgets, k, retrievers
                )
            except QuestionsError as exc:  # its line and reason, not the private file's name
                raise UsageError(str(exc).replace(str(path), "the questions sent")) from None

    def _eval(
        self,
        questions: Path,
        shown_as: str | None,
        generation: str | None,
        against: str | None,
        budgets: Sequence[int],
        k: int,
        retrievers: bool,
    ) -> dict[str, Any]:
        self.require_admin("eval")
        if not budgets or any(b <= 0 for b in budgets) or k <= 0:
            raise UsageError("budgets and k must be positive")
        first = generation or (live.generation_id if (live := live_generation(self.settings)) else None)
        if first is None:
            raise UsageError("nothing ingested yet: there is no live generation to evaluate")
        for named in (first, against):
            if named is not None and registry_of(self.settings).get(named) is None:
                raise NotFound(f"no such generation: {named} (`unichunk generations list` lists them)")
        is_live = generation is None or first == getattr(
            live_generation(self.settings), "generation_id", None
        )
        targets = [Target("live" if is_live else first, first)]
        if against is not None:
            targets.append(Target("candidate", against))
        report = evaluate(
            self.settings, questions, targets, budgets=budgets, k=k, retrievers=retrievers,
            reading=functools.partial(self._reading_generation, names=stores_read(retrievers)),
        )  # fmt: skip
        if shown_as is not None:
            report["questions_file"] = shown_as
        save_report(report, self.settings.data_dir)
        return report

    # --- reads ------------------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: Mode = "hybrid",
        document_ids: Sequence[str] | None = None,
        source: str | None = None,
        budget: int = DEFAULT_BUDGET,
        expand: bool = True,
        graph: bool = True,
        route_threshold: float | None = None,
    ) -> SearchResult:
        """The `k` best chunks for `query` (offsets exact into their documents, scores per retriever), the
        top hits' best passages (`passages`: for a budget of a chunk or two, take these first), the
        context assembled around them within `budget` tokens (neighbours added when `expand`), and what
        the graph knows of them. `mode`: hybrid (BM25 and vectors fused, and the graph's list once its
        weight is above 0), keywords, vectors or graph (the chunks of the entities the query names; the
        graph store is opened for it). `document_ids` and `source` (a source's name) restrict the search
        to those documents (both: to those of the source among them). Nothing ingested yet: no hits, nothing opened.
        A blank query, or one over `MAX_QUERY_CHARS`, raises `UsageError` (`unichunk.request_limits`).
        Every store read of the search (hits, neighbours, records, graph context) runs under the
        principal's label filter, so `k` readable hits come back when `k` exist."""
        check_query(query)  # blank or too long: a UsageError, the same at every door
        empty = SearchResult(query=query, k=k, route=mode)
        if self._provided is None and not self.indexed():
            return empty
        documents = self._document_filter(document_ids, source)
        if documents is not None and not documents["document_id"]:
            return empty  # the filter admits no document
        reading = self.principal.read_filter()
        if reading is not None and not reading[LABELS_FILTER]:
            return empty  # a principal with no labels reads nothing
        filter: SearchFilter | None = {**(documents or {}), **(reading or {})} or None
        options = SearchOptions(
            mode, route_threshold, expand=expand, budget=budget, graph=graph, filter=filter
        )
        ranks_by_graph = RetrievalSettings(mode=mode).uses_graph()  # graph mode, or hybrid weighing it
        with self._reading(SEARCH_SINKS if graph or ranks_by_graph else RANKING_SINKS) as readers:
            found = search(readers, query, k, options)
        return self._with_sources(found)

    def entity(self, name: str, hops: int = 1, limit: int = 20) -> EntityResult:
        """What the knowledge graph holds of the entity `name` names (`unichunk.retrieval.entity_view`): the
        entity and every chunk it was learnt from, the entities its name reaches in other documents through
        an acronym or a surname (ambiguous ones marked as such; a bare surname of several people answers
        with them all as `candidates`), the spellings merged into it per chunk, and its `limit` strongest
        relations up to `hops` (1 to 3) steps out. Only what chunks the principal may read taught the
        graph; an entity it may not see is `NotFound`, as an unknown one. A blank name or one over
        `MAX_QUERY_CHARS` is a `UsageError`."""
        check_entity_name(name)
        if not 1 <= hops <= MAX_HOPS:
            raise UsageError(f"hops must be between 1 and {MAX_HOPS}, not {hops}")
        if limit < 1:
            raise UsageError(f"limit must be at least 1, not {limit}")
        shown = name if len(name) <= 200 else name[:200] + "..."
        missing = NotFound(f"no such entity in the knowledge graph: {shown!r}")
        reading = self.principal.read_filter()
        if (self._provided is None and not self.indexed()) or (
            reading is not None and not reading[LABELS_FILTER]
        ):
            raise missing  # nothing ingested, or a principal with no labels: nothing to see
        with self._reading(("graph",)) as readers:
            if readers.graph is None:
                raise missing
            found = explore_entity(readers.graph, name, hops=hops, limit=limit, filter=reading)
        found = self._with_records(found) if found is not None else None
        if found is None:
            raise missing
        return found

    def _with_records(self, found: EntityResult) -> EntityResult | None:
        """Each source's ID in its source from its document's record; for a principal that is no admin,
        only what documents it may read by their records (a second check behind the graph's filter, as
        `_readable` is for chunks): None when nothing of the entity is left."""
        records = self.documents(set(entity_document_ids(found)))
        strict = not self.principal.admin
        details = [d for d in [found.entity, *found.candidates] if d is not None]
        for detail in details:
            if strict:
                detail.sources = [s for s in detail.sources if s.document_id in records]
            for source in detail.sources:
                if (record := records.get(source.document_id)) is not None:
                    source.source_id = record.source_id
        for alias in found.also_known_as:
            if strict:
                alias.document_ids = [d for d in alias.document_ids if d in records]
            alias.source_ids = [
                r.source_id for d in alias.document_ids if (r := records.get(d)) is not None and r.source_id
            ]
        if strict:
            found.also_known_as = [a for a in found.also_known_as if a.document_ids]
            found.merges = [m for m in found.merges if m.document_id in records]
            found.candidates = [c for c in found.candidates if c.sources]
            if found.entity is not None and not found.entity.sources:
                return None
        return found if found.entity is not None or found.candidates else None

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[StoredChunk]:
        """Stored chunks by ID, in the order asked (unknown IDs, and those the principal may not read, left
        out)."""
        with self._reading(RANKING_SINKS) as readers:
            store = readers.neighbour_store()
            found = (
                store.get_chunks(chunk_ids, filter=self.principal.read_filter()) if store is not None else {}
            )
        readable = self._readable(found.values())
        return [readable[c] for c in dict.fromkeys(chunk_ids) if c in readable]

    def neighbours(self, chunk_id: str, radius: int = 1) -> list[StoredChunk]:
        """The chunk and up to `radius` chunks either side of it in its document, in document order. A
        chunk the principal may not read is `NotFound`, as an unknown one."""
        reading = self.principal.read_filter()
        with self._reading(RANKING_SINKS) as readers:
            store = readers.neighbour_store()
            found = store.get_chunks([chunk_id], filter=reading) if store is not None else {}
            chunk = self._readable(found.values()).get(chunk_id)
            if store is None or chunk is None:
                raise NotFound(f"no such chunk: {chunk_id}")
            positions = range(max(0, chunk.chunk_index - radius), chunk.chunk_index + radius + 1)
            around = store.chunks_at(chunk.document_id, positions, filter=reading)
        readable = self._readable(around)
        return [c for c in around if c.chunk_id in readable]

    def context(self, chunk_id: str, radius: int = 1) -> ChunkContext:
        """The chunk and its `radius` neighbours either side merged into one passage, as a search's
        context merges them (overlapping windows once, boundaries marked), with its document offsets."""
        around = self.neighbours(chunk_id, radius)
        pieces = [
            Piece(
                c.chunk_id, c.document_id, c.chunk_index, c.start_char, c.end_char, c.content,
                tuple(c.heading_chain), rank=1 if c.chunk_id == chunk_id else None,
            )
            for c in around
        ]  # fmt: skip
        span = merge_pieces(pieces)[0]
        return ChunkContext(
            chunk_id=chunk_id,
            document_id=around[0].document_id,
            start_char=span.start_char,
            end_char=span.end_char,
            text=span.text,
            chunks=[_record(c) for c in around],
        )

    def document(self, document_id: str) -> DocumentChunks:
        """A live document's record and its chunks in order; `NotFound` for an unknown one, and for one the
        principal may not read (the same answer: whether it exists is not told)."""
        row = self._status().get(document_id)
        if row is None or not self.principal.may_read(_record_labels(row)):
            raise NotFound(f"no such document: {document_id}")
        reading = self.principal.read_filter()
        with self._reading(RANKING_SINKS) as readers:
            store = readers.neighbour_store()
            chunks = (
                [] if store is None else store.chunks_at(document_id, range(row.chunk_count), filter=reading)
            )
        ordered = sorted(self._readable(chunks).values(), key=lambda c: c.chunk_index)
        return DocumentChunks(document=self._info(row), chunks=[_record(c) for c in ordered])

    def chunk_graphs(self, chunk_ids: Sequence[str]) -> dict[str, GraphResult]:
        """What the graph holds for each of these chunks (the entities taken from it, the relations stated
        in it), by chunk ID in the order asked: the per-chunk view of a document (the service's `/ui`).
        Only chunks the principal may read, and only what readable chunks taught (`unichunk.access`)."""
        readable = [c.chunk_id for c in self.get_chunks(chunk_ids)]
        with self._reading(("graph",)) as readers:
            return chunk_graphs(readers, readable, filter=self.principal.read_filter())

    def documents(
        self,
        document_ids: Iterable[str] | None = None,
        *,
        state: DocumentState | None = None,
        source: str | None = None,
    ) -> dict[str, DocumentInfo]:
        """The live records of these documents (unknown ones, and those the principal may not read, left
        out), by ID: one indexed read. None: every live document the principal may read, by source and
        its ID there (what a reader lists instead of `status`, which is for admins). `state` and `source`
        (a `source_system`) keep only the documents in that state, of that source."""
        store = self._status()
        if document_ids is None:
            _, listed = store.page(
                source_system=source, state=state, readable=self.principal.readable_labels()
            )
            return {row.document_id: self._info(row) for row in listed}
        rows = {
            k: row
            for k, row in store.get_many(document_ids).items()
            if state in (None, row.state) and source in (None, row.source_system)
        }
        return {k: self._info(row) for k, row in rows.items() if self.principal.may_read(_record_labels(row))}

    def document_page(
        self,
        *,
        state: DocumentState | None = None,
        source: str | None = None,
        offset: int = 0,
        limit: int = DEFAULT_LISTED,
    ) -> DocumentList:
        """`documents()` a page at a time, as the doors list them (`GET /documents`, the MCP tool, the UI's
        Documents page): `limit` records from `offset`, and how many there are in all. The database
        filters, counts and cuts the page (`StatusStore.page`): a page costs one page's rows, not the
        index's, and a record the principal may not read is never fetched."""
        if offset < 0 or limit < 0:
            raise UsageError(f"offset and limit must not be negative (got {offset}, {limit})")
        total, rows = self._status().page(
            source_system=source,
            state=state,
            readable=self.principal.readable_labels(),
            offset=offset,
            limit=limit,
        )
        return DocumentList(total=total, documents=[self._info(row) for row in rows])

    @staticmethod
    def normalise_labels(labels: Iterable[str]) -> tuple[str, ...]:
        """Access labels as stored (casefolded, checked, sorted): `BadLabel`, a ValueError naming the first
        bad one, otherwise. For the doors, which check a request's labels before anything runs."""
        return normalise_labels(labels)

    @staticmethod
    def document_id_for(source_system: str, source_id: str) -> str:
        """The document ID an ingest gives the document `source_id` of the source `source_system` (its path
        under the source root, for a folder): what a webhook that names no ID means."""
        return derive_document_id(source_system=source_system, source_id=source_id)

    @staticmethod
    def scan_refusal(source: Mapping[str, Any], source_id: str) -> str | None:
        """Why a scan of the folder source `source` (`SourceParams` fields, as `ServiceSettings.source()`
        gives them) would not list the file `source_id`, or None if it would: what a webhook may name
        (`unichunk.chunking.sources.DirectorySource.refusal` holds the rule, the scan's own)."""
        built = SourceParams.model_validate(dict(source)).build()
        if not isinstance(built, DirectorySource):
            raise UsageError("only a folder source can say what its scan lists")
        return built.refusal(source_id)

    def knows(self, document_id: str) -> bool:
        """Whether a generation a deletion reaches (the live one, or one being built) records it, readable
        by the principal (a document it may not read is not known to it)."""
        for g in deletion_targets(self.settings):
            row = StatusStore.of(self.settings.for_generation(g.generation_id), readonly=True).get(
                document_id
            )
            if row is not None and self.principal.may_read(_record_labels(row)):
                return True
        return False

    def indexed(self) -> bool:
        """Whether there is an index to read (a live generation, or settings pinned to one)."""
        return self.settings.generation is not None or live_generation(self.settings) is not None

    def generations(self) -> Generations:
        """The index generations, the live one first, each with its settings and document counts (admins
        only: the counts are of every document)."""
        self.require_admin("generations")
        generations = sorted(
            registry_of(self.settings).all(), key=lambda g: (g.state != "live", g.created_at)
        )
        return Generations(
            live=next((g.generation_id for g in generations if g.state == "live"), None),
            generations=[
                GenerationInfo(
                    generation_id=g.generation_id,
                    state=g.state,
                    fingerprint=g.fingerprint,
                    settings=g.description,
                    counts=generation_counts(self.settings, g.generation_id),
                    created_at=g.created_at,
                    live_since=g.live_since,
                    retired_at=g.retired_at,
                    drop_after=g.drop_after,
                    listed=g.listed,
                    last_error=g.last_error,
                )
                for g in generations
            ],
        )

    def status(self, *, failed_only: bool = False) -> IndexStatus:
        """The index generations and the live one's documents (only the failed ones if asked). Flow runs of
        this data dir whose process was killed are marked Crashed in Prefect first, when its server runs.
        Admins only: it lists every document (a reader's own: `documents`)."""
        self.require_admin("status", hint="`documents` lists the documents you may read")
        self._mark_crashed()
        store = self._status()
        return IndexStatus(
            **self.generations().model_dump(),
            counts=store.counts(),
            documents=[_document_info(row) for row in store.rows(state="failed" if failed_only else None)],
        )

    def verify(self) -> AlignmentReport:
        """Check every store holds exactly the chunks the status table expects, each with the content its
        ID names (`report.ok`). Also publishes the alignment gauges. Admins only."""
        self.require_admin("verify")
        self.close()  # the check opens every store of the live generation itself
        return verify_live(self.settings)

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

    # --- access ---------------------------------------------------------------------------------------

    def require_admin(self, operation: str, *, hint: str | None = None) -> None:
        """`AccessDenied` unless the principal is an admin; `operation` names what was refused, `hint` what
        the caller may do instead. Public for a door that starts a flow run itself (a served deployment)
        rather than through a method here."""
        if not self.principal.admin:
            instead = f"; {hint}" if hint else ""
            raise AccessDenied(
                f"{operation}: for admins only, and {self.principal.name!r} is not one{instead}"
            )

    def require_write(self, operation: str) -> None:
        """`AccessDenied` unless the principal may write (or is an admin); as `require_admin`."""
        if not (self.principal.may_write or self.principal.admin):
            raise AccessDenied(f"{operation}: {self.principal.name!r} may not write to the index")

    # --- helpers ----------------------------------------------------------------------------------------

    def _readable(self, chunks: Iterable[StoredChunk]) -> dict[str, StoredChunk]:
        """The chunks the principal may read, by ID: a second check behind the store's filter, on the
        labels the store returned with each chunk (`extra["labels"]`) and on its document's record (the
        labels the records hold), so a store that lost a filter or a relabel caught half-way fails closed."""
        chunks = list(chunks)
        if self.principal.admin:
            return {c.chunk_id: c for c in chunks}
        rows = self._status().get_many({c.document_id for c in chunks}) if chunks else {}
        return {
            c.chunk_id: c
            for c in chunks
            if self.principal.may_read(c.extra.get(LABELS_FILTER, ()))
            and (row := rows.get(c.document_id)) is not None
            and self.principal.may_read(_record_labels(row))
        }

    def _run(self, flow: str, *args: Any) -> Any:
        """Run the flow named `flow` (`FLOWS`) with `args` under this Pipeline's settings, inside its
        flow context; its summary (also when it ended Failed because documents failed); what ended a run
        that returned none is raised. Every flow call goes through here. The flow's module (and so
        Prefect) is imported inside the context, which may point Prefect at a server before it loads."""
        from unichunk.engine.progress import listening

        module, name = FLOWS[flow].split(":")
        with (
            self._flow_context(),
            local_stack.prefect_api(self.settings),
            run_logs.forwarded(),
            caller_settings(self.settings, self.strategy, self._metrics),
            listening(self._progress) if self._progress else nullcontext(),
        ):
            mark_crashed_runs(self.settings.data_dir)  # a run killed outright shows Crashed, not Running
            run = getattr(importlib.import_module(module), name)
            return run_result(run(*args, return_state=True))

    def _mark_crashed(self) -> None:
        """`mark_crashed_runs` against PREFECT_API_URL or the data dir's local server if it runs (none is
        started for this: the next run, which starts one, marks them then); never in the way of a read."""
        if not orphaned(self.settings.data_dir):
            return
        url = os.environ.get("PREFECT_API_URL") or (
            local.api_url if (local := local_stack.recorded_prefect(self.settings.data_dir)) else None
        )
        if url is None:
            return
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with suppress(Exception), temporary_settings(updates={PREFECT_API_URL: url}):
            mark_crashed_runs(self.settings.data_dir)

    @contextmanager
    def _reading(self, names: tuple[SinkName, ...]) -> Iterator[Readers]:
        """Open readers of the live generation: the provider's, or the stores `names` of the process's
        pool, kept open until `close()`."""
        if self._provided is not None:
            with self._provided() as readers:
                yield readers
            return
        pinned = reading_settings(self.settings)
        readers = open_readers(pinned, names)
        if (pinned, names) not in self._opened:
            self._opened.append((pinned, names))
        yield readers

    @contextmanager
    def _reading_generation(
        self, pinned: SinkSettings, names: tuple[SinkName, ...] = RANKING_SINKS
    ) -> Iterator[Readers]:
        """Open the stores `names` (the ranking stores) of the generation `pinned` names (live or not: an
        evaluation reads a candidate without switching), kept open until `close()` like every read's."""
        readers = open_readers(pinned, names)
        if (pinned, names) not in self._opened:
            self._opened.append((pinned, names))
        yield readers

    def _with_sources(self, found: SearchResult) -> SearchResult:
        """Each hit's source, ID in it and file from its document's record (the stores that ranked it may
        not keep them: BM25 keeps none), so every caller can cite the document; the file only for an admin."""
        records = self.documents(hit.document_id for hit in found.hits) if found.hits else {}
        for hit in found.hits:
            record = records.get(hit.document_id)
            if record is not None:
                hit.source_system = record.source_system or hit.source_system
                hit.source_id = record.source_id or hit.source_id
                hit.path = record.path or hit.path
            if not self.principal.admin:
                hit.path = None
        return found

    def _info(self, row: DocumentStatus) -> DocumentInfo:
        """A document's record as this principal may see it: for one that is no admin, without the server's
        file (`path`). Its error needs nothing: a load error names the file by its ID in the source
        (`unichunk.chunking.loaders`)."""
        info = _document_info(row)
        return info if self.principal.admin else info.model_copy(update={"path": None})

    def _status(self) -> StatusStore:
        return StatusStore.of(reading_settings(self.settings), readonly=True)

    def _document_filter(self, document_ids: Sequence[str] | None, source: str | None) -> SearchFilter | None:
        """The `document_id` filter for these IDs and/or a source's documents (None: no filter)."""
        if source is None:
            return {"document_id": list(document_ids)} if document_ids else None
        in_source = [row.document_id for row in self._status().rows(source_system=source)]
        wanted = set(document_ids or ())
        return {"document_id": [d for d in in_source if d in wanted] if document_ids else in_source}

    def _inline_source(
        self, documents: Sequence[Document] | Mapping[str, str], source_name: str | None
    ) -> tuple[SourceParams, list[FailedDocument]]:
        if not source_name:
            raise UsageError("in-memory documents need a source_name (e.g. 'notes')")
        root = inline_root(self.settings.data_dir, source_name)
        pairs = named_texts(documents)
        own, bad = _own_labels(documents)
        rejected = [
            *bad,
            *write_documents(root, [(n, t) for n, t in pairs if n not in {r.name for r in bad}]),
        ]
        root.mkdir(parents=True, exist_ok=True)
        failed = [FailedDocument(document_id="", source_id=r.name, error=r.error) for r in rejected]
        params = SourceParams(kind="directory", root=str(root), patterns=["**/*"], source_system=source_name)
        if own:
            self._keep_own_labels(params, own)
        return params, failed

    def _keep_own_labels(self, params: SourceParams, own: dict[str, tuple[str, ...]]) -> None:
        """Keep in-memory documents' own labels beside their source (recorded first if it is new: an
        inline source is never scanned whole, so its earlier documents keep theirs)."""
        registry = SourceRegistry.of(self.settings)
        assert params.source_system is not None
        if not registry.set_document_labels(params.source_system, own):
            registry.record(params.record(params.build()))
            registry.set_document_labels(params.source_system, own)


def run_result(outcome: Any) -> Any:
    """What a finished flow run returned: its summary (also when it ended Failed because documents
    failed); what ended a run that returned none (it crashed, or failed before it had a summary) is
    raised. A served run's state too, where Prefect kept its result."""
    from prefect.states import State

    if isinstance(outcome, State):
        outcome = outcome.result(raise_on_failure=False)
        if isinstance(outcome, BaseException):
            raise outcome
    return outcome


def _own_labels(
    documents: Sequence[Document] | Mapping[str, str],
) -> tuple[dict[str, tuple[str, ...]], list[Rejected]]:
    """In-memory documents' own labels (`metadata["labels"]`, none for a mapping's texts) by name, and
    those whose labels are bad, rejected alone. A document given without labels has none of its own."""
    own: dict[str, tuple[str, ...]] = {}
    bad: list[Rejected] = []
    for document in [] if isinstance(documents, Mapping) else documents:
        if not document.source_id:
            continue
        try:
            own[document.source_id] = document_labels(document.metadata)
        except BadLabel as exc:
            bad.append(Rejected(document.source_id, str(exc)))
    return own, bad


def _first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as its message says it (a bad label names itself)."""
    error = exc.errors()[0]
    return str(error.get("ctx", {}).get("error") or error["msg"])


def _carries_labels(source: object) -> bool:
    """Whether in-memory documents bring their own access labels (`Document.metadata["labels"]`)."""
    items = source if _is_documents(source) else ()
    return any(isinstance(d, Document) and d.metadata.get("labels") for d in items)  # type: ignore[union-attr]


def _is_documents(source: object) -> bool:
    return (
        isinstance(source, Sequence)
        and not isinstance(source, str)
        and any(isinstance(item, Document) for item in source)
    )


def source_params(
    source: PathLike | Sequence[PathLike] | None, name: str | None, patterns: Sequence[str] | None
) -> SourceParams | None:
    """A path, or several, as flow parameters; None: every source ingested before."""
    if source is None:
        if name or patterns:
            raise UsageError("a source name and patterns go with a source")
        return None
    paths = [Path(source)] if isinstance(source, str | Path) else [Path(p) for p in source]
    for path in paths:
        if not path.expanduser().exists():
            raise UsageError(f"no such file or directory: {path.expanduser()}")
    if len(paths) == 1 and paths[0].expanduser().is_dir():
        return SourceParams(
            kind="directory",
            root=str(paths[0].expanduser().resolve()),
            patterns=list(patterns or DEFAULT_PATTERNS),
            source_system=name,
        )
    files = [p.expanduser().resolve() for p in paths]
    if any(f.is_dir() for f in files):
        raise UsageError("give one directory, or files: not both")
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


def _record(chunk: StoredChunk) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=chunk.chunk_id,
        document_id=chunk.document_id,
        chunk_index=chunk.chunk_index,
        start_char=chunk.start_char,
        end_char=chunk.end_char,
        content=chunk.content,
        heading_chain=list(chunk.heading_chain),
    )


def _record_labels(row: DocumentStatus) -> tuple[str, ...]:
    """The access labels the records hold for a document (none: admins only)."""
    return tuple(row.labels)


def _document_info(row: DocumentStatus) -> DocumentInfo:
    return DocumentInfo.model_validate(
        {name: value for name, value in row.as_dict().items() if name in DocumentInfo.model_fields}
    )
