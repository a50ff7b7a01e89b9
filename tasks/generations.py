"""Which index generation a run writes to, and the tasks that switch and drop generations.

An ingest writes to the live generation only when its settings are that generation's settings: chunks
made under other settings must never be mixed into it (their IDs and vectors differ), so a run whose
fingerprint differs stops with `GenerationMismatch` and points at `rebuild`, instead of skipping every
"unchanged" document or silently overwriting half the index. A data dir with no generation yet gets one
from its first ingest.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from sinks.config import SinkSettings
from sinks.generations import Generation, GenerationError, GenerationRegistry, settings_for
from tasks.resources import ALL_SINKS, RunConfig, release_sinks


class GenerationMismatch(RuntimeError):
    """A run's settings are not the live generation's: only `rebuild` may write them."""


def registry_of(settings: SinkSettings) -> GenerationRegistry:
    return GenerationRegistry.in_data_dir(settings.data_dir)


def target_for_ingest(run: RunConfig, *, dry_run: bool = False) -> RunConfig:
    """`run` pinned to the live generation; the first ingest of a data dir makes its own generation live."""
    registry = registry_of(run.settings)
    live = registry.live()
    if live is None:
        if not dry_run:
            registry.bootstrap(run.generation_id, run.generation_fingerprint, run.describe())
        return run.pinned()
    if live.fingerprint != run.generation_fingerprint:
        raise GenerationMismatch(mismatch_message(live, run))
    return run.pinned(live.generation_id)


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


def writable_runs(run: RunConfig) -> list[RunConfig]:
    """`run` pinned to every generation a deletion must reach: the live one and any being built (none
    before the first ingest: there is nothing to delete, and opening stores would create them)."""
    registry = registry_of(run.settings)
    targets = [g for g in (registry.live(), *registry.in_progress()) if g is not None]
    return [run.pinned(g.generation_id) for g in targets]


def generation_counts(settings: SinkSettings, generation_id: str) -> dict[str, int]:
    """Documents per state and expected chunks of one generation, from its own status table."""
    from tasks.status import StatusStore

    status = StatusStore.in_data_dir(settings.data_dir, readonly=True, generation=generation_id)
    return {**status.counts(), "chunks": len(status.expected_chunk_ids())}


@task(name="switch_live_generation", cache_policy=NO_CACHE)
def switch_live(run: RunConfig, retention: timedelta) -> str | None:
    """Point readers at `run`'s generation: the Qdrant alias, then the registry (one transaction).

    If the registry cannot be updated the alias is put back, so the two never disagree for long.
    Returns the generation that was live before.
    """
    if run.settings.generation is None:
        raise GenerationError("switch_live needs a run pinned to a generation")
    registry = registry_of(run.settings)
    before = registry.live()
    vectors: Any = run.open_sinks().get("vectors")
    alias = run.settings.qdrant_collection
    if vectors is not None:
        vectors.point_alias(alias)
    try:
        previous = registry.switch_live(run.settings.generation, retention)
    except Exception:
        if vectors is not None and before is not None:
            run.pinned(before.generation_id).open_sinks()["vectors"].point_alias(alias)
        raise
    get_run_logger().info(
        "live generation: %s -> %s", before.generation_id if before else None, run.settings.generation
    )
    return previous.generation_id if previous else None


@task(name="drop_generation", cache_policy=NO_CACHE)
def drop_generation(settings: SinkSettings, generation_id: str) -> None:
    """Delete a generation's collection, BM25 index, graph and status table, then forget it."""
    registry = registry_of(settings)
    found = registry.get(generation_id)
    if found is not None and found.state == "live":
        raise GenerationError(f"generation {generation_id} is live; switch to another one before dropping it")
    pinned = settings_for(settings, generation_id)
    release_sinks(ALL_SINKS, pinned)  # a long-lived process may still hold them open
    from sinks.factory import open_sinks

    sinks = open_sinks(pinned)
    try:
        for sink in sinks.values():
            sink.drop()
    finally:
        for sink in sinks.values():
            sink.close()
    if pinned.generation_dir is not None:
        shutil.rmtree(pinned.generation_dir, ignore_errors=True)
    registry.forget(generation_id)
    _forget_cached_chunks(settings, found)
    get_run_logger().info("dropped generation %s", generation_id)


def _forget_cached_chunks(settings: SinkSettings, dropped: Generation | None) -> None:
    """Drop the chunk cache of the dropped generation's chunking settings, unless another generation
    (say, the same chunking with another embedder) still uses them."""
    fingerprint = dropped.description.get("chunk_fingerprint") if dropped else None
    if not fingerprint:
        return
    if any(g.description.get("chunk_fingerprint") == fingerprint for g in registry_of(settings).all()):
        return
    from tasks.chunk_store import ChunkStore

    ChunkStore.in_data_dir(settings.data_dir).delete_fingerprint(str(fingerprint))


def drop_expired(settings: SinkSettings) -> list[str]:
    """Drop every retired generation whose retention ran out; returns their IDs."""
    expired = [g.generation_id for g in registry_of(settings).expired()]
    for generation_id in expired:
        drop_generation(settings, generation_id)
    return expired


def ensure_live_alias(run: RunConfig, sinks: dict[str, Any]) -> None:
    """Keep the Qdrant alias on the live collection (the first ingest of a data dir creates it)."""
    vectors = sinks.get("vectors")
    live = registry_of(run.settings).live()
    if vectors is not None and live is not None and live.generation_id == run.settings.generation:
        vectors.point_alias(run.settings.qdrant_collection)


def ingest_settings(run: RunConfig | None = None) -> SinkSettings:
    """The settings, pinned to a generation, that an ingest of `run` (default: the env settings) uses."""
    from chunking.config import ChunkStrategy

    run = run or RunConfig(ChunkStrategy(), SinkSettings(), ALL_SINKS)
    return target_for_ingest(run, dry_run=True).settings
