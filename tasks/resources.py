"""Process-wide resources the tasks share: the open sinks, the chunking service and the run settings.

Sinks hold clients, models and file locks (Qdrant local mode allows one client per directory), so each is
opened once per process and shared by the task threads. A flow opens what it needs through `flow_sinks`
and closes at its end only what it opened itself, so a long-lived process that opened them first (serve)
keeps them, and a nested flow does not close its parent's sinks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from chunking.config import ChunkStrategy
from chunking.ids import sha256_hex
from sinks.config import SinkSettings
from sinks.generations import live_settings
from tasks.chunk_store import ChunkStore
from tasks.status import StatusStore

if TYPE_CHECKING:
    from chunking.service import ChunkingService
    from sinks.base import Sink

ALL_SINKS: tuple[str, ...] = ("vectors", "keywords", "graph")

_lock = threading.RLock()
_open: dict[tuple[str, str], Sink] = {}
_users: dict[tuple[str, str], int] = {}  # flows currently using each open sink
_flow_opened: set[tuple[str, str]] = set()  # sinks opened by a flow (closed when no flow uses them)
_service: ChunkingService | None = None


def _settings_key(settings: SinkSettings) -> str:
    # Secrets are masked in the dump, which is fine: the key only tells configurations apart.
    return settings.model_dump_json()


def acquire_sinks(names: Iterable[str], settings: SinkSettings) -> tuple[dict[str, Sink], list[str]]:
    """The named sinks, opening those not open yet; also returns the names this call opened.

    Settings not pinned to a generation mean the live one, resolved here: after a cutover, a long-lived
    process (serve, the search API) gets the new generation's sinks on its next call.
    """
    from sinks.factory import open_sinks  # lazy: importing the sinks loads torch, spaCy, clients

    settings = live_settings(settings)
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
    key = _settings_key(live_settings(settings))
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
    settings = live_settings(settings)
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


def chunking_service() -> ChunkingService:
    """One ChunkingService per process (it caches chunkers and tokenizers)."""
    global _service
    from chunking.service import ChunkingService

    with _lock:
        if _service is None:
            _service = ChunkingService()
        return _service


def index_settings(settings: SinkSettings) -> dict[str, object]:
    """The sink settings that change what gets stored (with the chunking settings: an index generation)."""
    return {
        "embedder": settings.embedder,
        "embedding_model": settings.embedding_model if settings.embedder == "openai" else None,
        "embedding_dimensions": settings.embedding_dimensions if settings.embedder == "openai" else None,
        "qdrant_collection": settings.qdrant_collection,
        "bm25": [settings.bm25_stemming, settings.bm25_stopwords],
        "graph_name": settings.graph_name,
        "extractor": settings.extractor,
        "llm_model": settings.llm_model if settings.extractor == "llm" else None,
    }


@dataclass(frozen=True)
class RunConfig:
    """Everything a task needs to know about its run, small enough to pass to every task."""

    strategy: ChunkStrategy
    settings: SinkSettings
    sinks: tuple[str, ...] = ALL_SINKS

    @cached_property
    def chunk_fingerprint(self) -> str:
        """Keys the chunk store: only chunking settings decide the chunks."""
        return self.strategy.fingerprint()

    @cached_property
    def generation_fingerprint(self) -> str:
        """What an index generation is: chunking, embedder, extractor and analyzer settings together."""
        return sha256_hex(json.dumps(self.describe(), sort_keys=True))[:16]

    @cached_property
    def fingerprint(self) -> str:
        """Stored in the status table: the generation plus the sinks a run wrote decide if a row is current."""
        return sha256_hex(f"{self.generation_fingerprint}:{sorted(set(self.sinks))}")[:16]

    @property
    def generation_id(self) -> str:
        from sinks.generations import generation_id_for

        return generation_id_for(self.generation_fingerprint)

    def describe(self) -> dict[str, object]:
        """The settings behind the generation fingerprint, readable (shown by `unichunk status`)."""
        return {
            "chunking": self.strategy.model_dump(mode="json"),
            "chunk_fingerprint": self.chunk_fingerprint,  # also covers the strategies' built-in defaults
            **index_settings(self.settings),
        }

    def pinned(self, generation_id: str | None = None) -> RunConfig:
        """This run writing to one generation's stores (its own by default)."""
        from sinks.generations import settings_for

        return replace(self, settings=settings_for(self.settings, generation_id or self.generation_id))

    def status_store(self, *, readonly: bool = False) -> StatusStore:
        return StatusStore.in_data_dir(
            self.settings.data_dir, readonly=readonly, generation=self.settings.generation
        )

    def chunk_store(self) -> ChunkStore:
        return ChunkStore.in_data_dir(self.settings.data_dir)

    def open_sinks(self) -> dict[str, Sink]:
        return get_sinks(self.sinks, self.settings)
