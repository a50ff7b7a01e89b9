"""The CLI's exit codes, defined once: the numbers, what each means, which errors give which, and the text
that `--help` and docs/operations.md show (`tests/deployments/test_cli_exit_codes.py` checks the docs).

4 is access denied (`unichunk.access.AccessDenied`, a service's 403): the same command with a token that
may do it works, so it is neither a usage error nor a failure. 2 covers `GenerationMismatch` (settings that differ from the live index generation) because nothing is
broken and retrying will not help: the user chooses between `unichunk rebuild` and the old settings.
1 covers a named document, generation or entity that does not exist: nothing to retry as is, as `rm` of a
missing file. 130 and 143 are 128 + SIGINT and 128 + SIGTERM, what shells report for a process those
signals ended (Click's own handling of Ctrl-C would exit 1); a run stops gracefully on the first one
(`unichunk.stopping`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from pydantic import ValidationError

from unichunk.access import AccessDenied
from unichunk.errors import (
    BadLabel,
    GenerationError,
    InvalidRequest,
    NotFound,
    RetrievalError,
    SourceOverlap,
    TokenError,
    UsageError,
)


class ExitCode(IntEnum):
    DONE = 0
    NOT_ALL_RIGHT = 1
    USAGE = 2
    INFRASTRUCTURE = 3
    DENIED = 4
    GATED = 5
    INTERRUPTED = 130
    TERMINATED = 143


@dataclass(frozen=True)
class Meaning:
    code: ExitCode
    meaning: str
    examples: str


MEANINGS = (
    Meaning(ExitCode.DONE, "done", ""),
    Meaning(
        ExitCode.NOT_ALL_RIGHT,
        "not all is right",
        "a document failed; `verify` found the stores misaligned; a rebuild was refused; the document, "
        "generation or entity a command names does not exist (nothing done)",
    ),
    Meaning(
        ExitCode.USAGE,
        "nothing done: the command cannot run as given",
        "a bad option or argument, a missing path, settings that differ from the live index generation",
    ),
    Meaning(
        ExitCode.INFRASTRUCTURE,
        "infrastructure failure",
        "a store, model or service unreachable or failing, the Prefect API unreachable, a crashed run, an "
        "unexpected error",
    ),
    Meaning(
        ExitCode.DENIED,
        "access denied: the caller's token may not do this",
        "a write without `--write` rights, `status` or `verify` without `--admin` (a service's 403); a "
        "missing, unknown or revoked token is a usage error (2, a service's 401)",
    ),
    Meaning(
        ExitCode.GATED,
        "the gate kept the live generation",
        "`rebuild --gate`: the new generation retrieves worse on the questions than the live one; it is "
        "left ready beside it, the reasons printed",
    ),
    Meaning(
        ExitCode.INTERRUPTED,
        "interrupted with Ctrl-C",
        "the batch being written is finished, the run shows Cancelled; the next run does what it left",
    ),
    Meaning(ExitCode.TERMINATED, "stopped by SIGTERM", "as for Ctrl-C"),
)

# Errors that mean "the command cannot run as given"; anything else that ends a command is exit 3.
USAGE_ERRORS: tuple[type[BaseException], ...] = (
    UsageError,
    GenerationError,
    ValidationError,
    InvalidRequest,
    RetrievalError,
    SourceOverlap,
    TokenError,
    BadLabel,
)


def exit_code_for(exc: BaseException) -> ExitCode:
    """1 for something named that does not exist (here or at a service: its 404), 4 for access denied
    (here or a service's 403), 2 for a usage error (here or a service's other 4xx), 3 for everything else
    (a store, a service, Prefect, a crash, a bug)."""
    status = getattr(exc, "http_status", None)
    if isinstance(exc, AccessDenied) or status == 403:
        return ExitCode.DENIED
    if isinstance(exc, NotFound) or status == 404:
        return ExitCode.NOT_ALL_RIGHT
    if isinstance(exc, USAGE_ERRORS) or (status is not None and 400 <= status < 500):
        return ExitCode.USAGE
    return ExitCode.INFRASTRUCTURE


def help_epilog() -> str:
    """The exit codes in one paragraph, for `--help`."""
    parts = [f"{m.code.value} {m.meaning}" + (f" ({m.examples})" if m.examples else "") for m in MEANINGS]
    return "Exit codes: " + "; ".join(parts) + "."


def markdown_table() -> str:
    """The exit codes as docs/operations.md shows them."""
    rows = [f"| {m.code.value} | {m.meaning} | {m.examples} |".replace("|  |", "| |") for m in MEANINGS]
    return "\n".join(["| code | meaning | e.g. |", "|---|---|---|", *rows])
