"""The three stores every chunk fans out to, behind one write interface and one read interface.

- `sinks.base`: the write side (`Sink`: prepare, then write) and the read side (`ChunkSearch`,
  `GraphReader`) with the one chunk record they return (`StoredChunk`);
- `sinks.vectors`: Qdrant and the embedders; `sinks.keywords`: BM25; `sinks.graph`: the knowledge graph;
- `sinks.factory.open_sinks` opens them by name, `sinks.pool` shares open ones within a process.

This package face stays light on import (the stores load Qdrant, bm25s and the graph clients): import a
store's own package when you need it.
"""

from sinks.base import (
    SINK_NAMES,
    ChunkSearch,
    GraphContext,
    GraphReader,
    InvalidRequest,
    ScoredChunk,
    SearchFilter,
    Sink,
    SinkError,
    SinkName,
    StoredChunk,
)
from sinks.config import SinkSettings

__all__ = [
    "SINK_NAMES",
    "ChunkSearch",
    "GraphContext",
    "GraphReader",
    "InvalidRequest",
    "ScoredChunk",
    "SearchFilter",
    "Sink",
    "SinkError",
    "SinkName",
    "SinkSettings",
    "StoredChunk",
]
