"""The errors of index generations, apart from the registry that raises them: the CLI maps them to its
exit codes on every failed command, and must not load the records' database layer to do so."""

from __future__ import annotations

from unichunk.chunking.errors import UnichunkError


class GenerationError(UnichunkError):
    """A generation operation that must not happen (switching to a missing one, rebuilding the live one)."""


class GenerationMismatch(GenerationError):
    """A run's settings are not the live generation's: only `rebuild` may write them."""


class SourceOverlap(UnichunkError):
    """A source whose files another recorded source already covers (one folder inside the other, or the same
    folder under another name): ingesting it would store those files twice, under two document IDs."""


class TokenError(UnichunkError, ValueError):
    """A token request the caller must change: a bad or taken name, no such token (`unichunk.index.tokens`)."""
