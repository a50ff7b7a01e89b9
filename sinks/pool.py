"""The process-wide pool of open sinks, shared by every flow, task thread and reader in one process.

Sinks hold clients, models and file locks (an embedded vector store allows one handle per directory), so
each is opened once per process and shared; sinks of two generations are two entries. Each records who holds
it and closes when nobody does: flows, counted (`flow_sinks`; their tasks get them with `held_sinks`, which
refuses a sink no flow holds, so a task never opens a store outside the flow's store lock), and keepers,
once (`get_sinks` hands a reader sinks it keeps until `release_sinks`). So a flow ending never closes a sink
a reader was handed (a search that resolved the live generation as a rebuild switched to it holds the
rebuild's sinks), and a reader letting go never closes one a flow uses. Only `discard_sinks` (a generation
being dropped) closes a sink whoever holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from unichunk.sinks.base import Sink
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.factory import open_sinks


@dataclass
class _Held:
    """One open sink and its holders: flows using it now, and whether a reader keeps it."""

    sink: Sink
    flows: int = 0
    kept: bool = False

    @property
    def idle(self) -> bool:
        return self.flows == 0 and not self.kept


_lock = threading.RLock()
_open: dict[tuple[str, str], _Held] = {}


def _settings_key(settings: SinkSettings) -> str:
    # Secrets are masked in the dump, which is fine: the key only tells configurations apart.
    return settings.model_dump_json()


def _entries(names: Iterable[str], settings: SinkSettings) -> dict[str, _Held]:
    """The named sinks' entries, opening those not open yet (all or none: a failure closes the new ones).
    Call with `_lock` held."""
    key = _settings_key(settings)
    wanted = list(dict.fromkeys(names))
    missing = [name for name in wanted if (key, name) not in _open]
    if missing:
        for name, sink in open_sinks(settings, missing).items():
            _open[(key, name)] = _Held(sink)
    return {name: _open[(key, name)] for name in wanted}


def _close_if_idle(key: str, name: str, held: _Held) -> None:
    """Close and forget `held` if nobody holds it (and it is still the pool's entry: a discarded one was
    closed already). Errors while closing must not mask a flow's outcome."""
    if _open.get((key, name)) is held and held.idle:
        del _open[(key, name)]
        with suppress(Exception):
            held.sink.close()


def get_sinks(names: Iterable[str], settings: SinkSettings) -> dict[str, Sink]:
    """The named sinks for a reader that keeps them between searches (opening those not open yet): they
    stay open, whatever flow opened them, until `release_sinks`."""
    with _lock:
        entries = _entries(names, settings)
        for held in entries.values():
            held.kept = True
        return {name: held.sink for name, held in entries.items()}


def held_sinks(names: Iterable[str], settings: SinkSettings) -> dict[str, Sink]:
    """The named sinks a flow of this process holds (`flow_sinks`): what a flow's tasks use. A sink no flow
    holds is refused, not opened: it would be opened outside the flow's store lock and never closed."""
    key = _settings_key(settings)
    with _lock:
        found = {name: _open.get((key, name)) for name in dict.fromkeys(names)}
        unheld = [name for name, held in found.items() if held is None or held.flows == 0]
        if unheld:
            raise RuntimeError(
                f"sink(s) {unheld} of generation {settings.generation!r} are not held by a flow of this "
                "process: a flow opens its stores (unichunk.engine.batches.run_stores) before its tasks use them"
            )
        return {name: held.sink for name, held in found.items() if held is not None}


@contextmanager
def flow_sinks(names: Iterable[str], settings: SinkSettings) -> Iterator[dict[str, Sink]]:
    """The sinks for one flow (or any bounded use), held for the block: each closes when its last holder
    lets go, so two flows running at once never close sinks under each other or under a reader."""
    key = _settings_key(settings)
    with _lock:
        entries = _entries(names, settings)
        for held in entries.values():
            held.flows += 1
    try:
        yield {name: held.sink for name, held in entries.items()}
    finally:
        with _lock:
            for name, held in entries.items():
                held.flows -= 1
                _close_if_idle(key, name, held)


def release_sinks(names: Iterable[str], settings: SinkSettings) -> None:
    """A reader no longer keeps the named sinks: each closes now, or when the flows using it end."""
    key = _settings_key(settings)
    with _lock:
        for name in names:
            held = _open.get((key, name))
            if held is not None:
                held.kept = False
                _close_if_idle(key, name, held)


def discard_sinks(names: Iterable[str], settings: SinkSettings) -> None:
    """Close and forget the named sinks whoever holds them: their generation is being dropped (only a
    generation no reader resolves to and no run writes can be; see `unichunk.index.generations.drop_generation`)."""
    key = _settings_key(settings)
    with _lock:
        for name in names:
            held = _open.pop((key, name), None)
            if held is not None:
                with suppress(Exception):
                    held.sink.close()


def close_all_sinks() -> None:
    with _lock:
        for held in list(_open.values()):
            with suppress(Exception):
                held.sink.close()
        _open.clear()
