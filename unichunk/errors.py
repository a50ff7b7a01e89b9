"""The errors every interface meets, from one root: `UnichunkError` (`unichunk.chunking.errors`).

Each concern has one subclass. The stores', the index's and retrieval's own errors live with them and are
re-exported here, so an interface (the CLI, the HTTP API, the MCP server) catches and classifies errors
without importing the layers that raise them. The application layer adds what only a caller can get
wrong (`UsageError`, `NotFound`) and what it cannot reach (`Unreachable`).
"""

from __future__ import annotations

from unichunk.chunking.access_labels import BadLabel
from unichunk.chunking.errors import ChunkingError, DocumentLoadError, UnichunkError
from unichunk.index.errors import GenerationError, GenerationMismatch, SourceOverlap, TokenError
from unichunk.retrieval.ranking import RetrievalError
from unichunk.sinks.base import InvalidRequest, SinkError
from unichunk.sinks.disk_space import DiskFull
from unichunk.sinks.outage import StoreUnreachable


class UsageError(UnichunkError, ValueError):
    """A request the caller must change: a bad argument, a missing path, options that do not go together."""


class NotFound(UsageError):
    """The document, chunk or generation a request names does not exist."""


class StoreBusy(UnichunkError):
    """A flow run holds the embedded vector store longer than a search may wait (`unichunk.warm_stores`)."""


class Unreachable(UnichunkError):
    """A service the settings name (the Prefect API, a running unichunk service) does not answer."""


__all__ = [
    "BadLabel",
    "ChunkingError",
    "DiskFull",
    "DocumentLoadError",
    "GenerationError",
    "GenerationMismatch",
    "InvalidRequest",
    "NotFound",
    "RetrievalError",
    "SinkError",
    "SourceOverlap",
    "StoreBusy",
    "StoreUnreachable",
    "TokenError",
    "UnichunkError",
    "Unreachable",
    "UsageError",
]
