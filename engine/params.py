"""Flow parameters and results as pydantic models, so the Prefect UI renders forms and runs are typed.

The run form of `ingest`, `reindex` and `rebuild` asks for what a person decides: the source, the chunking
strategy with its size and overlap, a dry run (or, for a rebuild, whether to switch); the rest (sinks,
batching, shards, and the chunkers' own settings such as the paragraph separator) sits in `advanced`,
folded away with its defaults. A caller in Python may still pass an exact `ChunkStrategy` as `strategy`
(not shown in the form) and the run options at the top level.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from unichunk.chunking.access_labels import normalise_labels
from unichunk.chunking.config import ChunkStrategy, StrategyName
from unichunk.chunking.ids import SOURCE_NAME_PATTERN
from unichunk.chunking.label_rules import parse_rules
from unichunk.chunking.names import one_line, openable_name, storable_name
from unichunk.chunking.sources import (
    DEFAULT_PATTERNS,
    DirectorySource,
    PathsSource,
    Source,
)
from unichunk.index.defaults import DEFAULT_BATCH_SIZE, DEFAULT_GATE_TOLERANCE, DEFAULT_RETENTION_HOURS
from unichunk.index.shards import MAX_SHARDS
from unichunk.index.source_registry import SourceRecord
from unichunk.sinks.base import SINK_NAMES, SinkName

# Times the parent of a sharded run starts a lost shard again (its worker died, its run crashed).
DEFAULT_SHARD_RETRIES = 2


class SourceParams(BaseModel):
    """Which documents to ingest: every matching file under `root`, or an explicit list of `paths`."""

    kind: Literal["directory", "paths"] = "directory"
    root: str | None = Field(
        None, description="Directory to scan (directory), or base of source IDs (paths)."
    )
    patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PATTERNS), description="gitignore-style globs."
    )
    paths: list[str] = Field(default_factory=list, description="Files to ingest (paths).")
    follow_symlinks: bool = Field(
        False, description="Follow symlinked files and directories (loops are cut)."
    )
    source_system: str | None = Field(
        None,
        pattern=SOURCE_NAME_PATTERN,
        description="Name of the source, part of every document ID; unset: derived from the absolute root, "
        "so two folders never share IDs and the same folder keeps them.",
    )
    labels: list[str] = Field(
        default_factory=list,
        description="Access labels every document of the source carries (none: readable by admins only); "
        "kept for the source, so a re-index without a source keeps them.",
    )
    label_rules: list[str] = Field(
        default_factory=list,
        description="Sidecar rules PATTERN=LABEL[,LABEL...] (e.g. hr/**=hr): a document whose path in the "
        "source matches the gitignore-style pattern carries those labels too.",
    )

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, labels: list[str]) -> list[str]:
        return list(normalise_labels(labels))  # a bad one: BadLabel, a ValueError naming it

    @field_validator("label_rules")
    @classmethod
    def _check_rules(cls, rules: list[str]) -> list[str]:
        return [str(rule) for rule in parse_rules(rules)]

    @field_validator("root", mode="before")
    @classmethod
    def _storable_root(cls, root: object) -> object:
        """Paths travel as Prefect parameters (JSON): a name's undecodable bytes written `\\xNN`
        (`unichunk.chunking.names`), read back as bytes by `build`."""
        return storable_name(root) if isinstance(root, str) else root

    @field_validator("paths", mode="before")
    @classmethod
    def _storable_paths(cls, paths: object) -> object:
        if isinstance(paths, list | tuple):
            return [storable_name(p) if isinstance(p, str) else p for p in paths]
        return paths

    @model_validator(mode="after")
    def _check_kind(self) -> SourceParams:
        if self.kind == "directory" and not self.root:
            raise ValueError("a directory source needs a root")
        if self.kind == "paths" and not self.paths:
            raise ValueError("a paths source needs at least one path")
        return self

    def build(self) -> Source:
        return self._build().with_access(self.labels, parse_rules(self.label_rules))

    def _build(self) -> Source:
        if self.kind == "directory":
            assert self.root is not None
            return DirectorySource(
                openable_name(self.root),
                self.patterns,
                follow_symlinks=self.follow_symlinks,
                source_system=self.source_system,
            )
        root = None if self.root is None else openable_name(self.root)
        return PathsSource(
            [openable_name(p) for p in self.paths], root=root, source_system=self.source_system
        )

    def record(self, source: Source) -> SourceRecord:
        """How to list this source again (its resolved name and root), for `unichunk.index.source_registry`."""
        return SourceRecord(
            name=source.source_system,
            kind=self.kind,
            root=None if source.root is None else storable_name(str(source.root)),
            patterns=tuple(self.patterns) if self.kind == "directory" else (),
            paths=tuple(self.paths) if self.kind == "paths" else (),
            follow_symlinks=self.follow_symlinks,
            labels=tuple(self.labels),
            label_rules=tuple(self.label_rules),
        )

    @classmethod
    def from_record(cls, record: SourceRecord) -> SourceParams:
        return cls(
            kind=record.kind,
            root=record.root,
            patterns=list(record.patterns) or list(DEFAULT_PATTERNS),
            paths=list(record.paths),
            follow_symlinks=record.follow_symlinks,
            source_system=record.name,
            labels=list(record.labels),
            label_rules=list(record.label_rules),
        )


# The strategy fields the form asks for at its top; every other field of `ChunkStrategy` but those the
# pipeline sets itself from the sink settings is an advanced chunking setting.
FORM_STRATEGY_FIELDS = {"chunker": "name", "chunk_size": "chunk_size", "chunk_overlap": "chunk_overlap"}
_DERIVED_STRATEGY_FIELDS = {"embedding", "semantic_model"}  # `RunConfig` sets them from the sink settings
ADVANCED_CHUNKING_FIELDS = tuple(
    name
    for name in ChunkStrategy.model_fields
    if name not in FORM_STRATEGY_FIELDS.values() and name not in _DERIVED_STRATEGY_FIELDS
)
_UNSET_NOTE = " Unset: as configured (UNICHUNK_CHUNK_*), else the built-in default."

# The chunkers' own settings, each optional, made from `ChunkStrategy`'s fields so they cannot drift from it
# (validated when the run builds its strategy).
ChunkingAdvanced: type[BaseModel] = create_model(
    "ChunkingAdvanced",
    __doc__="The chunkers' own settings; unset ones are as configured (UNICHUNK_CHUNK_*), else the default.",
    **{
        name: (
            ChunkStrategy.model_fields[name].annotation | None,
            Field(None, description=(ChunkStrategy.model_fields[name].description or "") + _UNSET_NOTE),
        )
        for name in ADVANCED_CHUNKING_FIELDS
    },
)


# The form's chunking fields, declared once for the run parameters that carry them (after their source).
Chunker = Annotated[
    StrategyName | None,
    Field(title="Strategy", description="How documents are cut; auto picks by document type." + _UNSET_NOTE),
]
ChunkSize = Annotated[
    int | None,
    Field(ge=128, le=2048, description="Max chunk size (tokens; characters for fixed_chars)." + _UNSET_NOTE),
]
ChunkOverlap = Annotated[
    int | None, Field(ge=0, le=512, description="Overlap between consecutive chunks." + _UNSET_NOTE)
]
# An exact strategy, for Python callers: not in the form (nor in a deployment's parameter schema).
ExactStrategy = SkipJsonSchema[ChunkStrategy | None]


class StrategyChoice(BaseModel):
    """What run parameters with a chunking choice share: the form asks for the strategy and its sizes
    (`chunker`, `chunk_size`, `chunk_overlap`), the rest under `advanced.chunking`; `strategy` (Python
    callers only, not in the form) is an exact `ChunkStrategy`, used as given. Subclasses declare these
    fields after their source, so the form asks for the source first."""

    @model_validator(mode="before")
    @classmethod
    def _run_options_into_advanced(cls, data: Any) -> Any:
        """Run options given at the top level (as Python callers and older runs do) go to `advanced`."""
        if not isinstance(data, dict):
            return data
        advanced_fields = _advanced_type(cls).model_fields
        lifted = {key: data[key] for key in advanced_fields if key in data and key != "chunking"}
        if not lifted:
            return data
        advanced = data.get("advanced") or {}
        advanced = (
            advanced.model_dump(exclude_unset=True) if isinstance(advanced, BaseModel) else dict(advanced)
        )
        rest = {key: value for key, value in data.items() if key not in lifted}
        return {**rest, "advanced": {**advanced, **lifted}}

    def chunk_strategy(self, configured: ChunkStrategy) -> ChunkStrategy:
        """The run's strategy: `strategy` if given, else `configured` (the caller's, or the environment's in
        a served run) with what the form set over it."""
        exact: ChunkStrategy | None = getattr(self, "strategy", None)
        if exact is not None:
            return exact
        chosen = {field: getattr(self, key) for key, field in FORM_STRATEGY_FIELDS.items()}
        chosen |= getattr(self, "advanced").chunking.model_dump()  # noqa: B009 (a subclass's field)
        chosen = {field: value for field, value in chosen.items() if value is not None}
        if not chosen:
            return configured
        return ChunkStrategy.from_values({**configured.model_dump(), **chosen})


def _advanced_type(cls: type[BaseModel]) -> type[BaseModel]:
    annotation = cls.model_fields["advanced"].annotation
    assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return annotation


class IngestAdvanced(BaseModel):
    """Run options of `ingest` and `reindex` that keep their defaults in most runs."""

    sinks: list[SinkName] = Field(default_factory=lambda: list(SINK_NAMES), min_length=1)
    delete_missing: bool = Field(True, description="Delete documents that disappeared from the source.")
    batch_size: int = Field(
        DEFAULT_BATCH_SIZE, ge=1, le=1000, description="Documents per chunk/prepare/write round."
    )
    shards: int = Field(
        1,
        ge=1,
        le=MAX_SHARDS,
        description="Split the run into this many `ingest-shard` runs, on any worker of the work pool "
        "(1: this run does everything itself).",
    )
    shard_retries: int = Field(
        DEFAULT_SHARD_RETRIES,
        ge=0,
        le=10,
        description="Times a shard run that crashed, failed or was lost is started again, alone.",
    )
    chunking: ChunkingAdvanced = Field(default_factory=ChunkingAdvanced)  # type: ignore[valid-type]


class IngestParams(StrategyChoice):
    """Parameters of the ingest and reindex flows: a source and a chunking up front, the rest in `advanced`."""

    source: SourceParams | None = Field(
        None, description="What to ingest; unset: every source this data dir has ingested before."
    )
    chunker: Chunker = None
    chunk_size: ChunkSize = None
    chunk_overlap: ChunkOverlap = None
    strategy: ExactStrategy = None
    dry_run: bool = Field(False, description="Report what would happen; write nothing.")
    advanced: IngestAdvanced = Field(default_factory=IngestAdvanced)

    # The run options where the engine reads them.
    @property
    def sinks(self) -> list[SinkName]:
        return self.advanced.sinks

    @property
    def delete_missing(self) -> bool:
        return self.advanced.delete_missing

    @property
    def batch_size(self) -> int:
        return self.advanced.batch_size

    @property
    def shards(self) -> int:
        return self.advanced.shards

    @property
    def shard_retries(self) -> int:
        return self.advanced.shard_retries


class ShardParams(BaseModel):
    """Parameters of one `ingest-shard` run: what it needs to find its documents and to check it works
    with the parent's settings. Small whatever the source: the documents are in the manifest
    (`unichunk.index.shard_records`)."""

    parent: str = Field(description="The parent run's flow run ID: the key of its manifest.")
    shard: int = Field(ge=0, lt=MAX_SHARDS)
    shards: int = Field(ge=1, le=MAX_SHARDS)
    attempt: int = Field(1, ge=1, description="1 for the first run of this shard, 2 for its first retry, ...")
    fingerprint: str = Field(description="The parent's run fingerprint: every worker needs its settings.")
    generation: str | None = Field(None, description="The index generation the parent writes.")
    strategy: ChunkStrategy = Field(description="The parent's strategy: every shard cuts as it does.")
    sinks: list[SinkName] = Field(default_factory=lambda: list(SINK_NAMES), min_length=1)
    dry_run: bool = False
    batch_size: int = Field(DEFAULT_BATCH_SIZE, ge=1, le=1000)


class ShardOutcome(BaseModel):
    """One shard of a sharded run, for the parent's summary: its last attempt and what that did."""

    shard: int
    documents: int
    attempts: int = 0
    flow_run: str | None = None
    state: str = "not started"
    processed: int = 0
    failed: int = 0
    message: str | None = None


class FailedDocument(BaseModel):
    """A document that failed; `failure` says why as data (`unichunk.index.status.Failure`), when known."""

    document_id: str
    source_id: str | None = None
    path: str | None = None
    error: str
    failure: Literal["unreadable", "too_large"] | None = None


class IngestSummary(BaseModel):
    """What a run did; `would_*` lists are filled by dry runs instead of the counters.

    `failed` are the documents that failed in this run (they end it Failed). `unreadable` are files that
    failed to load in an earlier run and have not changed since (same path, size and mtime): they are not
    read again and do not fail this run, so one bad file is reported once, not every night; `skipped`
    does not count them. Changing the file (or its mtime) makes the next run try it again.
    """

    flow: str
    dry_run: bool = False
    listed: int = 0
    processed: int = 0
    skipped: int = 0
    failed: list[FailedDocument] = Field(default_factory=list)
    unreadable: list[FailedDocument] = Field(default_factory=list)
    deleted: int = 0
    chunked: int = 0
    relabelled: int = Field(
        0, description="Unchanged documents given new access labels in every store (nothing embedded)."
    )
    chunks_written: dict[str, int] = Field(default_factory=dict)
    embedded: int = Field(
        0, description="Chunk texts embedded in this run (each distinct text of a batch once)."
    )
    reused: int = Field(
        0,
        description="Vectors written without embedding: from the embedding cache (same embedder, same "
        "text) or another chunk of the batch; embedded + reused = the vectors written.",
    )
    sink_seconds: dict[str, float] = Field(
        default_factory=dict, description="Seconds each sink spent preparing and writing (task wall time)."
    )
    duration_seconds: float = 0.0
    would_process: list[str] = Field(default_factory=list)
    would_delete: list[str] = Field(default_factory=list)
    alignment: dict | None = None
    repaired: dict | None = None
    shards: list[ShardOutcome] = Field(
        default_factory=list, description="A sharded run's shards (empty when it ran alone)."
    )

    def add(self, part: IngestSummary) -> None:
        """Count in what a part of this run did (a shard run's summary); `listed` and the duration stay
        this run's own (the parent listed every document and its wall time covers the shards')."""
        self.processed += part.processed
        self.skipped += part.skipped
        self.failed.extend(part.failed)
        self.unreadable.extend(part.unreadable)
        self.deleted += part.deleted
        self.chunked += part.chunked
        self.relabelled += part.relabelled
        for name, count in part.chunks_written.items():
            self.chunks_written[name] = self.chunks_written.get(name, 0) + count
        self.embedded += part.embedded
        self.reused += part.reused
        for name, seconds in part.sink_seconds.items():
            self.sink_seconds[name] = round(self.sink_seconds.get(name, 0.0) + seconds, 3)
        self.would_process.extend(part.would_process)
        self.would_delete.extend(part.would_delete)

    def count_vectors(self, stats: dict[str, float]) -> None:
        """Count in the vector sink's stats of a batch it wrote (`VectorSink.prepare`)."""
        self.embedded += int(stats.get("embedded_chunks", 0))
        self.reused += int(stats.get("reused_chunks", 0))

    def _vectors_note(self) -> str:
        if not (self.embedded or self.reused):
            return ""
        return f" ({self.embedded} embedded, {self.reused} reused)"

    def line(self) -> str:
        """One log line, for the flow log and the CLI."""
        if self.dry_run:
            return (
                f"{self.flow}{self._shards_note()} (dry run): {self.listed} listed, {len(self.would_process)} would be processed, "
                f"{self.skipped} unchanged, {len(self.failed)} would fail, {len(self.would_delete)} would be deleted"
                f"{self._unreadable_note()}"
            )
        written = ", ".join(f"{k}={v}" for k, v in sorted(self.chunks_written.items())) or "none"
        return (
            f"{self.flow}{self._shards_note()}: {self.listed} listed, {self.processed} processed ({self.chunked} chunked), "
            f"{self.skipped} unchanged, "
            + (f"{self.relabelled} relabelled, " if self.relabelled else "")
            + f"{len(self.failed)} failed{self._unreadable_note()}, {self.deleted} "
            f"deleted; chunks written: {written}{self._vectors_note()}; {self.duration_seconds:.1f} s"
        )

    def _shards_note(self) -> str:
        if not self.shards:
            return ""
        retried = sum(1 for shard in self.shards if shard.attempts > 1)
        return f" (in {len(self.shards)} shards" + (f", {retried} retried)" if retried else ")")

    def _unreadable_note(self) -> str:
        if not self.unreadable:
            return ""
        return f", {len(self.unreadable)} known unreadable (unchanged since they failed to load)"


class RebuildAdvanced(BaseModel):
    """Options of `rebuild` that keep their defaults in most runs."""

    batch_size: int = Field(
        DEFAULT_BATCH_SIZE, ge=1, le=1000, description="Documents per chunk/prepare/write round."
    )
    retention_hours: float = Field(
        DEFAULT_RETENTION_HOURS,
        ge=0,
        description="Keep the replaced generation this long for rollback, then drop it.",
    )
    max_document_loss: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Refuse to switch if the new generation has this share fewer documents than the live one.",
    )
    tolerance: float = Field(
        DEFAULT_GATE_TOLERANCE,
        ge=0.0,
        le=1.0,
        description="With a gate: how much lower the new generation's recall may be at any budget (0.01: one point).",
    )
    chunking: ChunkingAdvanced = Field(default_factory=ChunkingAdvanced)  # type: ignore[valid-type]


class RebuildParams(StrategyChoice):
    """Parameters of the `rebuild` flow: the new generation is its chunking plus the sink settings."""

    source: SourceParams | None = Field(
        None, description="The whole source; unset: every source this data dir has ingested before."
    )
    chunker: Chunker = None
    chunk_size: ChunkSize = None
    chunk_overlap: ChunkOverlap = None
    strategy: ExactStrategy = None
    switch: bool = Field(True, description="Switch readers to the new generation once it is verified.")
    gate: str | None = Field(
        None,
        description="A questions file (CSV or JSONL, docs/evaluation.md) on this machine: switch only if the "
        "new generation retrieves no worse than the live one on them (character recall at each budget).",
    )
    advanced: RebuildAdvanced = Field(default_factory=RebuildAdvanced)

    @property
    def batch_size(self) -> int:
        return self.advanced.batch_size

    @property
    def retention_hours(self) -> float:
        return self.advanced.retention_hours

    @property
    def max_document_loss(self) -> float:
        return self.advanced.max_document_loss

    @property
    def tolerance(self) -> float:
        return self.advanced.tolerance


class RebuildSummary(BaseModel):
    """What a rebuild did. `outcome`: switched, built (not switched), already-live, refused, gated (built
    and verified, but its evaluation on the gate's questions was worse than the live one's: not switched,
    left ready; `gate` says where and by how much, `evaluation` is the saved report), or stopped (asked to
    stop while building: the passes count what was written, a re-run resumes).

    The documents the new generation holds as failed are sorted three ways. `reported`: unreadable here
    and unreadable (failed) or absent in the live generation, so switching loses nothing: reported, not a
    reason to refuse. `lost`: the live generation holds the document and the new one failed it, real
    loss: refused. `failed`: failed here for another reason than the file (chunking, a store), and not
    held by the live generation: refused too, as a re-run resumes and may well succeed.
    """

    generation: str
    fingerprint: str
    previous: str | None = None
    outcome: Literal["switched", "built", "already-live", "refused", "gated", "stopped"] = "refused"
    reasons: list[str] = Field(default_factory=list)
    gate: dict | None = None  # {"tolerance", "passed", "reasons"} of a gated rebuild
    evaluation: str | None = None  # the saved evaluation report of a gated rebuild
    build: IngestSummary | None = None
    catch_up: IngestSummary | None = None
    alignment: dict | None = None
    repaired: dict | None = None
    counts: dict[str, dict[str, int]] = Field(default_factory=dict)
    dropped: list[str] = Field(default_factory=list)
    reported: list[FailedDocument] = Field(default_factory=list)
    lost: list[FailedDocument] = Field(default_factory=list)
    failed: list[FailedDocument] = Field(default_factory=list)

    def line(self) -> str:
        counts = ", ".join(
            f"{name} {c.get('processed', 0)} documents/{c.get('chunks', 0)} chunks"
            for name, c in self.counts.items()
        )
        text = f"rebuild {self.generation}: {self.outcome}"
        if self.outcome == "gated":
            text += " (not switched: retrieves worse than the live generation on the gate's questions)"
        if self.previous:
            text += f" (live before: {self.previous})"
        if counts:
            text += f"; {counts}"
        if self.reasons:
            text += "; " + "; ".join(self.reasons)
        if self.reported:
            text += (
                f"; {len(self.reported)} unreadable document(s) reported, unreadable or absent in the live "
                f"generation too: {names(self.reported)}"
            )
        return text


def names(documents: list[FailedDocument], limit: int = 5) -> str:
    """A few documents by name, for a log line: `a.txt, b.eml and 3 more`."""
    shown = [one_line(d.source_id or d.document_id) for d in documents[:limit]]
    more = len(documents) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")
