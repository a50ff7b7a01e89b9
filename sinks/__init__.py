"""The three stores every chunk fans out to, behind one write interface and one read interface.

- `unichunk.sinks.base`: the write side (`Sink`: prepare, then write) and the read side (`ChunkSearch`,
  `GraphReader`) with the one chunk record they return (`StoredChunk`);
- `unichunk.sinks.vectors`: Qdrant and the embedders; `unichunk.sinks.keywords`: BM25; `unichunk.sinks.graph`: the knowledge graph;
- `unichunk.sinks.factory.open_sinks` opens them by name, `unichunk.sinks.pool` shares open ones within a process.

This package face stays light on import (the stores load Qdrant, bm25s and the graph clients): import a
store's own package when you need it.
"""

from unichunk.sinks.base import (
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
from unichunk.sinks.config import SinkSettings

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
