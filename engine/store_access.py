"""One run at a time on an embedded store: overlapping runs wait in line for it, none fails.

Qdrant's local mode lets one process open its directory. Webhook-triggered runs, runs started from the
Prefect UI and the nightly reindex overlap in real use; without a gate every run but one failed on the lock,
and an update the sender had been told was accepted was lost. So a flow that opens the stores of a
generation whose vectors live in local mode first takes an exclusive lock on that generation's store
(`<store dir>/run.lock`), waiting for it as long as it takes, and says so in its log (the Prefect UI shows
which run waits). Each generation has its own lock, so a rebuild writing the next generation never holds up
the runs that keep the live one current.

Why an OS file lock and not a Prefect global concurrency limit: Prefect 3.8 keeps a slot's lease in the
server's memory and the slot count in its database, so a server restart while a run held the slot left the
slot taken for ever and every later run waiting (reproduced by tests/faults/test_faults_interrupted_runs.py).
The kernel releases a file lock the moment its holder exits, however it exits, and the lock covers every
process on the machine whichever Prefect server started it (a CLI run beside a served one). The served
process's own queue (`UNICHUNK_SERVE_RUN_LIMIT`) is Prefect's.

A run opens its stores, and so takes the lock, only once it has something to write or delete
(`unichunk.engine.batches.RunStores`): a run whose documents are all unchanged takes none, so it never waits here
nor makes the service below hand its store over. Having waited, it reads the status rows again: the run it
waited for may have written or deleted the same documents.

Only a run that opens the vector store needs the lock: a run writing only the keyword index and the graph
(`--sink keywords --sink graph`) opens no Qdrant directory (the BM25 file and the graph server take
concurrent writers), so it is not queued. Dropping a generation removes all its stores, the vectors
included, and keeps the lock.

A running service (`unichunk serve`, `unichunk.warm_stores`) keeps the live store open for warm
searches and holds a SHARED lock on the same file meanwhile. A run that finds the lock taken drops a marker
beside it (`run.wanted.<pid>`, `handover_markers`) while it waits: the service sees the marker, lets its
searches in flight finish, closes the store and releases its shared lock, so the run gets the exclusive
one; the marker goes once the run holds the lock, and the service reopens the store after the run.

With a Qdrant server (`UNICHUNK_QDRANT_URL`) the stores take concurrent writers and runs are not queued.
Runs that proceed in parallel never write one document at once: each holds the leases of the documents it
is writing (`unichunk.engine.leases`).
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
