"""The `switch-generation` flow: roll back to a retained generation (or forward to a built one); and
`drop-generation`.

The target is checked first (its stores must hold exactly the chunk IDs its status table expects, each
with the content its ID names), so a generation whose stores were damaged or half-dropped never goes live.
"""

from __future__ import annotations

from datetime import timedelta

from prefect import flow, get_run_logger
from prefect.states import State

from unichunk.engine.batches import sinks_context
from unichunk.engine.reports import failed_state
from unichunk.engine.run_names import drop_run_name, switch_run_name
from unichunk.engine.store_access import exclusive_store_access
from unichunk.flows.run_settings import flow_settings, flow_strategy
from unichunk.index.defaults import DEFAULT_RETENTION_HOURS
from unichunk.index.generations import rollback_target, switchable
from unichunk.index.run import RunConfig
from unichunk.sinks.base import SINK_NAMES
from unichunk.tasks.alignment import verify_alignment_task
from unichunk.tasks.generations import drop_generation, switch_live


@flow(name="switch-generation", flow_run_name=switch_run_name)
def switch_generation(
    generation_id: str | None = None, retention_hours: float = DEFAULT_RETENTION_HOURS
) -> dict | State:
    """Make `generation_id` (default: the last retired one) live after verifying its stores."""
    base = RunConfig(flow_strategy(), flow_settings())
    target = generation_id or rollback_target(base.settings)
    if switchable(base.settings, target).state == "live":
        return {"live": target, "previous": None, "switched": False}
    run = base.pinned(target)
    with sinks_context(run, dry_run=False):
        report = verify_alignment_task(run)
        if not report.ok:
            return failed_state(
                f"generation {target} does not hold what its status table expects; not switched",
                report.as_dict(),
            )
        previous = switch_live(run, timedelta(hours=retention_hours))
    get_run_logger().info("switched to generation %s (was %s)", target, previous)
    return {"live": target, "previous": previous, "switched": True}


@flow(name="drop-generation", flow_run_name=drop_run_name)
def drop_generation_now(generation_id: str) -> str:
    """Delete a generation that is not live (its stores, files and cached chunks) without waiting for its
    retention; the CLI's `generations drop`."""
    settings = flow_settings()
    # every sink of the generation is dropped, the vector store included: always its lock
    with exclusive_store_access(settings.for_generation(generation_id), SINK_NAMES):
        drop_generation(settings, generation_id)
    return generation_id
