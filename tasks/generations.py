"""The generation tasks: switch readers to a generation, drop one (the rules are in `unichunk.index.generations`)."""

from __future__ import annotations

from datetime import timedelta

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from unichunk.index import generations
from unichunk.index.run import RunConfig
from unichunk.sinks.config import SinkSettings


@task(name="switch_live_generation", cache_policy=NO_CACHE)
def switch_live(run: RunConfig, retention: timedelta) -> str | None:
    """Point readers at `run`'s generation (Qdrant alias, then registry); returns the one live before."""
    before, previous = generations.switch_live(run, retention)
    get_run_logger().info("live generation: %s -> %s", before, run.settings.generation)
    return previous


@task(name="drop_generation", cache_policy=NO_CACHE)
def drop_generation(settings: SinkSettings, generation_id: str) -> None:
    """Delete a generation that is not live: its stores, files and cached chunks."""
    generations.drop_generation(settings, generation_id)
    get_run_logger().info("dropped generation %s", generation_id)
