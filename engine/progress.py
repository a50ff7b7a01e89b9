"""A hook for showing progress of in-process flow runs (the CLI's progress bars); a no-op by default.

Flow parameters must be JSON, so a callback cannot be one; the CLI registers a listener here instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

Listener = Callable[[str, int, int], None]  # (stage, done, total)

_listeners: list[Listener] = []


def report(stage: str, done: int, total: int) -> None:
    for listener in list(_listeners):
        with suppress(Exception):  # a broken display must never break a run
            listener(stage, done, total)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
