"""Why a run stops taking batches before its list is done, asked once and checked between batches.

Something that makes every later batch pointless (a store whose server stopped answering, after the write
task's retries; a disk too full for the next batch) `request`s the stop with the error that ends the run; a
stop asked of the whole process (the first Ctrl-C or SIGTERM, `unichunk.sinks.stop.STOP`) counts as one
too, and ends the run with `RunInterrupted`. The
batch loop (`unichunk.engine.batches`) checks it before it writes the next batch: the batches already
written stay, the one that failed is undone, those chunked but not written go back to `pending` for the
next run, and the reason is raised once the loop has let go of everything it held.
"""

from __future__ import annotations

from unichunk.engine.stop import interrupted
from unichunk.sinks.stop import STOP


class RunStop:
    """The first reason given to stop the run; later ones are dropped (the first is what happened)."""

    def __init__(self) -> None:
        self.reason: BaseException | None = None

    @property
    def requested(self) -> bool:
        return self.reason is not None or STOP.requested

    @property
    def why(self) -> str:
        return str(self.reason) if self.reason is not None else "a stop was asked for"

    def request(self, reason: BaseException) -> None:
        if self.reason is None:
            self.reason = reason

    def raise_if_requested(self) -> None:
        if self.reason is not None:
            raise self.reason
        if STOP.requested:
            raise interrupted()
