"""The exit codes are defined once (`unichunk.deployments.cli.exit_codes`): `--help` and
docs/operations.md show that definition, and each kind of error gets its code from it."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
from typer.testing import CliRunner

from unichunk.access import AccessDenied
from unichunk.deployments.cli.exit_codes import MEANINGS, ExitCode, exit_code_for, help_epilog, markdown_table
from unichunk.deployments.cli.main import app
from unichunk.deployments.cli.service_client import (
    ServiceDenied,
    ServiceError,
    ServiceNotFound,
    ServiceRefused,
)
from unichunk.errors import (
    BadLabel,
    GenerationMismatch,
    NotFound,
    SinkError,
    TokenError,
    UnichunkError,
    Unreachable,
    UsageError,
)
from unichunk.settings import ChunkStrategy

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_the_docs_show_the_exit_codes_as_defined() -> None:
    assert markdown_table() in DOCS.read_text(encoding="utf-8")


def test_help_shows_every_exit_code() -> None:
    shown = CliRunner().invoke(app, ["--help"], terminal_width=4000)
    assert shown.exit_code == 0
    text = " ".join(shown.output.replace("│", " ").split())
    assert " ".join(help_epilog().split()) in text
    assert [m.code for m in MEANINGS] == list(ExitCode)


def test_each_kind_of_error_gets_its_code() -> None:
    try:
        ChunkStrategy(name="nope")  # type: ignore[arg-type]
    except ValidationError as exc:
        invalid = exc
    cases = {
        NotFound("no such document: x"): 1,
        ServiceNotFound(404, "no such document: x"): 1,
        UsageError("--pattern and --source go with a PATH"): 2,
        ServiceRefused(401, "bad token"): 2,
        GenerationMismatch("other settings than the live generation"): 2,
        invalid: 2,
        TokenError("no such token: x"): 2,
        BadLabel("bad label 'a b'"): 2,
        AccessDenied("status is for admins"): 4,
        ServiceDenied(403, "writes need a token that may write"): 4,
        SinkError("graph", "cannot open the store"): 3,
        Unreachable("cannot reach the Prefect API"): 3,
        ServiceError(500, "internal"): 3,
        RuntimeError("a bug"): 3,
    }
    assert {type(e).__name__: exit_code_for(e) for e in cases} == {
        type(e).__name__: code for e, code in cases.items()
    }
    assert all(
        isinstance(e, UnichunkError) for e in cases if not isinstance(e, RuntimeError | ValidationError)
    )
