"""Sample every thread of this process with py-spy during a block, and say where the samples fell.

The ingest flow does its model work in Prefect task threads (`.submit`), so an in-process profiler that
follows one thread (pyinstrument, cProfile) sees the flow body waiting on futures and nothing of the work.
py-spy (the bench extra) attaches to this process from outside and samples every thread without slowing
it much (`--nonblocking`). The raw output has one line per distinct stack: `frame;frame;... count`.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OURS = ("chunking", "sinks", "index", "flows", "tasks", "retrieval", "unichunk", "deployments", "benchmarks")
RATE = 100  # samples a second per thread


def py_spy() -> str:
    """The py-spy executable: beside this interpreter (installed by the bench extra), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.is_file() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install -c constraints.txt -e '.[bench]'")
    return found


@contextmanager
def sampled(output: Path, pid: int) -> Iterator[None]:
    """Record every thread of process `pid` into `output` (py-spy's raw format) while the block runs."""
    command = [py_spy(), "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw"]
    command += ["--nonblocking", "--threads", "--output", str(output)]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(2)  # attaching takes a moment; samples before the block are few and harmless
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        _, errors = recorder.communicate(timeout=120)
        if not output.is_file():
            raise SystemExit(f"py-spy wrote no profile: {errors[-2000:]}")


def _owner(frame: str) -> str:
    """The top-level package (or module) of a frame's file: py-spy names files from their import root,
    `sinks/vectors/minilm.py`, `torch/nn/modules/module.py`, `threading.py`."""
    location = frame[frame.rfind("(") + 1 : frame.rfind(":")] if "(" in frame else ""
    return location.split("/", 1)[0].removesuffix(".py") if location else "?"


def summary(output: Path, top: int = 25) -> str:
    """Samples by the package of the innermost frame, then our functions by samples spent in them or
    below them (cumulative) and by samples spent in their own code (self)."""
    by_owner: Counter[str] = Counter()
    ours_cumulative: Counter[str] = Counter()
    ours_self: Counter[str] = Counter()
    total = 0
    for line in output.read_text(encoding="utf-8").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")[1:]  # the first entry names the thread
        total += count
        by_owner[_owner(frames[-1]) if frames else "?"] += count
        seen = set()
        for frame in frames:
            if _owner(frame) in OURS and frame not in seen:
                seen.add(frame)
                ours_cumulative[frame] += count
        ours = [f for f in frames if _owner(f) in OURS]
        if ours:
            ours_self[ours[-1]] += count  # the deepest frame of ours: its own code or the library it calls
    lines = [f"{total} samples ({RATE}/s per busy thread); innermost frame's package:"]
    lines += [f"  {100 * n / total:5.1f} %  {owner}" for owner, n in by_owner.most_common(top)]
    lines.append("our functions, cumulative (the function and everything it calls):")
    lines += [f"  {100 * n / total:5.1f} %  {frame}" for frame, n in ours_cumulative.most_common(top)]
    lines.append("our deepest frames (own code plus the library calls made directly from it):")
    lines += [f"  {100 * n / total:5.1f} %  {frame}" for frame, n in ours_self.most_common(top)]
    return "\n".join(lines)
