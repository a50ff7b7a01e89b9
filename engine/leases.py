"""A run's document leases (`unichunk.index.document_leases`): take a batch's before it is chunked, give them back
once its outcome is recorded, and wait for another run's only while holding none.

Why a run waits holding nothing: if runs could wait while holding leases, run A holding X and waiting for
Y while run B holds Y and waits for X would wait for ever. Here a run that meets a document another run
holds defers it, finishes (and releases) everything else, and only then waits, so every run that holds a
lease is making progress and will let go.

The leases are renewed by each batch's acquisition and by a heartbeat thread (every `ttl / 4`), so a batch
slower than the ttl (LLM extraction of a big batch) keeps them for as long as its process lives; a killed
run's leases are taken over as soon as its process is gone (`ProcessIdentity.is_gone`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType

from prefect import get_run_logger
from prefect.exceptions import MissingContextError
from prefect.runtime import flow_run

from unichunk.chunking.sources import SourceItem
from unichunk.index.document_leases import DEFAULT_TTL_SECONDS, DocumentLeases
from unichunk.index.run import RunConfig

# How often a waiting run looks whether a deferred document is free: short against a batch's seconds, long
# against the one database read it costs.
POLL_SECONDS = 0.5


class RunLeases:
    """The leases one run holds in its generation; a context manager that releases them all on exit.

    Not thread-safe for `take`/`release` (the flow calls them from its own thread); the heartbeat only
    reads the set of held IDs under a lock.
    """

    def __init__(
        self, run: RunConfig, *, ttl: float = DEFAULT_TTL_SECONDS, poll: float = POLL_SECONDS
    ) -> None:
        self.table = DocumentLeases.of(run.settings)
        self.generation = run.settings.generation or ""
        self.holder = uuid.uuid4().hex
        self.label = f"flow run '{flow_run.name or '?'}' (pid {os.getpid()})"
        self.ttl, self.poll = ttl, poll
        self.logger = _run_logger()  # taken here: the heartbeat thread has no run context of its own
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name=f"leases-{self.holder[:8]}", daemon=True)

    def __enter__(self) -> RunLeases:
        self._heartbeat.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._heartbeat.join()
        try:
            self.table.release_all(self.holder)
        except Exception as failure:  # must not mask how the run ended; the leases free themselves anyway
            self.logger.warning(
                "could not release document leases (they free themselves when this process ends, or "
                "after %.0f s): %s: %s",
                self.ttl,
                type(failure).__name__,
                failure,
            )
        with self._lock:
            self._held.clear()

    @property
    def held(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)

    def take(self, items: Sequence[SourceItem]) -> tuple[list[SourceItem], list[SourceItem]]:
        """Lease what is free of `items` (one transaction): (taken, deferred), each in the given order."""
        got = self.table.acquire(
            self.holder, self.generation, (i.document_id for i in items), self.ttl, label=self.label
        )
        with self._lock:
            self._held |= got
        return [i for i in items if i.document_id in got], [i for i in items if i.document_id not in got]

    def take_ids(self, document_ids: Iterable[str]) -> set[str]:
        got = self.table.acquire(self.holder, self.generation, document_ids, self.ttl, label=self.label)
        with self._lock:
            self._held |= got
        return got

    def release(self, document_ids: Iterable[str]) -> None:
        ids = set(document_ids)
        self.table.release(self.holder, self.generation, ids)
        with self._lock:
            self._held -= ids

    def wait_for_any(self, document_ids: Sequence[str], describe: Callable[[str], str] = str) -> None:
        """Return once any of `document_ids` is no longer held by another run, releasing this run's own
        leases first (a run waits only holding nothing). Logs once which documents wait and for whom."""
        if self.held:
            self.release(self.held)
        logged = False
        started = time.monotonic()
        while True:
            others = self.table.held_by_others(self.holder, self.generation, document_ids)
            if len(others) < len(set(document_ids)):
                if logged:
                    self.logger.info(
                        "document(s) free after waiting %.1f s; going on", time.monotonic() - started
                    )
                return
            if not logged:
                shown = ", ".join(f"{describe(d)} (held by {h})" for d, h in sorted(others.items())[:10])
                more = f" and {len(others) - 10} more" if len(others) > 10 else ""
                self.logger.info(
                    "waiting for %d document(s) another run is writing, holding none meanwhile: %s%s",
                    len(others),
                    shown,
                    more,
                )
                logged = True
            time.sleep(self.poll)

    def _beat(self) -> None:
        """Renew every `ttl / 4` while the run lives; warn if a lease was lost (the process was stalled
        past the ttl and another run took a document over)."""
        while not self._stop.wait(self.ttl / 4):
            held = self.held
            if not held:
                continue
            try:
                kept = self.table.renew(self.holder, self.generation, held, self.ttl)
            except Exception as exc:  # a busy database must not kill the heartbeat: the next beat retries
                self.logger.warning("could not renew document leases: %s: %s", type(exc).__name__, exc)
                continue
            lost = (held & self.held) - kept  # those released meanwhile were not lost
            if lost:
                self.logger.warning(
                    "lost the leases of %d document(s) to another run (this run stalled past the ttl)",
                    len(lost),
                )


def _run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The flow run's logger (its lines show in the Prefect UI); a plain one outside a run (tests)."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


def when_leased(
    run: RunConfig,
    document_ids: Sequence[str],
    work: Callable[[list[str]], None],
    *,
    describe: Callable[[str], str] = str,
) -> None:
    """Call `work` on `document_ids` under their leases: at once on those free now, then on the rest as
    the runs writing them let go (this run holding none while it waits). For deletions: a document another
    run is writing is deleted after that run is done with it, never under it."""
    with RunLeases(run) as leases:
        pending = list(dict.fromkeys(document_ids))
        while pending:
            got = leases.take_ids(pending)
            if got:
                try:
                    work([d for d in pending if d in got])
                finally:
                    leases.release(got)
            pending = [d for d in pending if d not in got]
            if pending:
                leases.wait_for_any(pending, describe)
