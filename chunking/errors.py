"""Typed errors, so the pipeline can fail one document with a clear message and carry on with the rest.

`UnichunkError` is the root of every error unichunk raises on purpose, in every package: catching it
catches a refused input, a failed store or a refused index operation, and never a bug. It lives here
because `chunking` is the package every other one builds on. Each concern subclasses it once:
`ChunkingError` (here), `unichunk.sinks.base.SinkError`, `unichunk.index.errors.GenerationError`,
`unichunk.errors.UsageError` and the others docs/design.md lists ("Errors and settings").
"""

from __future__ import annotations

from unichunk.chunking.names import storable_name


class UnichunkError(Exception):
    """Base class of every error unichunk raises on purpose."""


class ChunkingError(UnichunkError):
    """Base class for every error the chunking library raises on purpose."""


class DocumentLoadError(ChunkingError):
    """A source file could not be turned into text. `source` names the document (its path relative to the
    source root, or its ID). Both are kept as `storable_name` writes them, so the message can be stored and
    printed whatever bytes the file's name holds."""

    def __init__(self, source: str, reason: str) -> None:
        source, reason = storable_name(source), storable_name(reason)
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class DocumentTooLarge(DocumentLoadError):
    """The document is over the size limit (`UNICHUNK_MAX_DOCUMENT_BYTES`): the limit's refusal, not the
    file's fault, so a raised limit tries it again."""

    def __init__(self, source: str, reason: str, *, size: int, limit: int) -> None:
        super().__init__(source, reason)
        self.size = size
        self.limit = limit


class UnsupportedFormatError(DocumentLoadError):
    """The file is of a kind we do not read (binary, image, executable, unknown extension)."""


class UndecodableTextError(DocumentLoadError):
    """The bytes are not valid text in any encoding we accept (UTF-8, UTF-8/16/32 with BOM)."""


class EmptyDocumentError(DocumentLoadError):
    """The document has no text to chunk (empty, whitespace only, or a PDF without a text layer)."""


class DamagedEmailError(DocumentLoadError):
    """An e-mail part does not decode: its base64 is damaged, its charset unknown to Python and not detected,
    or its bytes are not text in the charset it declares. Stored, it would be garbage (U+FFFD, mojibake)."""
