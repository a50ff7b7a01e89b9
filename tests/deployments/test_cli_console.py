"""The CLI's consoles on a real pseudo-terminal and in a pipe, and its progress bar: on an 80-column terminal a long line (a run's
summary, a stop's line, a hit's preview) is wrapped between words, where the terminal itself would have cut
words at its edge (`... 17.6` / `s`, `Lis` / `ts of Values`); in a pipe it stays one whole line."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

from unichunk.deployments.cli.console import EtaColumn, ProgressBar, RateColumn, progress
from unichunk.engine.progress import ChunkProgress, listening
from unichunk.sinks.progress import ChunkEvent

WORDS = [f"word{i:03d}" for i in range(40)]  # 319 characters on one line
_CHILD = f"""
from unichunk.deployments.cli.console import console, err_console
console.print({" ".join(WORDS)!r})
err_console.print({" ".join(WORDS)!r})
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "TERM": "xterm-256color"}
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)
    return env


def _on_a_terminal(child: str) -> list[str]:
    """The non-empty lines `child` (Python) writes to an 80 x 24 pseudo-terminal, colours removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", child], stdin=slave, stdout=slave, stderr=slave, env=_env()
    )
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child and its terminal are gone
            break
        if not data:
            break
        shown.extend(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0, bytes(shown)
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.decode()).replace("\r\n", "\n")
    return [line for line in text.split("\n") if line]


def test_on_an_80_column_terminal_long_lines_wrap_between_words() -> None:
    lines = _on_a_terminal(_CHILD)
    assert len(lines) > 2 and all(len(line) <= 80 for line in lines), lines  # wrapped by us, not cut
    assert " ".join(lines).split() == WORDS * 2, lines  # every word whole


def test_in_a_pipe_a_long_line_stays_whole() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == child.stderr == " ".join(WORDS) + "\n"


def test_on_an_80_column_terminal_a_table_cuts_nothing_and_keeps_each_id_whole() -> None:
    """`unichunk status` at 80 columns showed `doc_f877d922de6…` and `gb191e3f0…`: IDs that `delete` and
    `generations switch` take, cut. The first column stays whole; the others fold rather than being cut."""
    document, source = "doc_f877d922de6d0af7", "chapter-07-managing-growing-projects-with-packages.html"
    row = [document, source, "processed", "16", "2026-11-27T04:22:08"]
    lines = _on_a_terminal(
        "from unichunk.deployments.cli.console import print_table\n"
        f"print_table(['document', 'source', 'state', 'chunks', 'updated'], [{row!r}] * 3)"
    )
    assert all(len(line) <= 80 for line in lines) and "…" not in "".join(lines), lines
    assert sum(document in line for line in lines) == 3, lines  # each on one line, whole
    cells = ["".join(line.split("│")[2].split()) for line in lines if line.count("│") == 6]
    assert "".join(cells) == source * 3, lines  # folded over lines, every character kept


def test_the_bar_shows_a_rate_and_an_eta_from_the_first_embedding_call() -> None:
    """In tmux at load 4 the bar read `chunks 28/768 ... eta -:--:--` for 15-35 s: the chunk stage began only
    at the first count, and Rich's speed needs two steps after it. Now the stage begins as the first
    batch's prepare does (`ChunkProgress` tells the listeners then), and the first embedding call after it
    gives a rate and an ETA (Rich's own speed needs two steps: the second call, 15-35 s later there)."""
    heard: list[tuple[str, int, int]] = []
    with listening(lambda *event: heard.append(event)):
        ChunkProgress().event(ChunkEvent("queued", documents=4, chunks=400))
        ChunkProgress().event(ChunkEvent("queued", documents=4, chunks=400, reused=40))
    assert heard == [("chunks", 0, 400), ("chunks", 40, 400)]  # reused vectors: done at the start

    now = [0.0]
    bar = ProgressBar()
    bar._bar = progress(get_time=lambda: now[0])  # what `shown` draws on a terminal, on a test clock
    bar._task = bar._bar.add_task("documents", total=None)
    bar.update("documents", 0, 10)
    now[0] = 5.0
    bar.update("chunks", 0, 400)  # the batch's prepare begins, nothing reused
    now[0] = 15.0
    bar.update("chunks", 32, 400)  # its first embedding call: 32 texts in 10 s
    task = bar._bar.tasks[0]
    assert RateColumn().render(task).plain == "3.2 chunks/s"
    assert EtaColumn().render(task).plain == "0:01:55"  # 368 chunks left at 3.2 a second
    now[0] = 40.0  # the second call is still running: the rate holds, it does not sag with the wait
    assert RateColumn().render(bar._bar.tasks[0]).plain == "3.2 chunks/s"
