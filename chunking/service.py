"""`ChunkingService`: the one entry point the pipeline calls to chunk a document.

It resolves "auto" to a concrete strategy and sizes (`AUTO_DEFAULTS` per document kind, fitted to the
embedder), fits `auto`'s and `semantic`'s chunks to the embedder's input limit (`unichunk.chunking.embedding_fit`),
hands `semantic` the caller's embedding function, reuses chunker instances (token tables and compiled
settings are built once), and records metrics. Strategies are
imported lazily from a name -> "module:Class" registry, so a strategy's heavy dependencies load only when
it is used.
"""

from __future__ import annotations

import importlib
import threading
import time
from pathlib import PurePosixPath

from unichunk.chunking import metrics
from unichunk.chunking.base import BaseChunker, EmbedFunction, chunks_from_spans
from unichunk.chunking.config import ChunkStrategy, DocumentKind, default_strategy
from unichunk.chunking.embedding_fit import fit_spans
from unichunk.chunking.models import Chunk, Document

REGISTRY: dict[str, str] = {
    "token_window": "unichunk.chunking.token_window:TokenWindowChunker",
    "fixed_chars": "unichunk.chunking.fixed_chars:FixedCharsChunker",
    "sentence": "unichunk.chunking.sentence:SentenceChunker",
    "paragraph": "unichunk.chunking.paragraph:ParagraphChunker",
    "markdown": "unichunk.chunking.markdown:MarkdownChunker",
    "html": "unichunk.chunking.html:HtmlChunker",
    "semantic": "unichunk.chunking.semantic:SemanticChunker",
}

_MARKDOWN_MIME = {"text/markdown", "text/x-markdown"}
_MARKDOWN_EXT = {".md", ".markdown"}
_HTML_MIME = {"text/html", "application/xhtml+xml"}
_HTML_EXT = {".html", ".htm", ".xhtml"}


def chunker_class(name: str) -> type[BaseChunker]:
    """The chunker class registered under `name`, imported on first use (KeyError if unknown)."""
    module_name, _, class_name = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def document_kind(document: Document) -> DocumentKind:
    """Markdown (mime or .md/.markdown), HTML (mime or .html/.htm, or any document carrying extracted
    `blocks`), or text: plain text, PDF, email and anything unrecognised."""
    mime = (document.mime_type or "").split(";")[0].strip().lower()
    suffixes = {
        PurePosixPath(p.replace("\\", "/")).suffix.lower() for p in (document.path, document.source_id) if p
    }
    if mime in _MARKDOWN_MIME or suffixes & _MARKDOWN_EXT:
        return "markdown"
    if mime in _HTML_MIME or suffixes & _HTML_EXT or document.blocks:
        return "html"
    return "text"


def resolve_strategy(document: Document, strategy: ChunkStrategy | None = None) -> ChunkStrategy:
    """The concrete settings `document` is chunked with: the configured ones, or for "auto" the strategy
    and (where unset) sizes of `AUTO_DEFAULTS` for the document's kind."""
    strategy = strategy or default_strategy()
    return strategy if strategy.name != "auto" else strategy.for_kind(document_kind(document))


def resolve_strategy_name(document: Document, strategy: ChunkStrategy | None = None) -> str:
    """The concrete strategy for `document`: the configured one, or for "auto" one chosen by type
    (markdown -> markdown, HTML -> html, everything else -> sentence; see `AUTO_DEFAULTS`)."""
    return resolve_strategy(document, strategy).name


class ChunkingService:
    """Chunks documents; chunker instances are cached per (strategy name, settings)."""

    def __init__(self) -> None:
        self._chunkers: dict[tuple[str, ChunkStrategy], BaseChunker] = {}
        self._lock = threading.Lock()

    def chunker_for(self, document: Document, strategy: ChunkStrategy | None = None) -> BaseChunker:
        """The (cached) chunker that `chunk` would use for this document and strategy."""
        settings = resolve_strategy(document, strategy)
        key = (settings.name, settings)
        with self._lock:
            chunker = self._chunkers.get(key)
            if chunker is None:
                chunker = self._chunkers[key] = chunker_class(settings.name)(settings)
        return chunker

    def chunk(
        self, document: Document, strategy: ChunkStrategy | None = None, embed: EmbedFunction | None = None
    ) -> list[Chunk]:
        """Chunks of `document`; `strategy` None: the built-in one (`default_strategy`).

        Under `auto` and `semantic` no chunk's embedded text exceeds `strategy.embedding` (`fit_spans`); a
        strategy named explicitly is cut as configured (the vector sink warns about a chunk its embedder
        truncates). `embed` (texts -> vectors) is what `semantic` measures sentences with; the other
        strategies ignore it. It is passed per call, not kept, so a chunker never holds an embedder."""
        strategy = strategy or default_strategy()
        chunker = self.chunker_for(document, strategy)
        started = time.perf_counter()
        if embed is None:
            spans = chunker.spans(document.text, document)
        else:
            spans = chunker.embedded_spans(document.text, document, embed)
        if strategy.fits_embedder:
            spans = fit_spans(document.text, spans, strategy.embedding)
        chunks = chunks_from_spans(document, spans, strategy=chunker.name, counter=chunker.counter)
        metrics.record(chunker.name, time.perf_counter() - started, [c.token_count for c in chunks])
        return chunks


_shared: ChunkingService | None = None
_shared_lock = threading.Lock()


def shared_service() -> ChunkingService:
    """One ChunkingService per process, so every task thread reuses its cached chunkers and tokenizers."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ChunkingService()
        return _shared
