"""What one run is: the chunking settings, the store settings and the sinks it writes, and their fingerprints.

A `RunConfig` is small and picklable, so every Prefect task gets it whole. Its fingerprints decide what
counts as "unchanged": the chunk fingerprint keys the chunk cache (only chunking settings decide chunks),
the generation fingerprint names an index generation (chunking + embedder + extractor + analyzer), and
the run fingerprint (generation + the sinks written) is what the status table compares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cached_property

from unichunk.chunking.base import EmbedFunction
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import sha256_hex
from unichunk.index.chunk_cache import ChunkCache
from unichunk.index.status import StatusStore
from unichunk.sinks.base import SINK_NAMES, Sink, SinkName
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import held_sinks

# How document IDs are made (a generation's fingerprint covers it): the source's name and the path in it.
# Before, every file source was "fs", so two folders with the same relative paths overwrote each other.
DOCUMENT_IDS = "source name + path"


def generation_id_for(fingerprint: str) -> str:
    """Deterministic: re-running a rebuild with the same settings resumes the same generation."""
    return f"g{fingerprint[:10]}"


def index_settings(settings: SinkSettings) -> dict[str, object]:
    """The sink settings that change what gets stored (with the chunking settings: an index generation).

    MiniLM's backend counts only where it changes the vectors: torch and ONNX fp32 give the same vectors
    (cosine 1.0000), so an index built with either is the same generation; int8 or bf16 adds a key, so switching
    to it (or back) builds a new generation explicitly. Absent otherwise, so existing fingerprints stay.
    Models reading segments (`SinkSettings.model_input`) store other vectors and extractions than whole
    chunks give, so that names itself too where it applies."""
    suffix = settings.embedding_variant_suffix()
    variant = {"embedding_variant": suffix.removeprefix("+")} if suffix else {}
    if settings.segmented_vectors() or settings.segmented_extraction():
        variant["model_input"] = "segments"
    return variant | {
        "embedder": settings.embedder,
        "embedding_model": settings.embedding_model if settings.embedder == "openai" else None,
        "embedding_dimensions": settings.embedding_dimensions if settings.embedder == "openai" else None,
        "qdrant_collection": settings.qdrant_collection,
        "bm25": [settings.bm25_stemming, settings.bm25_stopwords],
        "graph_name": settings.graph_name,
        "extractor": settings.extractor,
        "llm_model": settings.llm_model if settings.extractor == "llm" else None,
    }


@dataclass(frozen=True)
class RunConfig:
    """Everything a task needs to know about its run, small enough to pass to every task.

    `settings.generation` says which generation's stores the run writes; `unichunk.index.generations` pins it.
    The strategy's embedding budget is always the configured embedder's (`SinkSettings.embedding_budget`),
    so `auto` cuts chunks that embedder reads whole, whatever budget the given strategy carried; `semantic`
    also records which embedder measures its sentences (`SinkSettings.embedder_identity`), so its chunk
    fingerprint names it.
    """

    strategy: ChunkStrategy
    settings: SinkSettings
    sinks: tuple[SinkName, ...] = SINK_NAMES

    def __post_init__(self) -> None:
        update: dict[str, object] = {}
        budget = self.settings.embedding_budget()
        if self.strategy.embedding != budget:
            update["embedding"] = budget
        if (
            self.strategy.name == "semantic"
            and self.strategy.semantic_model != self.settings.embedder_identity()
        ):
            update["semantic_model"] = self.settings.embedder_identity()
        if update:
            object.__setattr__(self, "strategy", self.strategy.model_copy(update=update))

    def chunk_embedding(self, strategy: ChunkStrategy | None = None) -> EmbedFunction | None:
        """What `strategy` (the run's by default) measures text with: the configured embedder's `embed` for
        `semantic`, nothing for the others (so they never construct an embedder)."""
        if (strategy or self.strategy).name != "semantic":
            return None
        # Imported here: the embedders bring torch or an HTTP client (seconds), which every other strategy,
        # and every run's fingerprint, do without.
        from unichunk.sinks.vectors.embedders import make_embedder

        return make_embedder(self.settings).embed

    @cached_property
    def chunk_fingerprint(self) -> str:
        """Keys the chunk cache: only chunking settings decide the chunks."""
        return self.strategy.fingerprint()

    @cached_property
    def generation_fingerprint(self) -> str:
        """What an index generation is: chunking, embedder, extractor and analyzer settings together."""
        return sha256_hex(json.dumps(self.describe(), sort_keys=True))[:16]

    @cached_property
    def fingerprint(self) -> str:
        """Stored in the status table: the generation plus the sinks a run wrote decide if a row is current."""
        return sha256_hex(f"{self.generation_fingerprint}:{sorted(set(self.sinks))}")[:16]

    @property
    def generation_id(self) -> str:
        """The generation these settings make (whether or not it exists yet)."""
        return generation_id_for(self.generation_fingerprint)

    def describe(self) -> dict[str, object]:
        """The settings behind the generation fingerprint, readable (shown by `unichunk status`).

        `document_ids` names how documents are identified: an index whose IDs were made another way must be
        rebuilt, not mixed (ingesting into it is refused with the difference named)."""
        return {
            "document_ids": DOCUMENT_IDS,
            "chunking": self.strategy.settings_payload(),
            "chunk_fingerprint": self.chunk_fingerprint,  # also covers the strategies' built-in defaults
            **index_settings(self.settings),
        }

    def pinned(self, generation_id: str | None = None) -> RunConfig:
        """This run writing to one generation's stores (its own by default)."""
        return replace(self, settings=self.settings.for_generation(generation_id or self.generation_id))

    def status_store(self, *, readonly: bool = False) -> StatusStore:
        """The status table of the generation this run is pinned to."""
        return StatusStore.of(self.settings, readonly=readonly)

    def chunk_cache(self) -> ChunkCache:
        return ChunkCache.of(self.settings)

    def open_sinks(self) -> dict[str, Sink]:
        """The run's sinks, as its flow holds them in the process-wide pool (`unichunk.sinks.pool.held_sinks`: a sink
        the flow has not opened is refused, never opened outside the flow's store lock)."""
        return held_sinks(self.sinks, self.settings)
