"""Where the CLI prints, and how: everything that comes from data (file names, source IDs, error texts,
queries) literally, styling on our own words only.

The consoles interpret no Rich markup and no emoji codes and highlight nothing, so `[red]x[bold] y.txt`
or an error's `[vectors]` prints as it is, one line each. Tables are Rich tables on a terminal; in a pipe
or a file they are tab-separated lines, so no value (a long document ID) is cut or wrapped to fit a
width nobody reads them at.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.control import Control
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

# What would break a line or move the cursor: C0 and C1 controls, DEL, the Unicode line separators; and lone
# surrogates (a name's undecodable bytes, unprintable as UTF-8).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def literal(text: str) -> str:
    """`text` for one terminal line: each control character written as Python writes it in a string literal
    (a newline as `\\n`, ESC as `\\x1b`), so a file name holding one prints on one line and moves no cursor;
    everything else as it is."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)


console = Console(markup=False, emoji=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, markup=False, emoji=False, highlight=False, soft_wrap=True)
# On a terminal a long line (a run's summary, a stop's line) is wrapped between words, as the terminal would
# cut it mid-word at its edge; in a pipe or a file it stays one whole line, for grep and for scripts.
for _console in (console, err_console):
    _console.soft_wrap = not _console.is_terminal


def fail(*parts: str | tuple[str, str]) -> None:
    err_console.print(Text.assemble(*parts))


def print_failed(name: str, error: str) -> None:
    console.print(Text.assemble("  ", ("failed", "red"), f"  {literal(name)}: {literal(error)}"))


def print_json(data: Any) -> None:
    """`--json`: one JSON document on stdout, and nothing else there. ASCII-escaped, so any file name
    (undecodable bytes included) prints on any terminal encoding and parses back exactly."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A table: drawn on a terminal; tab-separated lines, header first, when piped (whole values). A cell
    is written `literal`ly: a tab or a newline in a file name neither adds a column nor a row."""
    rows = [[literal(cell) for cell in row] for row in rows]
    if not console.is_terminal:  # written as is: Rich would expand the tabs
        console.file.write("".join("\t".join(line) + "\n" for line in (headers, *rows)))
        console.file.flush()
        return
    # Nothing cut on a narrow terminal: the first column (the row's ID: document, generation, token, sink)
    # stays whole on one line, to copy into `delete` or `generations switch`; the others fold, where Rich
    # would cut them with `…`.
    table = Table(*headers)
    for position, column in enumerate(table.columns):
        column.overflow = "fold"
        if position == 0:
            column.no_wrap = True
            column.min_width = max((len(row[0]) for row in rows if row), default=0)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _speed(task: Task) -> float | None:
    """The task's speed over the last seconds (Rich's: from its second step on), else from its stage's
    start to its last step (`base`: the count it began with, as reused vectors are not the model's pace):
    so the first embedding call of a run already gives a rate and an ETA, half a minute earlier on a
    loaded machine, which hold still until the next step."""
    speed = task.finished_speed or task.speed
    if speed is not None:
        return speed
    moved = task.completed - task.fields.get("base", 0)
    took = task.fields.get("moved_at", 0.0) - task.fields.get("since", 0.0)  # to its last step, not now
    return moved / took if moved > 0 and took > 0 else None


class RateColumn(ProgressColumn):
    """`12.5 chunks/s`: the task's speed (`_speed`), in its own unit (its description)."""

    def render(self, task: Task) -> Text:
        speed = _speed(task)
        if speed is None:
            return Text("", style="dim")
        return Text(f"{speed:.1f} {task.description}/s", style="dim")


class EtaColumn(TimeRemainingColumn):
    """Rich's time remaining, from `_speed` where Rich has no speed yet."""

    def render(self, task: Task) -> Text:
        speed = _speed(task)
        if task.time_remaining is None and task.total is not None and speed:
            minutes, seconds = divmod(int(max(0.0, task.total - task.completed) / speed), 60)
            hours, minutes = divmod(minutes, 60)
            return Text(f"{hours:d}:{minutes:02d}:{seconds:02d}", style="progress.remaining")
        return super().render(task)


def progress(get_time: Callable[[], float] | None = None) -> Progress:
    # The ETA and the rate are taken over the last 2 minutes: a batch's embedding calls may be half a
    # minute apart on a loaded machine, and a shorter window would hold one step only (no rate at all).
    return Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta", style="dim"),
        EtaColumn(),
        console=err_console,
        transient=True,
        speed_estimate_period=120.0,
        get_time=get_time,
    )


class ProgressBar:
    """The bar of the flow run in progress, fed by the Pipeline's progress callback (`update`); drawn on
    a terminal only (in a pipe or a log file a transient bar leaves nothing useful, only an empty line)."""

    def __init__(self) -> None:
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    @contextlib.contextmanager
    def shown(self) -> Iterator[None]:
        if not err_console.is_terminal:
            yield
            return
        with progress() as bar:
            self._bar, self._task = bar, bar.add_task("documents", total=None)
            try:
                yield
            finally:
                self._bar = self._task = None

    def abandon(self, line: str) -> None:
        """`line` on stderr as the process leaves without closing the bar (a second Ctrl-C exits with
        `os._exit`), after giving the terminal back: the cursor the bar hid shown again, and a new line
        after the bar. Written directly: this runs in a signal handler, so no lock of Rich's is taken."""
        if self._bar is not None:
            line = Control.show_cursor(True).segment.text + "\n" + line
        err_console.file.write(line + "\n")
        err_console.file.flush()

    def update(self, stage: str, done: int, total: int) -> None:
        """Move the bar; a new stage (documents, then chunks) starts it afresh, so its rate and ETA are
        that stage's. The chunk total is an estimate the run refines, so it may move too. Once chunks are
        counted, documents are not shown again (they move in steps of a whole batch)."""
        if self._bar is None or self._task is None:
            return
        shown = self._bar.tasks[0].description
        if shown == "chunks" and stage == "documents":
            return
        now = self._bar.get_time()
        if shown != stage:  # the stage's own clock and count: its rate is measured from here
            self._bar.reset(self._task, description=stage, completed=done, total=total, base=done, since=now)
        moved = done != self._bar.tasks[0].completed
        self._bar.update(self._task, completed=done, total=total, **({"moved_at": now} if moved else {}))
