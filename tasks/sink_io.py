"""The per-sink tasks of the two-phase write: `prepare[<sink>]` (compute, no store touched), `write[<sink>]`.

One generic task per phase, with the sink name in the task run name, so the flow fans one batch out to
all sinks with `.submit` and the UI shows `prepare[vectors]`, `write[graph]`, ... The rules are in
`unichunk.index.sink_writes`.

Retries are safe: `prepare` touches no store (what escapes it, and is retried once, is a sink failing to
open), and `write` upserts by chunk ID. The flow settles a batch only on the task's final state
(`unichunk.engine.batches._settle`), so the undo after a failed write runs once, with no write in flight.
No `timeout_seconds`: both run in worker threads, where Prefect 3.8 cannot interrupt a blocking call (the
timeout fires only once the call returns) and warns on every run; the stores' clients bound their own calls
(FalkorDB socket timeout, the model endpoints' HTTP timeouts, SQLite's busy timeout).
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.states import Cancelled

from unichunk.index.chunk_cache import ChunkKey
from unichunk.index.run import RunConfig
from unichunk.index.sink_writes import PrepareOutcome, prepare_isolating, write_prepared
from unichunk.sinks.base import InvalidRequest, Prepared
from unichunk.sinks.stop import StopRequested

WRITE_RETRY_DELAYS = [1, 4, 10]
PREPARE_RETRY_DELAYS = [5]


@task(
    name="prepare",
    cache_policy=NO_CACHE,
    task_run_name="prepare[{sink_name}]",
    retries=len(PREPARE_RETRY_DELAYS),
    retry_delay_seconds=PREPARE_RETRY_DELAYS,
)
def prepare_sink(sink_name: str, keys: list[ChunkKey], run: RunConfig) -> PrepareOutcome | State:
    """Prepare the batch for one sink, isolating the documents it cannot prepare. Stopped when asked
    (`StopRequested`, from the model work): the task run ends Cancelled, as its flow run does, not
    Crashed with Prefect's "Crash detected!" error, which is what a BaseException leaving a task shows."""
    if sink_name not in run.sinks:
        raise InvalidRequest(sink_name, f"sink {sink_name!r} is not part of this run ({run.sinks})")
    try:
        outcome = prepare_isolating(run.open_sinks()[sink_name], keys, run)
    except StopRequested as stop:  # nothing was written: a prepare touches no store
        return Cancelled(message=f"stopped by {stop.asked_by}: this batch is left for the next run")
    if outcome.batch_error:
        get_run_logger().warning(
            "prepare[%s] failed for the batch, documents tried alone: %s", sink_name, outcome.batch_error
        )
    return outcome


@task(
    name="write",
    cache_policy=NO_CACHE,
    task_run_name="write[{sink_name}]",
    retries=len(WRITE_RETRY_DELAYS),
    retry_delay_seconds=WRITE_RETRY_DELAYS,
)
def write_sink(sink_name: str, prepared: Prepared, run: RunConfig) -> int:
    """Store a prepared batch; retried, since a write is idempotent."""
    return write_prepared(run.open_sinks()[sink_name], prepared)
