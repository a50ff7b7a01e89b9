"""unichunk's chunking library: sources list documents, loaders read them, strategies cut them into chunks
with exact offsets and deterministic IDs. Plain Python: no Prefect, no stores.

Kept light on import (no bs4, pypdf or LlamaIndex): parsers load when a file of their kind is loaded.
"""

from chunking.config import ChunkStrategy
from chunking.errors import (
    ChunkingError,
    DocumentLoadError,
    EmptyDocumentError,
    UndecodableTextError,
    UnichunkError,
    UnsupportedFormatError,
)
from chunking.loaders import load_bytes, load_document
from chunking.models import Block, Chunk, Document
from chunking.service import ChunkingService, resolve_strategy_name
from chunking.sources import DirectorySource, PathsSource, Source, SourceItem, default_source_name
from chunking.token_window import should_chunk

__all__ = [
    "Block",
    "Chunk",
    "ChunkStrategy",
    "ChunkingError",
    "ChunkingService",
    "DirectorySource",
    "Document",
    "DocumentLoadError",
    "EmptyDocumentError",
    "PathsSource",
    "Source",
    "SourceItem",
    "UndecodableTextError",
    "UnichunkError",
    "UnsupportedFormatError",
    "default_source_name",
    "load_bytes",
    "load_document",
    "resolve_strategy_name",
    "should_chunk",
]
