"""unichunk's chunking library: documents in, chunks with exact offsets and deterministic IDs out.

Kept light on import (no bs4, pypdf or LlamaIndex): parsers load when a file of their kind is loaded.
"""

from chunking.config import ChunkStrategy
from chunking.errors import (
    ChunkingError,
    DocumentLoadError,
    EmptyDocumentError,
    UndecodableTextError,
    UnsupportedFormatError,
)
from chunking.loaders import load_bytes, load_document
from chunking.models import Block, Chunk, Document
from chunking.neighbors import embed_text, expand_neighbors
from chunking.service import ChunkingService, resolve_strategy_name
from chunking.token_window import should_chunk

__all__ = [
    "Block",
    "Chunk",
    "ChunkStrategy",
    "ChunkingError",
    "ChunkingService",
    "Document",
    "DocumentLoadError",
    "EmptyDocumentError",
    "UndecodableTextError",
    "UnsupportedFormatError",
    "embed_text",
    "expand_neighbors",
    "load_bytes",
    "load_document",
    "resolve_strategy_name",
    "should_chunk",
]
