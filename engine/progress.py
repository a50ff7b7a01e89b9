"""A run's progress: a hook for in-process flow runs (the CLI's bar; a no-op by default), and chunk-level
progress with a rate and an ETA, for that bar and for the flow log of any run (served ones included).

Flow parameters must be JSON, so a callback cannot be one; the CLI registers a listener here instead.
Listeners get `(stage, done, total)`: stage "documents" (documents accounted for, of those listed) until
the first batch's vectors are being prepared, then "chunks" (chunks whose vectors are ready, embedded or reused, of an
estimate of the run's chunks). The total is not known before every document is chunked, so it is
estimated from the chunks per document seen so far and refined with every batch (`ChunkProgress`). The
vector sink reports each embedding call (`unichunk.sinks.progress`), so the count moves within a batch,
long before the batch is written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from unichunk.sinks import progress as work_progress

Listener = Callable[[str, int, int], None]  # (stage, done, total)

LOG_SECONDS = 15.0  # a progress line in the flow log at most this often (the first at the first chunks done)

_listeners: work_progress.Listeners[[str, int, int]] = work_progress.Listeners()
listening = _listeners.listening
_trackers: list[ChunkProgress] = []


def report(stage: str, done: int, total: int) -> None:
    if stage == "documents":
        for tracker in list(_trackers):
            tracker.documents(done, total)
    _listeners.tell(stage, done, total)


class ChunkProgress:
    """Counts a run's chunks as the vector sink reports them, estimates the run's total, and tells the
    listeners ("chunks", done, estimate) and the flow log (`logger`: every `LOG_SECONDS`, with the
    embedding rate since the first chunk and the ETA).

    The estimate: the chunks queued so far, plus the documents not yet queued times the chunks per
    document seen so far. Documents are counted as done only after their batch is prepared, so those
    queued since the last "documents" report are the batch in flight."""

    def __init__(self, logger: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.clock = clock
        self._lock = threading.Lock()
        self.documents_done = self.documents_total = 0
        self.documents_queued = self.chunks_queued = 0
        self._queued_at_report = 0  # documents queued when documents were last reported done
        self.embedded = self.reused = 0
        self._started: float | None = None
        self._logged: float | None = None

    @property
    def done(self) -> int:
        return self.embedded + self.reused

    def documents(self, done: int, total: int) -> None:
        with self._lock:
            self.documents_done, self.documents_total = done, total
            self._queued_at_report = self.documents_queued

    def event(self, event: work_progress.ChunkEvent) -> None:
        with self._lock:
            if event.kind == "queued":
                self.documents_queued += event.documents
                self.chunks_queued += event.chunks
            self.embedded += event.embedded
            self.reused += event.reused
            if self._started is None:
                self._started = self.clock()
            done, total = self.done, self.estimate()
            # a batch's prepare begins, its reused vectors counted: the bar counts chunks from here, and
            # its rate from the first embedding call on
            line = self._due_line() if event.kind == "done" or event.reused else None
        _listeners.tell("chunks", done, total)
        if line is not None and self.logger is not None:
            with suppress(Exception):
                self.logger.info(line)

    def estimate(self) -> int:
        """The run's chunks: those queued, plus the documents not yet queued at the chunks per document
        seen so far (never less than what is done)."""
        if not self.documents_queued:
            return self.chunks_queued
        in_flight = self.documents_queued - self._queued_at_report
        unqueued = max(0, self.documents_total - self.documents_done - in_flight)
        per_document = self.chunks_queued / self.documents_queued
        return max(self.done, self.chunks_queued + round(unqueued * per_document))

    def rate(self) -> float | None:
        """Chunk texts embedded per second since the first chunk event (None before one is): the pace of
        the model, which sets the ETA. Reused vectors cost nothing, so counting them would make the first
        seconds of a re-run look thousands of times faster than the rest will be; the ETA is therefore
        pessimistic by the reuse still to come."""
        if self._started is None or not self.embedded:
            return None
        elapsed = self.clock() - self._started
        return self.embedded / elapsed if elapsed > 0 else None

    def line(self) -> str:
        """`progress: 640 of ~4,021 chunks (512 embedded, 128 reused), 20 of 302 documents; 4.1 chunks/s,
        ETA 13m 44s`."""
        total = self.estimate()
        text = (
            f"progress: {self.done:,} of ~{total:,} chunks ({self.embedded:,} embedded, {self.reused:,} "
            f"reused), {self.documents_done:,} of {self.documents_total:,} documents"
        )
        rate = self.rate()
        if rate:
            text += f"; {rate:.1f} chunks/s, ETA {_duration(max(0, total - self.done) / rate)}"
        return text

    def _due_line(self) -> str | None:
        now = self.clock()
        if self._logged is not None and now - self._logged < LOG_SECONDS:
            return None
        self._logged = now
        return self.line()


@contextmanager
def tracking(logger: Any = None) -> Iterator[ChunkProgress]:
    """Chunk progress for the block (one run's batches): listens to the vector sink and to the documents
    reported here."""
    tracker = ChunkProgress(logger)
    _trackers.append(tracker)
    try:
        with work_progress.listening(tracker.event):
            yield tracker
    finally:
        _trackers.remove(tracker)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"
