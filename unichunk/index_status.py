"""What `Pipeline.status()` returns: the index generations and the live one's documents, as pydantic models
(JSON for an agent or a notebook; the CLI's `status` prints the same records as tables)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from unichunk.index.generations import generation_counts, reading_settings, registry_of
from unichunk.index.status import StatusStore
from unichunk.sinks.config import SinkSettings


class GenerationInfo(BaseModel):
    generation_id: str
    state: str = Field(description="live, building, ready, failed or retired.")
    fingerprint: str
    settings: dict = Field(description="What the generation was built with (chunking, embedder, extractor).")
    counts: dict[str, int] = Field(description="Documents per state, and expected chunks.")
    created_at: str
    live_since: str | None = None
    drop_after: str | None = None
    last_error: str | None = None


class DocumentInfo(BaseModel):
    document_id: str
    source_system: str | None = None
    source_id: str | None = None
    state: str
    chunk_count: int
    error: str | None = None
    updated_at: str


class IndexStatus(BaseModel):
    """The generations (the live one first) and the live generation's documents."""

    live: str | None = Field(None, description="The live generation's ID; None before the first ingest.")
    generations: list[GenerationInfo] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict, description="Live documents per state.")
    documents: list[DocumentInfo] = Field(default_factory=list)


def index_status(settings: SinkSettings, *, failed_only: bool = False) -> IndexStatus:
    generations = sorted(registry_of(settings).all(), key=lambda g: (g.state != "live", g.created_at))
    live = next((g.generation_id for g in generations if g.state == "live"), None)
    store = StatusStore.of(reading_settings(settings), readonly=True)
    return IndexStatus(
        live=live,
        generations=[
            GenerationInfo(
                generation_id=g.generation_id,
                state=g.state,
                fingerprint=g.fingerprint,
                settings=g.description,
                counts=generation_counts(settings, g.generation_id),
                created_at=g.created_at,
                live_since=g.live_since,
                drop_after=g.drop_after,
                last_error=g.last_error,
            )
            for g in generations
        ],
        counts=store.counts(),
        documents=[
            DocumentInfo(
                document_id=row.document_id,
                source_system=row.source_system,
                source_id=row.source_id,
                state=row.state,
                chunk_count=row.chunk_count,
                error=row.error,
                updated_at=row.updated_at,
            )
            for row in store.rows(state="failed" if failed_only else None)
        ],
    )
