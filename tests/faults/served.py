"""Serving in a subprocess for the fault tests: start it, wait on it, start flow runs, read their states."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def wait(what: str, probe: Callable[[], Any], timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := probe():
            return result
        time.sleep(0.2)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}\n--- serve log ---\n{tail(log)}"
    )


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else ""


def serve_process(
    cmd: list[str], env: dict[str, str], log: Path, cwd: Path, output: int | None = None
) -> subprocess.Popen:
    """`cmd` in its own process group, so one killpg stops it and its flow-run subprocesses. Its output
    goes to `log`, or to the file descriptor `output` (a pipe: `Tee`)."""
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=log.open("ab") if output is None else output,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its flow-run subprocesses share the group, so one killpg stops all
        # As started from a terminal: SIGINT at its default even when the test runner inherited it ignored
        # (a background job of a non-interactive shell, as a CI script may start it), since serve keeps an
        # ignored SIGINT ignored, as a run started by a parent that ignores it should.
        preexec_fn=_sigint_default,
    )


class Tee:
    """What `unichunk serve 2>&1 | tee LOG` in a terminal gives serve: a pipe whose reader copies it into
    `log`. `cut()` closes the reader, as Ctrl-C in that terminal ends `tee` with serve: every later write
    of serve's to stdout or stderr fails (EPIPE)."""

    def __init__(self, log: Path) -> None:
        self.read, self.write = os.pipe()
        self.log = log
        self._cut = threading.Event()
        self._copier = threading.Thread(target=self._copy, name="tee", daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        with self.log.open("ab") as out:
            while not self._cut.is_set():
                if select.select([self.read], [], [], 0.1)[0]:
                    data = os.read(self.read, 65536)
                    if not data:
                        return
                    out.write(data)
                    out.flush()

    def cut(self) -> None:
        self._cut.set()
        self._copier.join()
        os.close(self.read)


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # any flow-run subprocess left behind
    process.wait()


def start_run(api: str, deployment_id: str, parameters: dict[str, Any]) -> str:
    """Create a flow run; a busy SQLite server may answer 503 (for over a minute while a re-index writes on
    a loaded 2-core machine), so retry with one idempotency key."""
    body = {"parameters": parameters, "idempotency_key": uuid.uuid4().hex}
    deadline = time.monotonic() + 180
    while True:
        try:
            response = httpx.post(f"{api}/deployments/{deployment_id}/create_flow_run", json=body, timeout=15)
            if response.status_code < 500 or time.monotonic() > deadline:
                response.raise_for_status()
                return response.json()["id"]
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(1)


def run_state(api: str, run_id: str) -> str | None:
    try:
        return httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"]["type"]
    except (httpx.HTTPError, KeyError, TypeError):
        return None
