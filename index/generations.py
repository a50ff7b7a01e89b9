"""Which index generation: the one place that answers it, for readers and for runs alike.

Every caller that opens stores gets its settings pinned here first (`reading_settings`, `target_for_ingest`,
`writable_runs`), so the stores, the status table and the readers never decide on their own, and a reader
that resolves once gets all three stores from the same generation. This module also holds the generation
operations (switch, drop) that the flows run as tasks.

An ingest writes to the live generation only when its settings are that generation's settings: chunks
made under other settings must never be mixed into it (their IDs and vectors differ), so a run whose
fingerprint differs stops with `GenerationMismatch` and points at `rebuild`, instead of skipping every
"unchanged" document or silently overwriting half the index. A data dir with no generation yet gets one
from its first ingest.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal

from unichunk.index.chunk_cache import ChunkCache
from unichunk.index.errors import GenerationError, GenerationMismatch
from unichunk.index.registry import Generation, GenerationRegistry
from unichunk.index.run import RunConfig
from unichunk.index.status import DocumentStatus, State, StatusStore
from unichunk.sinks.base import SINK_NAMES, AliasedCollection, Sink
from unichunk.sinks.config import VARIANT_OF_BACKEND, SinkSettings
from unichunk.sinks.database import open_database
from unichunk.sinks.factory import open_sinks
from unichunk.sinks.pool import discard_sinks, flow_sinks


def registry_of(settings: SinkSettings) -> GenerationRegistry:
    return GenerationRegistry.of(settings)


def live_generation(settings: SinkSettings) -> Generation | None:
    """The generation readers use now (None before the first ingest of the data dir)."""
    return registry_of(settings).live()


def reading_settings(settings: SinkSettings) -> SinkSettings:
    """`settings` pinned to the live generation, unless already pinned; unchanged when nothing is live yet
    (then the base store names, which hold nothing). `auto`'s backend is settled by the generation read
    (`settled_backend`), so queries are embedded as its chunks were."""
    registry = registry_of(settings)
    if settings.generation is not None:
        return settled_backend(settings, registry.get(settings.generation))
    live = registry.live()
    settled = settled_backend(settings, live)
    return settled if live is None else settled.for_generation(live.generation_id)


def settled_backend(
    settings: SinkSettings, generation: Generation | Literal["live"] | None = "live"
) -> SinkSettings:
    """`settings` with an `auto` MiniLM backend replaced by the one `generation` (the live one by default)
    was built with, so an index keeps its vectors whichever machine or release runs next: an index of
    torch's fp32 vectors stays fp32 where bfloat16 would now be this machine's choice (and bf16 stays bf16
    on a CPU without it). Unchanged where the backend is named, or with no generation yet (then the machine
    chooses: `SinkSettings.minilm_backend`); switching an index is a named backend and a `rebuild`."""
    if settings.embedding_backend != "auto" or settings.embedder != "minilm":
        return settings
    generation = live_generation(settings) if generation == "live" else generation
    if generation is None:
        return settings
    variant = generation.description.get("embedding_variant")
    if VARIANT_OF_BACKEND.get(settings.minilm_backend()) == variant:
        return settings  # `auto` already means it here: the same settings, the same pooled stores
    backend = next((b for b, v in VARIANT_OF_BACKEND.items() if v == variant), "torch")
    return settings.model_copy(update={"embedding_backend": backend})


class LiveStatus:
    """Read-only view of the live generation's status table that resolves the generation at every call.

    For observers that outlive a switch or start before the first ingest creates a generation (a
    progress display, a test watching another process's run); one-shot readers use `StatusStore.of`.
    """

    def __init__(self, settings: SinkSettings) -> None:
        self._base = settings

    def now(self) -> StatusStore:
        return StatusStore.of(reading_settings(self._base), readonly=True)

    def get(self, document_id: str) -> DocumentStatus | None:
        return self.now().get(document_id)

    def get_many(self, document_ids: Iterable[str]) -> dict[str, DocumentStatus]:
        return self.now().get_many(document_ids)

    def rows(self, *, source_system: str | None = None, state: State | None = None) -> list[DocumentStatus]:
        return self.now().rows(source_system=source_system, state=state)

    def counts(self) -> dict[str, int]:
        return self.now().counts()

    def expected_chunk_ids(self) -> set[str]:
        return self.now().expected_chunk_ids()

    def expected_labels(self) -> dict[str, tuple[str, ...]]:
        return self.now().expected_labels()


def live_status(settings: SinkSettings) -> LiveStatus:
    """The live generation's status table of `settings`' index, read-only."""
    return LiveStatus(settings)


def target_for_ingest(run: RunConfig, *, dry_run: bool = False) -> RunConfig:
    """`run` pinned to the live generation; the first ingest of a data dir makes its own generation live."""
    registry = registry_of(run.settings)
    live = registry.live()
    if live is not None and live.fingerprint != run.generation_fingerprint:
        raise GenerationMismatch(mismatch_message(live, run))
    if live is None and not dry_run:
        registry.bootstrap(run.generation_id, run.generation_fingerprint, run.describe())
    return run.pinned(live.generation_id if live is not None else None)


def mismatch_message(live: Generation, run: RunConfig) -> str:
    changes = [
        f"{key}: {before!r} -> {after!r}"
        for key, before, after in _differences(live.description, run.describe())
    ]
    return (
        f"these settings are not those of the live index generation {live.generation_id} "
        f"({'; '.join(changes) or 'fingerprint differs'}). Writing them into it would mix chunks made two "
        "ways, so nothing was written. To switch the index to the new settings, run `unichunk rebuild` "
        "(it builds a new generation beside the live one and switches when it is verified); to keep the "
        "live index, run with its settings."
    )


def _differences(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        found: list[tuple[str, Any, Any]] = []
        for key in sorted(set(before) | set(after)):
            found += _differences(before.get(key), after.get(key), f"{prefix}{key}.")
        return found
    return [] if before == after else [(prefix.rstrip("."), before, after)]


def deletion_targets(settings: SinkSettings) -> list[Generation]:
    """Every generation a deletion must reach: the live one and any being built (none before the first
    ingest: there is nothing to delete, and opening stores would create them)."""
    registry = registry_of(settings)
    return [g for g in (registry.live(), *registry.in_progress()) if g is not None]


def writable_runs(run: RunConfig) -> list[RunConfig]:
    """`run` pinned to every generation a deletion must reach (`deletion_targets`)."""
    return [run.pinned(g.generation_id) for g in deletion_targets(run.settings)]


def generation_counts(settings: SinkSettings, generation_id: str) -> dict[str, int]:
    """Documents per state and expected chunks of one generation, from its own status table."""
    status = StatusStore.of(settings.for_generation(generation_id), readonly=True)
    return {**status.counts(), "chunks": len(status.expected_chunk_ids())}


def rollback_target(settings: SinkSettings) -> str:
    """The most recently retired generation: what "roll back" means."""
    retired = [g for g in registry_of(settings).all() if g.state == "retired"]
    if not retired:
        raise GenerationError("no retired generation to roll back to")
    return max(retired, key=lambda g: g.retired_at or "").generation_id


def switchable(settings: SinkSettings, generation_id: str) -> Generation:
    """The generation `generation_id`, if it may go live (retired or ready; a live one is returned too)."""
    found = registry_of(settings).get(generation_id)
    if found is None:
        raise GenerationError(f"no generation {generation_id}")
    if found.state not in ("retired", "ready", "live"):
        raise GenerationError(
            f"generation {generation_id} is {found.state}: only a retired or ready one can go live"
        )
    return found


def switch_live(run: RunConfig, retention: timedelta) -> tuple[str | None, str | None]:
    """Point readers at `run`'s generation: the Qdrant alias, then the registry (one transaction).

    If the registry cannot be updated the alias is put back, so the two never disagree for long.
    Returns (the generation live before, the one retired by this switch).
    """
    target = run.settings.generation
    if target is None:
        raise GenerationError("switch_live needs a run pinned to a generation")
    registry = registry_of(run.settings)
    before = registry.live()
    vectors = run.open_sinks().get("vectors")
    alias = run.settings.qdrant_collection
    if isinstance(vectors, AliasedCollection):
        vectors.point_alias(alias)
    try:
        previous = registry.switch_live(target, retention)
    except Exception:
        if isinstance(vectors, AliasedCollection) and before is not None:
            with flow_sinks(["vectors"], run.settings.for_generation(before.generation_id)) as back:
                if isinstance(back["vectors"], AliasedCollection):
                    back["vectors"].point_alias(alias)
        raise
    return (before.generation_id if before else None), (previous.generation_id if previous else None)


def ensure_live_alias(run: RunConfig, sinks: Mapping[str, Sink]) -> None:
    """Keep the Qdrant alias on the live collection (the first ingest of a data dir creates it)."""
    vectors = sinks.get("vectors")
    live = live_generation(run.settings)
    if (
        isinstance(vectors, AliasedCollection)
        and live is not None
        and live.generation_id == run.settings.generation
    ):
        vectors.point_alias(run.settings.qdrant_collection)


def drop_generation(settings: SinkSettings, generation_id: str) -> None:
    """Delete a generation's collection, BM25 index, graph and status table (its directory, or its schema
    in server mode), then forget it."""
    registry = registry_of(settings)
    found = registry.get(generation_id)
    if found is None:
        raise GenerationError(f"no generation {generation_id}")
    if found.state == "live":
        raise GenerationError(f"generation {generation_id} is live; switch to another one before dropping it")
    pinned = settings.for_generation(generation_id)
    discard_sinks(SINK_NAMES, pinned)  # a long-lived process may still hold them open
    sinks = open_sinks(pinned)
    try:
        for sink in sinks.values():
            sink.drop()
    finally:
        for sink in sinks.values():
            sink.close()
    if pinned.generation_dir is not None:
        shutil.rmtree(pinned.generation_dir, ignore_errors=True)
    # Server mode: the generation's schema, and every table in it, goes (a no-op on SQLite: its files went
    # with the directory). Read-only, so nothing is created on SQLite to open it.
    open_database(pinned, pinned.status_path, generation=generation_id, readonly=True).drop_schema()
    registry.forget(generation_id)
    _forget_cached_chunks(settings, found)


def _forget_cached_chunks(settings: SinkSettings, dropped: Generation) -> None:
    """Drop the chunk cache of the dropped generation's chunking settings, unless another generation
    (say, the same chunking with another embedder) still uses them."""
    fingerprint = dropped.description.get("chunk_fingerprint")
    if not fingerprint:
        return
    if any(g.description.get("chunk_fingerprint") == fingerprint for g in registry_of(settings).all()):
        return
    ChunkCache.of(settings).delete_fingerprint(str(fingerprint))


def expired_generations(settings: SinkSettings) -> list[str]:
    """Retired generations whose retention ran out (the next rebuild or reindex drops them)."""
    return [g.generation_id for g in registry_of(settings).expired()]
