"""One run at a time on an embedded store: overlapping runs wait in line for it, none fails.

Qdrant's local mode lets one process open its directory, and webhook, UI and nightly runs overlap in real
use. So a flow that opens a generation's stores with vectors in local mode first takes an exclusive OS file
lock on that generation's `run.lock`, waiting as long as it takes and saying so in its log. A file lock,
not a Prefect concurrency limit, because the kernel frees it the moment its holder exits, however it exits,
and it covers every process on the machine. Rules kept here:

- a run takes the lock only once it has something to write or delete (`unichunk.engine.batches.RunStores`),
  and having waited, reads the status rows again: the run it waited for may have changed the same documents;
- each generation has its own lock, so a rebuild never holds up the runs keeping the live one current;
- a waiting run leaves `run.wanted.<pid>` beside the lock (`handover_markers`), so a service holding it
  SHARED for warm searches (`unichunk.warm_stores`) closes its store and lets the run in.

Runs that open no Qdrant directory, or use a Qdrant server, are not queued; document leases
(`unichunk.engine.leases`) keep parallel runs off one document. docs/operations.md ("Overlapping runs
wait") has the rest.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect import get_run_logger
from prefect.runtime import flow_run

from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings

HANDOVER_PREFIX = "run.wanted."


def handover_markers(lock: Path) -> list[Path]:
    """The markers of runs waiting for this store lock whose process is alive (a crashed waiter's marker is
    ignored, so it never keeps the service's readers closed)."""
    alive = []
    for marker in lock.parent.glob(f"{HANDOVER_PREFIX}*"):
        try:
            os.kill(int(marker.name.removeprefix(HANDOVER_PREFIX)), 0)
        except (ValueError, ProcessLookupError):
            continue
        except PermissionError:
            pass  # alive, another user's
        alive.append(marker)
    return alive


def store_lock_path(settings: SinkSettings, sinks: Iterable[str] = SINK_NAMES) -> Path | None:
    """The lock guarding these settings' embedded vector store; None when it is a server, or when `sinks`
    (the sinks a run opens) leave the vector store out."""
    if settings.qdrant_url or "vectors" not in sinks:
        return None
    return settings.qdrant_path.parent / "run.lock"


@contextmanager
def exclusive_store_access(
    settings: SinkSettings, sinks: Iterable[str] = SINK_NAMES
) -> Iterator[Path | None]:
    """Hold the store's lock for the block, waiting for it as long as it takes; yields the lock's path
    (None: no lock needed). `sinks` are those the run opens, every sink by default (a generation drop)."""
    path = store_lock_path(settings, sinks)
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another run, or the service's warm readers"
            get_run_logger().info("waiting for the embedded store %s: %s holds it", path.parent, holder)
            marker = path.with_name(f"{HANDOVER_PREFIX}{os.getpid()}")
            marker.touch()  # asks a serving process to close its readers and release its shared lock
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)  # blocks; released when the holder ends, however it ends
            finally:
                marker.unlink(missing_ok=True)
        handle.seek(0)
        handle.truncate()
        handle.write(f"flow run {flow_run.name or '?'} (pid {os.getpid()})")
        handle.flush()
        try:
            yield path
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)
