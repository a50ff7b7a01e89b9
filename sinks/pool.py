"""The process-wide pool of open sinks, shared by every flow, task thread and reader in one process.

Sinks hold clients, models and file locks (Qdrant local mode allows one client per directory), so each is
opened once per process and shared by the task threads. A flow opens what it needs through `flow_sinks`
and closes at its end only what it opened itself, so a long-lived process that opened them first (serve)
keeps them, and a nested flow does not close its parent's sinks. Settings arrive already pinned to an
index generation: sinks of two generations are two entries here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress

from sinks.base import Sink
from sinks.config import SinkSettings
from sinks.factory import open_sinks

_lock = threading.RLock()
_open: dict[tuple[str, str], Sink] = {}
_users: dict[tuple[str, str], int] = {}  # flows currently using each open sink
_flow_opened: set[tuple[str, str]] = set()  # sinks opened by a flow (closed when no flow uses them)


def _settings_key(settings: SinkSettings) -> str:
    # Secrets are masked in the dump, which is fine: the key only tells configurations apart.
    return settings.model_dump_json()


def acquire_sinks(names: Iterable[str], settings: SinkSettings) -> tuple[dict[str, Sink], list[str]]:
    """The named sinks, opening those not open yet; also returns the names this call opened."""
    key = _settings_key(settings)
    wanted = list(dict.fromkeys(names))
    with _lock:
        missing = [name for name in wanted if (key, name) not in _open]
        if missing:
            for name, sink in open_sinks(settings, missing).items():
                _open[(key, name)] = sink
        return {name: _open[(key, name)] for name in wanted}, missing


def get_sinks(names: Iterable[str], settings: SinkSettings) -> dict[str, Sink]:
    return acquire_sinks(names, settings)[0]


def release_sinks(names: Iterable[str], settings: SinkSettings) -> None:
    """Close and forget the named sinks (errors while closing must not mask the flow's outcome)."""
    key = _settings_key(settings)
    with _lock:
        for name in names:
            sink = _open.pop((key, name), None)
            if sink is not None:
                with suppress(Exception):  # a close failure must not mask the flow's outcome
                    sink.close()


@contextmanager
def flow_sinks(names: Iterable[str], settings: SinkSettings) -> Iterator[dict[str, Sink]]:
    """The sinks for one flow. A sink a flow opened is closed when the last flow using it ends, not when
    its opener ends: two flows running at once in one process must not close sinks under each other."""
    key = _settings_key(settings)
    with _lock:
        sinks, opened = acquire_sinks(names, settings)
        _flow_opened.update((key, name) for name in opened)
        for name in sinks:
            _users[(key, name)] = _users.get((key, name), 0) + 1
    try:
        yield sinks
    finally:
        with _lock:
            idle = []
            for name in sinks:
                _users[(key, name)] -= 1
                if _users[(key, name)] <= 0:
                    _users.pop((key, name))
                    if (key, name) in _flow_opened:  # sinks opened outside flows (serve) stay open
                        _flow_opened.discard((key, name))
                        idle.append(name)
            release_sinks(idle, settings)


def close_all_sinks() -> None:
    with _lock:
        _users.clear()
        _flow_opened.clear()
        for (key, name), sink in list(_open.items()):
            _open.pop((key, name), None)
            with suppress(Exception):
                sink.close()
