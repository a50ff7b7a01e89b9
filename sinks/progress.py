"""How far the vector sink's `prepare` has got, chunk by chunk, for whoever shows a run's progress.

A batch's vectors can take minutes; the engine (`unichunk.engine.progress`) turns these events into a bar
and log lines with a rate and an ETA. The sinks cannot import the engine (a lower layer), so it listens
here. No listener, no cost; a failing listener never fails a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Generic, ParamSpec

P = ParamSpec("P")


class Listeners(Generic[P]):
    """Callbacks told of progress, process-wide (a run's parameters must be JSON, so a callback cannot be
    one): a failing listener is ignored, as a broken display must never break a run."""

    def __init__(self) -> None:
        self._listeners: list[Callable[P, None]] = []

    def tell(self, *args: P.args, **kwargs: P.kwargs) -> None:
        for listener in list(self._listeners):
            with suppress(Exception):
                listener(*args, **kwargs)

    @contextmanager
    def listening(self, listener: Callable[P, None]) -> Iterator[None]:
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)


@dataclass(frozen=True)
class ChunkEvent:
    """`queued`: a prepare began on `documents` documents holding `chunks` chunks, of which `reused` have
    their vectors already (the cache); `done`: `embedded` more chunk texts were embedded and `reused` more
    vectors were taken from the cache."""

    kind: str  # "queued" or "done"
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    reused: int = 0


_listeners: Listeners[[ChunkEvent]] = Listeners()
emit = _listeners.tell
listening = _listeners.listening


def queued(documents: int, chunks: int, *, reused: int = 0) -> None:
    emit(ChunkEvent("queued", documents=documents, chunks=chunks, reused=reused))


def done(*, embedded: int = 0, reused: int = 0) -> None:
    if embedded or reused:
        emit(ChunkEvent("done", embedded=embedded, reused=reused))
