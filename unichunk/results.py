"""What the application layer's operations return, one type each, whoever asks: `Pipeline` in this process
or a running service over HTTP (`unichunk.interface`). The CLI, the HTTP API, the MCP server and the
adapters render these; none builds its own.

The types defined here are plain pydantic models, cheap to import (the CLI's start-up imports them). The
result types of the layers below are re-exported on first use, so an interface names them from here
without importing the layer that builds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from unichunk.lazy_names import lazy_names

if TYPE_CHECKING:
    from unichunk.engine.params import FailedDocument, IngestSummary, RebuildSummary
    from unichunk.index.alignment import AlignmentReport
    from unichunk.retrieval.results import EntityResult, GraphResult, SearchHit, SearchResult
    from unichunk.sinks.base import StoredChunk


class GenerationInfo(BaseModel):
    generation_id: str
    state: str = Field(description="live, building, ready, failed or retired.")
    fingerprint: str
    settings: dict = Field(description="What the generation was built with (chunking, embedder, extractor).")
    counts: dict[str, int] = Field(description="Documents per state, and expected chunks.")
    created_at: str
    live_since: str | None = None
    retired_at: str | None = None
    drop_after: str | None = None
    listed: int | None = Field(None, description="The source's size when the build began.")
    last_error: str | None = None


class DocumentInfo(BaseModel):
    """A document's record in the live generation (without the chunk IDs and the chunking JSON)."""

    document_id: str
    source_system: str | None = None
    source_id: str | None = None
    path: str | None = Field(None, description="The file it was read from, if any; shown to admins only.")
    state: str
    chunk_count: int
    error: str | None = None
    content_hash: str | None = None
    fingerprint: str | None = None
    chunk_fingerprint: str | None = None
    size: int | None = None
    mtime_ns: int | None = None
    created_at: str = ""
    updated_at: str
    last_success_at: str | None = None
    labels: list[str] = Field(
        default_factory=list, description="Its access labels (none: readable by admins only)."
    )


class DocumentList(BaseModel):
    """One page of the documents a caller may read, by source and its ID there (`GET /documents`)."""

    total: int = Field(description="How many documents match, on every page.")
    documents: list[DocumentInfo]


class Generations(BaseModel):
    """The index generations, the live one first."""

    live: str | None = Field(None, description="The live generation's ID; None before the first ingest.")
    generations: list[GenerationInfo] = Field(default_factory=list)


class IndexStatus(Generations):
    """The generations (the live one first) and the live generation's documents."""

    counts: dict[str, int] = Field(default_factory=dict, description="Live documents per state.")
    documents: list[DocumentInfo] = Field(default_factory=list)


class GenerationSwitch(BaseModel):
    live: str
    previous: str | None = None
    switched: bool = Field(description="False when the generation was live already.")


class DroppedGeneration(BaseModel):
    dropped: str
    state: str = Field(description="Its state before it was dropped.")


class ChunkRecord(BaseModel):
    """A stored chunk: identity, exact offsets into its document, text and heading chain."""

    chunk_id: str
    document_id: str
    chunk_index: int
    start_char: int
    end_char: int
    content: str
    heading_chain: list[str] = Field(default_factory=list)


class DocumentChunks(BaseModel):
    """One live document's record and its chunks in order."""

    document: DocumentInfo
    chunks: list[ChunkRecord] = Field(default_factory=list)


class ChunkContext(BaseModel):
    """A chunk with its neighbours in its document, merged into one passage (overlaps once)."""

    chunk_id: str
    document_id: str
    start_char: int
    end_char: int
    text: str
    chunks: list[ChunkRecord]


# Result types of the layers below, loaded on first use (the CLI's start-up must not pay for them).
_ELSEWHERE = {
    "FailedDocument": "unichunk.engine.params",
    "IngestSummary": "unichunk.engine.params",
    "RebuildSummary": "unichunk.engine.params",
    "AlignmentReport": "unichunk.index.alignment",
    "EntityResult": "unichunk.retrieval.results",
    "GraphResult": "unichunk.retrieval.results",
    "SearchHit": "unichunk.retrieval.results",
    "SearchResult": "unichunk.retrieval.results",
    "StoredChunk": "unichunk.sinks.base",
}


__getattr__ = lazy_names(__name__, _ELSEWHERE)


__all__ = [
    "AlignmentReport",
    "ChunkContext",
    "ChunkRecord",
    "DocumentChunks",
    "DocumentInfo",
    "DroppedGeneration",
    "EntityResult",
    "FailedDocument",
    "GenerationInfo",
    "GenerationSwitch",
    "Generations",
    "GraphResult",
    "IndexStatus",
    "IngestSummary",
    "RebuildSummary",
    "SearchHit",
    "SearchResult",
    "StoredChunk",
]
