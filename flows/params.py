"""Flow parameters and results as pydantic models, so the Prefect UI renders forms and runs are typed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from chunking.config import ChunkStrategy
from chunking.sources import DEFAULT_PATTERNS, DirectorySource, PathsSource, Source
from index.generations import DEFAULT_RETENTION_HOURS
from index.run import DEFAULT_BATCH_SIZE
from sinks.base import SINK_NAMES, SinkName


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
    source_system: str = Field("fs", description="Namespace of the source IDs; part of each document ID.")

    @model_validator(mode="after")
    def _check_kind(self) -> SourceParams:
        if self.kind == "directory" and not self.root:
            raise ValueError("a directory source needs a root")
        if self.kind == "paths" and not self.paths:
            raise ValueError("a paths source needs at least one path")
        return self

    def build(self) -> Source:
        if self.kind == "directory":
            assert self.root is not None
            return DirectorySource(
                self.root,
                self.patterns,
                follow_symlinks=self.follow_symlinks,
                source_system=self.source_system,
            )
        return PathsSource(self.paths, root=self.root, source_system=self.source_system)


class IngestParams(BaseModel):
    """Parameters of the ingest and reindex flows."""

    source: SourceParams
    strategy: ChunkStrategy = Field(default_factory=ChunkStrategy)
    sinks: list[SinkName] = Field(default_factory=lambda: list(SINK_NAMES), min_length=1)
    delete_missing: bool = Field(True, description="Delete documents that disappeared from the source.")
    dry_run: bool = Field(False, description="Report what would happen; write nothing.")
    batch_size: int = Field(
        DEFAULT_BATCH_SIZE, ge=1, le=1000, description="Documents per chunk/prepare/write round."
    )


class FailedDocument(BaseModel):
    document_id: str
    source_id: str | None = None
    path: str | None = None
    error: str


class IngestSummary(BaseModel):
    """What a run did; `would_*` lists are filled by dry runs instead of the counters."""

    flow: str
    dry_run: bool = False
    listed: int = 0
    processed: int = 0
    skipped: int = 0
    failed: list[FailedDocument] = Field(default_factory=list)
    deleted: int = 0
    chunked: int = 0
    chunks_written: dict[str, int] = Field(default_factory=dict)
    duration_seconds: float = 0.0
    would_process: list[str] = Field(default_factory=list)
    would_delete: list[str] = Field(default_factory=list)
    alignment: dict | None = None
    repaired: dict | None = None

    def line(self) -> str:
        """One log line, for the flow log and the CLI."""
        if self.dry_run:
            return (
                f"{self.flow} (dry run): {self.listed} listed, {len(self.would_process)} would be processed, "
                f"{self.skipped} unchanged, {len(self.failed)} would fail, {len(self.would_delete)} would be deleted"
            )
        written = ", ".join(f"{k}={v}" for k, v in sorted(self.chunks_written.items())) or "none"
        return (
            f"{self.flow}: {self.listed} listed, {self.processed} processed ({self.chunked} chunked), "
            f"{self.skipped} unchanged, {len(self.failed)} failed, {self.deleted} deleted; chunks written: "
            f"{written}; {self.duration_seconds:.1f} s"
        )


class RebuildParams(BaseModel):
    """Parameters of the `rebuild` flow: the new settings are `strategy` plus the UNICHUNK_* sink settings."""

    source: SourceParams
    strategy: ChunkStrategy = Field(default_factory=ChunkStrategy)
    batch_size: int = Field(
        DEFAULT_BATCH_SIZE, ge=1, le=1000, description="Documents per chunk/prepare/write round."
    )
    switch: bool = Field(True, description="Switch readers to the new generation once it is verified.")
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


class RebuildSummary(BaseModel):
    """What a rebuild did. `outcome`: switched, built (not switched), already-live, or refused."""

    generation: str
    fingerprint: str
    previous: str | None = None
    outcome: Literal["switched", "built", "already-live", "refused"] = "refused"
    reasons: list[str] = Field(default_factory=list)
    build: IngestSummary | None = None
    catch_up: IngestSummary | None = None
    alignment: dict | None = None
    repaired: dict | None = None
    counts: dict[str, dict[str, int]] = Field(default_factory=dict)
    dropped: list[str] = Field(default_factory=list)

    def line(self) -> str:
        counts = ", ".join(
            f"{name} {c.get('processed', 0)} documents/{c.get('chunks', 0)} chunks"
            for name, c in self.counts.items()
        )
        text = f"rebuild {self.generation}: {self.outcome}"
        if self.previous:
            text += f" (live before: {self.previous})"
        if counts:
            text += f"; {counts}"
        if self.reasons:
            text += "; " + "; ".join(self.reasons)
        return text
