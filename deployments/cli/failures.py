"""How a command that cannot finish ends: one line, `error: <cause>`, and the exit code of its kind
(`unichunk.deployments.cli.exit_codes`), instead of a traceback; UNICHUNK_DEBUG=1 shows the traceback.

A pydantic error names where the bad value came from: the option (`--strategy`) for a field given as one,
else the variable (`UNICHUNK_EMBEDDER`) of the settings model it was read from.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import typer
from pydantic import ValidationError

from unichunk.deployments.cli.console import fail
from unichunk.deployments.cli.exit_codes import ExitCode, exit_code_for
from unichunk.deployments.settings import ServiceSettings
from unichunk.errors import UnichunkError, UsageError
from unichunk.settings import ChunkStrategy, SinkSettings
from unichunk.stopping import RunInterrupted, exit_status, leave

F = TypeVar("F", bound=Callable[..., Any])


def one_line(exc: BaseException) -> str:
    """The cause in one line: ours and OS errors say it themselves, anything else is named by its type."""
    if isinstance(exc, ValidationError):
        return validation_line(exc)
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(exc, UnichunkError | OSError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# The settings models read from the environment, by the name pydantic gives their errors: an error in a
# field nobody passed as an option came from the variable `<prefix><FIELD>`.
SETTINGS_MODELS: dict[str, tuple[type[Any], str]] = {
    "ChunkStrategy": (ChunkStrategy, "UNICHUNK_CHUNK_"),
    "SinkSettings": (SinkSettings, "UNICHUNK_"),
    "ServiceSettings": (ServiceSettings, "UNICHUNK_"),
}
_SECRET_FIELD = re.compile(r"key|password|secret|token", re.IGNORECASE)


def validation_line(exc: ValidationError, options: Mapping[str, str] | None = None) -> str:
    """A pydantic error in one line that names where the bad value came from: the CLI option for a field in
    `options` (field -> `--option`), else the environment variable of a settings model, e.g.
    `--strategy: 'foo' is not one of auto, token_window, ...` or `UNICHUNK_EMBEDDER: 'x' is not one of ...`."""
    options = options or {}
    model, prefix = SETTINGS_MODELS.get(exc.title, (None, None))
    errors = exc.errors()
    first = errors[0]
    path = [str(part) for part in first["loc"] if not isinstance(part, int)]  # list indices say nothing

    def name_of(field: str) -> str | None:
        if field in options:
            return options[field]
        if prefix and model is not None and field in model.model_fields:
            return f"{prefix}{field.upper()}"
        return None

    where = (name_of(path[0]) or ".".join(path)) if path else None
    what = _explain(first, secret=bool(path and _SECRET_FIELD.search(path[-1])))
    if not path and model is not None:  # a model-level check names fields in its text: name them as set
        fields = "|".join(sorted(model.model_fields, key=len, reverse=True))
        what = re.sub(rf"\b({fields})\b", lambda m: name_of(m[1]) or m[1], what)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {what}{more}" if where else f"{what}{more}"


def _explain(error: Mapping[str, Any], *, secret: bool = False) -> str:
    """What is wrong with the value, in words: the choices of a literal, a validator's own message, or
    pydantic's message with the value given (never the value of a key, password or secret)."""
    kind, value, message = error["type"], error.get("input"), str(error["msg"])
    shown = repr(value) if isinstance(value, str | int | float | bool) and not secret else None
    if kind in ("literal_error", "enum"):
        choices = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        if choices and shown:
            return f"{shown} is not one of {', '.join(choices)}"
    if kind in ("value_error", "assertion_error"):
        return (
            message.split(", ", 1)[1]
            if message.startswith(("Value error, ", "Assertion failed, "))
            else message
        )
    text = message[:1].lower() + message[1:]
    return f"{text} (got {shown})" if shown and kind != "missing" else text


@contextlib.contextmanager
def option_errors(**fields: str | None) -> Iterator[None]:
    """Around building settings or flow parameters from options: a ValidationError inside becomes a usage
    error naming the option of each field given (`name="--strategy"`; None: not given, so the variable)."""
    try:
        yield
    except ValidationError as exc:
        given = {field: option for field, option in fields.items() if option is not None}
        raise UsageError(validation_line(exc, given)) from None


def debug() -> bool:
    """UNICHUNK_DEBUG=1; an invalid ServiceSettings must not turn a one-line error into a traceback."""
    try:
        return ServiceSettings().debug
    except ValidationError:
        return os.environ.get("UNICHUNK_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def friendly_errors(fn: F) -> F:
    """One line, `error: <cause>`, instead of a traceback, and the exit code of its kind (2 or 3, see the
    module docstring). UNICHUNK_DEBUG=1 shows the traceback instead."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:  # Click would say "Aborted!" and exit 1, as if a document had failed
            if debug():
                raise
            fail(("interrupted", "red"))
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        except RunInterrupted as exc:  # a run stopped by the first Ctrl-C or SIGTERM (`unichunk.stopping`)
            fail(("stopped:", "yellow"), " ", str(exc).split(": ", 1)[-1])
            leave(exit_status(exc.signum))  # at once: no teardown, no load or embedding call waited for
            raise typer.Exit(exit_status(exc.signum)) from None
        except Exception as exc:
            if debug():
                raise
            fail(("error:", "red"), " ", one_line(exc))
            raise typer.Exit(exit_code_for(exc)) from None

    return wrapper  # type: ignore[return-value]
