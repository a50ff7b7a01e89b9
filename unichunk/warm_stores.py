"""A serving process's warm stores: models loaded once, readers kept open, the single-writer rule kept.

The HTTP service (`unichunk serve`) keeps one and hands its readers to a `unichunk.Pipeline` (`readers=`),
whose code answers every request; it lives in the application layer so the service reaches the stores only
through it. Opening the stores loads the embedder, too slow for every `GET /search`, but an embedded vector
store may be held by one process, and the served flow runs need it. So the embedder is made once and
shared by every reader this process opens, and the open vector reader is handed over: the service holds a
SHARED flock on the generation's `run.lock` (the lock runs take exclusively, `unichunk.engine.store_access`);
when a waiting run leaves `run.wanted.<pid>`, a watcher thread stops admitting searches, lets those in
flight finish, closes the reader and releases the lock. Searches meanwhile wait up to
UNICHUNK_SERVICE_BUSY_WAIT, then get `StoreBusy` (503 with Retry-After). The reader reopens on the next
search once no run holds or wants the store, resolving the live generation again. With a Qdrant server
nothing is handed over. A dead service's flock and a dead run's marker (`handover_markers`) bind no one.
"""

from __future__ import annotations

import fcntl
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from unichunk.engine.store_access import handover_markers, store_lock_path
from unichunk.errors import StoreBusy
from unichunk.index.generations import live_generation, reading_settings
from unichunk.retrieval.graph_search import QUERY_ENTITIES
from unichunk.retrieval.readers import Readers
from unichunk.sinks.base import Sink
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.factory import open_sinks
from unichunk.sinks.vectors.base import Embedder
from unichunk.sinks.vectors.embedders import make_embedder
from unichunk.sinks.vectors.sink import open_vector_sink

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.1  # seconds between looks for a waiting run's marker: a run waits at most about this


class WarmStores:
    """The live generation's readers, kept open between searches and handed over to flow runs."""

    def __init__(self, busy_wait: float, settings: SinkSettings | None = None) -> None:
        self.busy_wait = busy_wait
        # Read from the environment once, at start, not per search (benchmarks/README.md); the live
        # generation is still resolved per search, from the registry, so a switch is followed.
        self._base = settings or SinkSettings()
        self._cond = threading.Condition()
        self._active = 0  # searches holding the readers
        self._readers: Readers | None = None
        self._opened: dict[str, Sink] = {}
        self._lock_file: IO[str] | None = None
        self._lock_path: Path | None = None
        self._embedder: Embedder | None = None
        self._generation: str | None = None  # the generation the open readers read
        self._stop = threading.Event()
        self.handovers = 0  # times the store was released to a run (tests and /status read it)
        threading.Thread(target=self._watch, name="warm-stores-handover", daemon=True).start()

    @contextmanager
    def readers(self) -> Iterator[Readers]:
        """The open readers for one search; waits (bounded) while a run holds or wants the store."""
        deadline = time.monotonic() + self.busy_wait
        with self._cond:
            while True:
                readers = None if self._wanted() else self._open_if_free()
                if readers is not None:
                    self._active += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreBusy(
                        "a flow run is writing the embedded vector store; search again when it ends"
                    )
                self._cond.wait(min(remaining, WATCH_INTERVAL))
        try:
            yield readers
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def warm(self) -> None:
        """Open the readers and load the embedder, and the spaCy model the graph retriever reads queries
        with, now (the service calls it at start, in the background); nothing while nothing is ingested
        (the first search after the first run loads them)."""
        if self._base.generation is None and live_generation(self._base) is None:
            return
        with self.readers() as readers:
            if readers.vectors is not None:
                readers.vectors.search("warm up", 1)
            if readers.graph is not None:
                QUERY_ENTITIES.warm()

    def is_open(self) -> bool:
        return self._readers is not None

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._release()
            if self._embedder is not None:
                self._embedder.close()
                self._embedder = None

    # -- under self._cond ------------------------------------------------------------------------------

    def _wanted(self) -> bool:
        return self._lock_path is not None and bool(handover_markers(self._lock_path))

    def _open_if_free(self) -> Readers | None:
        """The readers, opening them if no run holds the store's lock; None while one does. A switch of
        the live generation (a first ingest, a rebuild) is followed once no search uses the old readers."""
        settings = reading_settings(self._base)
        if self._readers is not None:
            if settings.generation == self._generation or self._active:
                return self._readers
            self._release()
        lock_path = store_lock_path(settings, ("vectors",))
        self._lock_path = lock_path
        if lock_path is not None:
            if handover_markers(lock_path):
                return None
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            handle = lock_path.open("a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return None
            self._lock_file = handle
        try:
            self._opened = open_sinks(settings, ("keywords", "graph"))
            if self._embedder is None:
                self._embedder = make_embedder(settings)
            self._opened["vectors"] = open_vector_sink(settings, embedder=self._embedder)
        except BaseException:
            self._release()
            raise
        self._readers = Readers.of(self._opened)
        self._generation = settings.generation
        return self._readers

    def _release(self) -> None:
        for sink in self._opened.values():
            with suppress(Exception):
                sink.close()
        self._opened = {}
        self._readers = None
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def _watch(self) -> None:
        """Hand the store over to a run that asks for it (see the module docstring)."""
        while not self._stop.wait(WATCH_INTERVAL):
            if self._lock_file is None or not self._wanted():
                continue
            with self._cond:
                while self._active:  # _wanted() keeps new searches out meanwhile
                    self._cond.wait(WATCH_INTERVAL)
                if self._lock_file is not None:
                    log.info("handing the embedded store over to a waiting flow run")
                    self.handovers += 1  # before the release: the run may be granted the lock at once
                    self._release()
                self._cond.notify_all()
