"""Typed errors, so the pipeline can fail one document with a clear message and carry on with the rest."""

from __future__ import annotations


class ChunkingError(Exception):
    """Base class for every error the chunking library raises on purpose."""


class DocumentLoadError(ChunkingError):
    """A source file could not be turned into text. `source` names the document (path or ID)."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class UnsupportedFormatError(DocumentLoadError):
    """The file is of a kind we do not read (binary, image, executable, unknown extension)."""


class UndecodableTextError(DocumentLoadError):
    """The bytes are not valid text in any encoding we accept (UTF-8, UTF-8/16/32 with BOM)."""


class EmptyDocumentError(DocumentLoadError):
    """The document has no text to chunk (empty, whitespace only, or a PDF without a text layer)."""
