"""One `ingest` or `reindex` run split across workers: the parent's side (the shards' is `unichunk.flows.ingest_shard`).

The parent lists the source once, sets aside what is unchanged, splits the rest by a stable hash of the
document ID (`unichunk.index.shards`), writes the manifest to the pipeline's records (documents never travel
as flow parameters: `unichunk.index.shard_records`) and starts one `ingest-shard` deployment run per
non-empty shard, linked as subflows. It then waits, adds up the shards' summaries, and alone deletes what
vanished and checks a reindex's alignment. Two rules it keeps:

- a shard lost as a run (crashed, cancelled alone, or silent for `SILENT_SECONDS` because Prefect leaves a
  killed worker's run Running) is marked Crashed and started again alone, up to `shard_retries` times; its
  documents that failed are ordinary failures, not retried;
- cancelling or interrupting the parent cancels its open shards itself (also as the `cancel_shard_runs`
  `on_cancellation` hook), since Prefect's own cleanup acts only on a parent that is fully Cancelled.

docs/operations.md, "Scaling out", describes the whole protocol; benchmarks/README.md the shard speed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run as current_run
from prefect.states import Cancelled, Cancelling, Crashed

from unichunk.chunking.errors import UnichunkError
from unichunk.chunking.sources import SourceItem
from unichunk.engine import progress
from unichunk.engine.params import IngestParams, IngestSummary, ShardOutcome, ShardParams
from unichunk.engine.stop import interrupted, stopping
from unichunk.index.run import RunConfig
from unichunk.index.shard_records import ShardRecord, ShardRecords
from unichunk.index.shards import split

SHARD_FLOW = "ingest-shard"
SHARD_DEPLOYMENT = f"{SHARD_FLOW}/{SHARD_FLOW}"  # flow name / deployment name
POLL_SECONDS = 2.0  # how often the parent reads its shards' states: one API call and one records read
# A running shard whose beat counter (bumped every `unichunk.flows.ingest_shard.BEAT_SECONDS`) has not moved this
# long is lost: 24 missed beats, far beyond a busy machine's stalls, short against a large shard's hours.
SILENT_SECONDS = 120.0
WAITING_LOG_SECONDS = 60.0  # how often a parent says its shards still wait for a worker
OPEN_STATES = (StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING, StateType.PAUSED)


class ShardsUnavailable(UnichunkError):
    """A sharded run cannot start its shards: no `ingest-shard` deployment on the Prefect server."""


@dataclass
class _Attempt:
    """The shard run the parent is watching now, and when it last saw a sign of life (its own clock)."""

    shard: int
    number: int
    flow_run: UUID
    state: StateType | None = None
    beats: int = -1
    alive_at: float = field(default_factory=time.monotonic)


def run_in_shards(
    items: Sequence[SourceItem], run: RunConfig, summary: IngestSummary, params: IngestParams
) -> list[str]:
    """Process `items` in `params.shards` shard runs and add their summaries into `summary`; returns the
    problems that fail the run (a shard that failed as a run every time it was tried)."""
    logger = get_run_logger()
    parent = current_run.id
    if parent is None:  # pragma: no cover - the ingest and reindex flows always have a run
        raise RuntimeError("a sharded run must be a flow run (its ID keys the manifest)")
    _check_deployment()
    parts = split(items, params.shards)
    records = ShardRecords.of(run.settings)
    records.write_manifest(parent, parts)
    logger.info(
        "%d document(s) to load, in %d shard(s) of %s",
        len(items),
        params.shards,
        ", ".join(str(len(part)) for part in parts),
    )
    try:
        coordinator = _Coordinator(parent, run, params, records, total=summary.listed)
        coordinator.done = summary.listed - len(items)
        outcomes = coordinator.run({shard for shard, part in enumerate(parts) if part}, summary)
    finally:
        records.drop(parent)
    summary.shards = [
        outcomes.get(shard) or ShardOutcome(shard=shard, documents=0, state="empty")
        for shard in range(len(parts))
    ]
    return [
        f"shard {o.shard + 1} of {params.shards} failed after {o.attempts} attempt(s): {o.message}"
        for o in summary.shards
        if o.state == "lost"
    ]


def cancel_shard_runs(flow: Any, flow_run: FlowRun, state: Any) -> None:
    """`on_cancellation` hook of the sharded flows: cancel the shard runs of `flow_run` that are still
    open (Prefect calls hooks with these keyword arguments)."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run.id]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=list(OPEN_STATES))),
            )
        )
        for child in children:
            _cancel(client, child, "the parent run was cancelled")


def _check_deployment() -> None:
    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(SHARD_DEPLOYMENT)
        except ObjectNotFound:
            raise ShardsUnavailable(
                f"a run in shards needs the `{SHARD_DEPLOYMENT}` deployment, which the Prefect server at "
                f"{client.api_url} does not have: serve it (`unichunk serve`) or deploy prefect.yaml to a "
                "work pool (`prefect deploy --all`) and start workers on it (`unichunk worker --pool unichunk`)"
            ) from None


def _cancel(client: Any, child: FlowRun, why: str) -> None:
    """Stop a shard run: a scheduled one is Cancelled at once; a running one goes to Cancelling, and the
    worker or runner that has it stops its process."""
    scheduled = child.state is not None and child.state.type == StateType.SCHEDULED
    state = Cancelled(message=why) if scheduled else Cancelling(message=why)
    client.set_flow_run_state(child.id, state, force=True)


class _Coordinator:
    """Starts the shard runs, watches them, retries the lost ones, collects the summaries."""

    def __init__(
        self, parent: str, run: RunConfig, params: IngestParams, records: ShardRecords, *, total: int
    ) -> None:
        self.parent, self.config, self.params, self.records = parent, run, params, records
        self.total, self.done = total, 0
        self.logger = get_run_logger()
        self.waiting_logged = time.monotonic()

    def run(self, shards: set[int], summary: IngestSummary) -> dict[int, ShardOutcome]:
        outcomes: dict[int, ShardOutcome] = {}
        watching: dict[int, _Attempt] = {}
        with get_client(sync_client=True) as client:
            try:
                for shard in sorted(shards):
                    watching[shard] = self._start(shard, 1)
                while watching:
                    time.sleep(POLL_SECONDS)
                    if stopping():  # Ctrl-C or SIGTERM (`unichunk.engine.stop`): cancel the shards below
                        raise interrupted()
                    self._poll(client, watching, outcomes, summary)
            except BaseException:
                # Interrupted (the parent cancelled or stopped, Ctrl-C, an API failure): its shards must
                # not go on without it.
                for attempt in watching.values():
                    try:
                        _cancel(client, client.read_flow_run(attempt.flow_run), "the parent run stopped")
                    except Exception as exc:
                        self.logger.warning("could not cancel shard %d: %s", attempt.shard + 1, exc)
                raise
        return outcomes

    def _start(self, shard: int, number: int) -> _Attempt:
        params = ShardParams(
            parent=self.parent,
            shard=shard,
            shards=self.params.shards,
            attempt=number,
            fingerprint=self.config.fingerprint,
            generation=self.config.settings.generation,
            strategy=self.config.strategy,
            sinks=list(self.config.sinks),
            dry_run=self.params.dry_run,
            batch_size=self.params.batch_size,
        )
        child = run_deployment(
            SHARD_DEPLOYMENT,
            parameters={"params": params.model_dump(mode="json")},
            timeout=0,  # started, not awaited: the parent watches all its shards at once
            idempotency_key=f"{self.parent}:{shard}:{number}",  # a retried API call starts no second run
            as_subflow=True,
        )
        return _Attempt(shard, number, child.id)

    def _poll(
        self,
        client: Any,
        watching: dict[int, _Attempt],
        outcomes: dict[int, ShardOutcome],
        summary: IngestSummary,
    ) -> None:
        ids = [attempt.flow_run for attempt in watching.values()]
        runs = {
            run.id: run
            for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        }
        # Read after the runs: a summary stored before a run's final state is seen, never the other way.
        records = self.records.records(self.parent)
        now = time.monotonic()
        for shard, attempt in list(watching.items()):
            child, record = runs.get(attempt.flow_run), records[shard]
            if child is None or child.state is None:
                continue
            own = record.attempt == attempt.number and record.flow_run == str(attempt.flow_run)
            if child.state.type != attempt.state or (own and record.beats != attempt.beats):
                attempt.state, attempt.alive_at = child.state.type, now
                attempt.beats = record.beats if own else attempt.beats
            if own and record.summary is not None:
                if child.state.is_final() or (record.process is not None and record.process.is_gone()):
                    self._done(shard, record, attempt, child, summary, outcomes)
                    del watching[shard]
                continue  # its work is done and its run ending
            lost = self._lost(client, child, record if own else None, attempt, now)
            if lost is None:
                continue
            del watching[shard]
            if attempt.number > self.params.shard_retries:
                outcomes[shard] = ShardOutcome(
                    shard=shard,
                    documents=record.documents,
                    attempts=attempt.number,
                    flow_run=child.name,
                    state="lost",
                    message=lost,
                )
                self.logger.error(
                    "shard %d/%d lost on its last attempt (%d): %s",
                    shard + 1,
                    self.params.shards,
                    attempt.number,
                    lost,
                )
                continue
            self.logger.warning(
                "shard %d/%d lost (%s): starting it again, attempt %d of %d",
                shard + 1,
                self.params.shards,
                lost,
                attempt.number + 1,
                self.params.shard_retries + 1,
            )
            watching[shard] = self._start(shard, attempt.number + 1)
        running = sum(r.done for s, r in records.items() if s in watching)
        progress.report("documents", self.done + running, self.total)
        self._say_who_waits(watching, now)

    def _done(
        self,
        shard: int,
        record: ShardRecord,
        attempt: _Attempt,
        child: FlowRun,
        summary: IngestSummary,
        outcomes: dict[int, ShardOutcome],
    ) -> None:
        """Count a finished shard's summary in (Completed, or Failed for documents that failed)."""
        assert record.summary is not None
        part = IngestSummary.model_validate_json(record.summary)
        summary.add(part)
        outcomes[shard] = _outcome(record, attempt, child, part)
        self.done += record.documents
        self.logger.info("shard %d/%d done: %s", shard + 1, self.params.shards, part.line())

    def _lost(
        self, client: Any, child: FlowRun, record: ShardRecord | None, attempt: _Attempt, now: float
    ) -> str | None:
        """Why this attempt (which stored no summary) is lost, or None while it is alive or waiting. A lost
        run that Prefect still shows open is marked Crashed, with why."""
        state = child.state
        assert state is not None
        if state.is_final():
            return f"its run ended {state.name}" + (f": {state.message}" if state.message else "")
        if state.type == StateType.SCHEDULED:
            return None  # waiting for a worker
        if record is not None and record.process is not None and record.process.is_gone():
            state = client.read_flow_run(child.id).state
            if state is not None and state.is_final():
                # It ended since this poll's reads (a retry started for another shard can take seconds):
                # its summary may be stored now, so the next poll decides, from runs and records read anew.
                return None
            why = f"its process (pid {record.process.pid}) is gone: its worker stopped or died"
        elif now - attempt.alive_at > SILENT_SECONDS:
            why = f"no sign of life for {now - attempt.alive_at:.0f} s while {state.name}"
        else:
            return None
        client.set_flow_run_state(child.id, Crashed(message=why), force=True)
        return why

    def _say_who_waits(self, watching: dict[int, _Attempt], now: float) -> None:
        waiting = [a for a in watching.values() if a.state == StateType.SCHEDULED]
        if not waiting or now - self.waiting_logged < WAITING_LOG_SECONDS:
            return
        self.waiting_logged = now
        self.logger.info(
            "%d shard run(s) still wait for a worker (shards %s): is a worker polling the `%s` "
            "deployment's pool (`unichunk worker`), or `unichunk serve` running with free run slots?",
            len(waiting),
            ", ".join(str(a.shard + 1) for a in waiting),
            SHARD_DEPLOYMENT,
        )


def _outcome(record: ShardRecord, attempt: _Attempt, child: FlowRun, part: IngestSummary) -> ShardOutcome:
    return ShardOutcome(
        shard=record.shard,
        documents=record.documents,
        attempts=attempt.number,
        flow_run=child.name,
        state=child.state.name if child.state is not None else "?",
        processed=part.processed,
        failed=len(part.failed),
    )
