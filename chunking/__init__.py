"""unichunk's chunking library: sources list documents, loaders read them, strategies cut them into chunks
with exact offsets and deterministic IDs. Plain Python: no Prefect, no stores.

Kept light on import (no bs4, pypdf or LlamaIndex): parsers load when a file of their kind is loaded.

Every name below loads on first use (`lazy_loader`): `import unichunk.chunking.errors` or
`unichunk.chunking.config` must not pay for numpy, pathspec, tiktoken and the loaders, which the CLI's service
path does not need.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "config": ["ChunkStrategy"],
        "errors": [
            "ChunkingError",
            "DocumentLoadError",
            "EmptyDocumentError",
            "UndecodableTextError",
            "UnichunkError",
            "UnsupportedFormatError",
        ],
        "loaders": ["load_bytes", "load_document"],
        "models": ["Block", "Chunk", "Document"],
        "service": ["ChunkingService", "resolve_strategy_name"],
        "sources": ["DirectorySource", "PathsSource", "Source", "SourceItem", "default_source_name"],
        "token_window": ["should_chunk"],
    },
)
