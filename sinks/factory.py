"""Open the configured sinks by name, so callers never build stores (or start servers) by hand.

The settings name the generation whose stores to open; this module never decides which generation that
is (`unichunk.index.generations` does, for everyone).

Each store's module is imported when that store is first opened, not when this module is: each store's
clients are slow to import (qdrant-client most), and commands such as `unichunk status` open no store at
all. The vector sink's opener imports only the engine the settings pick
(`unichunk.sinks.vectors.sink.open_vector_sink`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from unichunk.chunking.errors import UnichunkError
from unichunk.sinks.base import SINK_NAMES, InvalidRequest, Sink, SinkError
from unichunk.sinks.config import SinkSettings

# name -> (module, opener): the opener, a function or a class's `from_settings`, takes the settings. The
# vectors' opener picks the engine (qdrant-edge, local mode or a server) from them.
_STORES: dict[str, tuple[str, str]] = {
    "vectors": ("unichunk.sinks.vectors.sink", "open_vector_sink"),
    "keywords": ("unichunk.sinks.keywords.bm25", "BM25Sink.from_settings"),
    "graph": ("unichunk.sinks.graph.sink", "KnowledgeGraphSink.from_settings"),
}


def open_sink(name: str, settings: SinkSettings) -> Sink:
    """One sink of the generation `settings` names.

    A store that cannot be opened raises SinkError naming it (`[graph] cannot open the store: ...`): a
    client library's own error (redis' ConnectionError, say) names a host and port, not which of our
    stores is down."""
    if name not in _STORES:
        raise InvalidRequest(name, f"unknown sink {name!r}; choose from {list(SINK_NAMES)}")
    module, opener_path = _STORES[name]
    opener = importlib.import_module(module)
    for attribute in opener_path.split("."):
        opener = getattr(opener, attribute)
    try:
        return opener(settings)
    except UnichunkError:
        raise  # ours already says what failed
    except Exception as exc:
        raise SinkError(name, f"cannot open the store: {type(exc).__name__}: {exc}") from exc


def open_sinks(settings: SinkSettings, names: Iterable[str] = SINK_NAMES) -> dict[str, Sink]:
    """Open each named sink of the generation `settings` names; on any failure, close what was opened."""
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in _STORES]
    if unknown:
        raise InvalidRequest(",".join(unknown), f"unknown sink(s) {unknown}; choose from {list(SINK_NAMES)}")
    opened: dict[str, Sink] = {}
    try:
        for name in wanted:
            opened[name] = open_sink(name, settings)
    except BaseException:
        for sink in opened.values():
            sink.close()
        raise
    return opened
