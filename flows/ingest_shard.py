"""The `ingest-shard` flow: one shard of a run split across workers (the parent's side is `unichunk.engine.shards`).

It runs on whichever worker picks it up, so it first checks that this worker's settings make the parent's
run (same fingerprint, same index generation): a worker with another embedder or chunking would write
vectors or chunks of another kind into the index. Then it takes its documents from the manifest
(`unichunk.index.shard_records`), processes them exactly as a run on its own does (`unichunk.engine.batches.process_items`:
batches, leases, status), and stores its summary for the parent. Meanwhile a heartbeat thread says it is
alive, with the documents done so far (the parent's progress). Deleting what vanished from the source is
the parent's business, done once; a shard deletes nothing. Like the other runs it is `guarded`: the SIGTERM
its worker sends (the run cancelled, the worker stopping) stops it between batches, Cancelled, with what it
did not write put back and its leases released, so the attempt its parent starts next finds them free.
"""

from __future__ import annotations

import threading
from types import TracebackType

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import State

from unichunk.chunking.errors import UnichunkError
from unichunk.engine import progress
from unichunk.engine.batches import finish, process_items, run_stores, timed_summary
from unichunk.engine.params import IngestSummary, ShardParams
from unichunk.engine.run_names import shard_run_name
from unichunk.engine.stop import RunInterrupted
from unichunk.flows.run_guard import guarded
from unichunk.flows.run_settings import flow_metrics, flow_settings
from unichunk.index.generations import target_for_ingest
from unichunk.index.run import RunConfig
from unichunk.index.shard_records import ShardRecords

BEAT_SECONDS = 5.0  # how often a shard run says it is alive (the parent's `SILENT_SECONDS` is 24 of these)


class ShardSettingsMismatch(UnichunkError):
    """This worker's settings do not make the parent run's fingerprint."""


class _Heartbeat:
    """Bumps the shard's beat counter every `BEAT_SECONDS` with the documents done so far (fed by
    `unichunk.engine.progress`), from a thread, so a long batch does not look like a dead worker."""

    def __init__(self, records: ShardRecords, params: ShardParams) -> None:
        self.records, self.params = records, params
        self.done = 0
        self.logger = get_run_logger()  # the thread has no run context of its own
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="shard-heartbeat", daemon=True)

    def progress(self, stage: str, done: int, total: int) -> None:
        if stage == "documents":
            self.done = done

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        p = self.params
        while not self._stop.wait(BEAT_SECONDS):
            try:
                if not self.records.beat(p.parent, p.shard, p.attempt, self.done):
                    self.logger.warning("a later attempt of this shard has begun: this one is superseded")
            except Exception as exc:  # a busy database must not end the heartbeat: the next beat retries
                self.logger.warning("shard heartbeat failed: %s: %s", type(exc).__name__, exc)


def shard_run(params: ShardParams) -> RunConfig:
    """The run this worker's settings make, checked against the parent's."""
    run = target_for_ingest(
        RunConfig(params.strategy, flow_settings(), tuple(params.sinks)), dry_run=params.dry_run
    )
    if run.fingerprint != params.fingerprint or run.settings.generation != params.generation:
        raise ShardSettingsMismatch(
            f"this worker's settings make run {run.fingerprint} in generation {run.settings.generation}, "
            f"the parent's run is {params.fingerprint} in {params.generation}: every worker needs the "
            "parent's UNICHUNK_* settings (embedder, extractor, BM25 analyzer, stores)"
        )
    return run


@flow(name="ingest-shard", flow_run_name=shard_run_name)
@guarded
def ingest_shard(params: ShardParams) -> IngestSummary | State:
    """Process one shard of a sharded `ingest`/`reindex` run; Failed if any of its documents failed."""
    logger = get_run_logger()
    summary = IngestSummary(flow="ingest-shard", dry_run=params.dry_run)
    run = shard_run(params)
    records = ShardRecords.of(run.settings)
    items = records.begin(params.parent, params.shard, params.attempt, str(flow_run.id))
    summary.listed = len(items)
    logger.info(
        "shard %d/%d of run %s, attempt %d: %d document(s)",
        params.shard + 1,
        params.shards,
        params.parent,
        params.attempt,
        len(items),
    )
    with (
        timed_summary(summary, "ingest-shard", flow_metrics()),
        _Heartbeat(records, params) as heartbeat,
        progress.listening(heartbeat.progress),
        run_stores(run, params.dry_run) as stores,
    ):
        try:
            process_items(items, run, summary, stores, batch_size=params.batch_size, dry_run=params.dry_run)
        except (
            RunInterrupted
        ) as exc:  # stored no summary: the parent starts the shard again (unless it stopped)
            raise exc.counting(summary.processed) from None
    if not records.finish(params.parent, params.shard, params.attempt, summary.model_dump_json()):
        logger.warning("a later attempt of this shard has begun: its summary, not this one's, counts")
    # No artifacts: the parent publishes the run's, with every shard's counts in them.
    return finish(summary, pushed=flow_metrics(), artifacts=False)
