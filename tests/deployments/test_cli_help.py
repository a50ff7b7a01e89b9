"""Every `--help` reads whole in an 80-column terminal: no line wider than the terminal, every option named
in full, every help text shown whole (nothing cut with an ellipsis), and a flag shown as a flag.

Typer's Rich help did none of this at 80 columns: its option tables squeezed the help column to a few
words and cut option names and words with `…` (`--max-document-lo…`, `UNICHUNK_CHUNK_N…`), kept the
docstrings' source line breaks as hard breaks in the middle of its reflowed lines, and showed every flag as
taking a value (`--json <bool>`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from unichunk.deployments.cli.main import app

WIDTH = 80


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command, group and subcommand of the CLI, by its words (`typer.main.get_command`'s tree)."""
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _squeezed(text: str) -> str:
    """`text` without any whitespace: a help text wrapped anywhere (a hyphen included) still matches."""
    return "".join(text.split())


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda path: " ".join(path) or "unichunk")
def test_help_reads_whole_at_80_columns(path: tuple[str, ...]) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=WIDTH, env={"COLUMNS": str(WIDTH)})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert not [line for line in lines if len(line) > WIDTH], shown.output
    assert "…" not in shown.output, shown.output
    whole = _squeezed(shown.output)
    command = COMMANDS[path]
    if path:  # a group's list shortens its commands' help; each command's own page shows it whole
        assert _squeezed(command.help or "") in whole, shown.output
    for param in command.params:
        names = [name for name in param.opts + param.secondary_opts if name.startswith("--")]
        assert all(name in shown.output for name in names), (names, shown.output)
        assert _squeezed(getattr(param, "help", None) or "") in whole, (param.name, shown.output)
        if getattr(param, "is_flag", False):
            shown_line = next(line for line in lines if line.lstrip().startswith(param.opts[-1]))
            assert "<" not in shown_line.split("  ")[0], shown_line  # `--json`, not `--json <bool>`
