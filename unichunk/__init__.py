"""unichunk's public face: `Pipeline` for ingesting and searching from Python, the chunking library's
types, and `__version__`. Internals stay in their packages (`chunking`, `sinks`, `index`, `retrieval`,
`tasks`, `flows`, `deployments`); this is the one import a notebook, an app or an adapter needs.

    from unichunk import Pipeline
    p = Pipeline()
    p.ingest("docs/"); p.search("how are deletions propagated", k=5)

`Pipeline` loads on first use: it brings Prefect and the flows (about 3 s on the reference machine), which
`from unichunk import ChunkingService` (the LlamaIndex node parser's need) should not pay for.
Adapters: `unichunk.integrations.llama_index`, `unichunk.integrations.langchain` (optional extras).
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

from unichunk.own_packages import load_own_packages

load_own_packages()  # before any import of ours: see unichunk.own_packages

from chunking import (  # noqa: E402 - after load_own_packages, on purpose
    Block,
    Chunk,
    ChunkingError,
    ChunkingService,
    ChunkStrategy,
    Document,
    DocumentLoadError,
    UnichunkError,
    load_bytes,
    load_document,
)
from retrieval.results import SearchHit, SearchResult  # noqa: E402
from sinks.config import SinkSettings  # noqa: E402

if TYPE_CHECKING:
    from unichunk.pipeline import Pipeline

try:
    __version__ = metadata.version("unichunk")
except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """`unichunk.Pipeline`, imported when first asked for (see the module docstring)."""
    if name == "Pipeline":
        from unichunk.pipeline import Pipeline

        return Pipeline
    raise AttributeError(f"module 'unichunk' has no attribute {name!r}")


__all__ = [
    "Block",
    "Chunk",
    "ChunkStrategy",
    "ChunkingError",
    "ChunkingService",
    "Document",
    "DocumentLoadError",
    "Pipeline",
    "SearchHit",
    "SearchResult",
    "SinkSettings",
    "UnichunkError",
    "__version__",
    "load_bytes",
    "load_document",
]
