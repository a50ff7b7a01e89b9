"""Open the configured sinks by name, so callers never build stores (or start servers) by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sinks.base import Sink
from sinks.config import SinkSettings
from sinks.generations import live_settings

SINK_NAMES: tuple[str, ...] = ("vectors", "keywords", "graph")


def _vectors(settings: SinkSettings) -> Sink:
    from sinks.qdrant import QdrantSink

    return QdrantSink.from_settings(settings)


def _keywords(settings: SinkSettings) -> Sink:
    from sinks.bm25 import BM25Sink

    return BM25Sink(settings)


def _graph(settings: SinkSettings) -> Sink:
    from sinks.graph import KnowledgeGraphSink

    return KnowledgeGraphSink.from_settings(settings)


# Imported lazily: each sink pulls in heavy libraries (torch, spaCy, qdrant) only when opened.
_OPENERS: dict[str, Callable[[SinkSettings], Sink]] = {
    "vectors": _vectors,
    "keywords": _keywords,
    "graph": _graph,
}


def open_sinks(settings: SinkSettings | None = None, names: Iterable[str] = SINK_NAMES) -> dict[str, Sink]:
    """Open each named sink from `settings` (env by default); on any failure, close what was opened.

    Settings not pinned to an index generation open the live one (see `sinks.generations`).
    """
    settings = live_settings(settings or SinkSettings())
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in _OPENERS]
    if unknown:
        raise ValueError(f"unknown sink(s) {unknown}; choose from {list(SINK_NAMES)}")
    opened: dict[str, Sink] = {}
    try:
        for name in wanted:
            opened[name] = _OPENERS[name](settings)
    except BaseException:
        for sink in opened.values():
            sink.close()
        raise
    return opened
