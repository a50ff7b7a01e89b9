"""The generation errors, apart from the registry that raises them: the CLI tells a usage error by them
(`deployments.cli.exit_code_for`) and must not import the registry's database layer (SQLAlchemy) to do
so, since a command a running service answered imports none of it."""

from __future__ import annotations

from chunking.errors import UnichunkError


class GenerationError(UnichunkError):
    """A generation operation that must not happen (switching to a missing one, rebuilding the live one)."""


class GenerationMismatch(GenerationError):
    """A run's settings are not the live generation's: only `rebuild` may write them."""
