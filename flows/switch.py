"""The `switch-generation` flow: roll back to a retained generation (or forward to a built one).

The target is checked first (its stores must hold exactly the chunk IDs its status table expects), so a
generation whose stores were damaged or half-dropped never goes live.
"""

from __future__ import annotations

from datetime import timedelta

from prefect import flow, get_run_logger
from prefect.states import Failed, State

from chunking.config import ChunkStrategy
from flows.pipeline import sinks_context
from sinks.config import SinkSettings
from sinks.generations import GenerationError
from tasks.generations import drop_generation, registry_of, switch_live
from tasks.maintenance import verify_alignment_task
from tasks.resources import ALL_SINKS, RunConfig


def default_target(settings: SinkSettings) -> str:
    """The most recently retired generation: what "roll back" means."""
    retired = [g for g in registry_of(settings).all() if g.state == "retired"]
    if not retired:
        raise GenerationError("no retired generation to roll back to")
    return max(retired, key=lambda g: g.retired_at or "").generation_id


@flow(name="switch-generation")
def switch_generation(generation_id: str | None = None, retention_hours: float = 168.0) -> dict | State:
    """Make `generation_id` (default: the last retired one) live after verifying its stores."""
    base = RunConfig(ChunkStrategy(), SinkSettings(), ALL_SINKS)
    target = generation_id or default_target(base.settings)
    found = registry_of(base.settings).get(target)
    if found is None:
        raise GenerationError(f"no generation {target}")
    if found.state == "live":
        return {"live": target, "previous": None, "switched": False}
    if found.state not in ("retired", "ready"):
        raise GenerationError(
            f"generation {target} is {found.state}: only a retired or ready one can go live"
        )
    run = base.pinned(target)
    with sinks_context(run, dry_run=False):
        report = verify_alignment_task(run)
        if not report.ok:
            return Failed(
                message=f"generation {target} does not hold what its status table expects; not switched",
                data=report.as_dict(),
            )
        previous = switch_live(run, timedelta(hours=retention_hours))
    get_run_logger().info("switched to generation %s (was %s)", target, previous)
    return {"live": target, "previous": previous, "switched": True}


@flow(name="drop-generation")
def drop_generation_now(generation_id: str) -> str:
    """Delete a generation that is not live (its stores, files and cached chunks) without waiting for its
    retention; the CLI's `generations drop`."""
    drop_generation(SinkSettings(), generation_id)
    return generation_id
