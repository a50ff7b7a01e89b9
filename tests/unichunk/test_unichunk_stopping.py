"""`unichunk.stopping.leave`: a command whose run was stopped exits at once with its status, running none
of the interpreter's teardown (with a model loaded it took 2-6 s of a Ctrl-C's wait on a loaded laptop).

A real child process: the status the shell sees, and whether an exit handler (the teardown) ran.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_CHILD = """
import atexit, sys
from unichunk.stopping import leave
atexit.register(lambda: print("teardown ran", flush=True))
print("leaving", flush=True)
leave({status})
print("returned", flush=True)
sys.exit(0)
"""


@pytest.mark.parametrize("status", [130, 143])
def test_a_stopped_command_leaves_at_once_with_its_status(status: int) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD.format(status=status)], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == status, (child.stdout, child.stderr)
    assert child.stdout.splitlines() == ["leaving"], child.stdout  # neither returned nor torn down
