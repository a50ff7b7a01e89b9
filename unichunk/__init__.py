"""unichunk's public face: `Pipeline` for ingesting and searching from Python, the chunking library's
types, and `__version__`. The internals are its subpackages (`unichunk.chunking`, `.sinks`, `.index`,
`.retrieval`, `.tasks`, `.engine`, `.flows`, `.deployments`: the repository's top-level folders, which the
built distribution installs inside this package); this is the one import a notebook, an app or an
adapter needs.

    from unichunk import Pipeline
    p = Pipeline()
    p.ingest("docs/"); p.search("how are deletions propagated", k=5)

Every name loads on first use: `Pipeline` brings Prefect and the flows, which `from unichunk import
ChunkingService` (the LlamaIndex node parser's need) should not pay for, and the chunking types bring the
chunker, which `unichunk.__version__` (`unichunk --version`) should not (benchmarks/README.md, "Why some
imports are lazy").
Adapters: `unichunk.integrations.llama_index`, `unichunk.integrations.langchain` (optional extras).
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

from unichunk.lazy_names import lazy_names

if TYPE_CHECKING:
    from unichunk.access import Principal
    from unichunk.chunking import (
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
    from unichunk.errors import NotFound, UsageError
    from unichunk.interface import IndexService
    from unichunk.pipeline import Pipeline
    from unichunk.results import IndexStatus
    from unichunk.retrieval.results import SearchHit, SearchResult
    from unichunk.sinks.config import SinkSettings
    from unichunk.tokens import Tokens

try:
    __version__ = metadata.version("unichunk")
except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree never installed
    __version__ = "0+unknown"

# Where each name of the face lives; each loads when first asked for (see the module docstring).
_NAMES = {
    **dict.fromkeys(
        (
            "Block",
            "Chunk",
            "ChunkingError",
            "ChunkingService",
            "ChunkStrategy",
            "Document",
            "DocumentLoadError",
            "UnichunkError",
            "load_bytes",
            "load_document",
        ),
        "unichunk.chunking",
    ),
    "IndexService": "unichunk.interface",
    "IndexStatus": "unichunk.results",
    "NotFound": "unichunk.errors",
    "UsageError": "unichunk.errors",
    "SearchHit": "unichunk.retrieval.results",
    "SearchResult": "unichunk.retrieval.results",
    "SinkSettings": "unichunk.sinks.config",
    "Pipeline": "unichunk.pipeline",
    "Principal": "unichunk.access",
    "Tokens": "unichunk.tokens",
}


__getattr__ = lazy_names(__name__, _NAMES)


__all__ = [
    "Block",
    "Chunk",
    "ChunkStrategy",
    "ChunkingError",
    "ChunkingService",
    "Document",
    "DocumentLoadError",
    "IndexService",
    "IndexStatus",
    "NotFound",
    "Pipeline",
    "Principal",
    "SearchHit",
    "SearchResult",
    "SinkSettings",
    "Tokens",
    "UnichunkError",
    "UsageError",
    "__version__",
    "load_bytes",
    "load_document",
]
