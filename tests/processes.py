"""Processes a test started, found and awaited through /proc (Linux): a run's children, and whether they
have ended."""

from __future__ import annotations

import time
from pathlib import Path


def parent_of(pid: int) -> int:
    """The parent of `pid` (0 once it has ended)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def descendants(root: int) -> list[int]:
    """Every process `root` started, and theirs."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        children.setdefault(parent_of(int(stat.parent.name)), []).append(int(stat.parent.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _running(pid: int) -> bool:
    """Whether `pid` still runs: a zombie waiting for its parent's wait runs nothing any more."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def all_ended(pids: list[int], seconds: float = 10.0) -> bool:
    """Whether every process of `pids` has ended within `seconds`."""
    deadline = time.monotonic() + seconds
    while any(_running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
