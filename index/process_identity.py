"""Which process holds something, precisely enough to tell later, from this machine, that it has exited.

The document leases record their holders' processes (a run killed with SIGKILL frees its leases at once)
and the service announces its process the same way in server mode (a stale announcement is ignored).
Kept apart from both, with nothing but the standard library, so the CLI can check a service without
loading the records' database layer.
"""

from __future__ import annotations

import os
import socket
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class ProcessIdentity:
    """Which process holds a lease, precisely enough to tell later that it has exited.

    `machine` is the host name plus, where Linux exposes them, the boot ID and the PID namespace: a PID
    means the same process only within one boot of one namespace (two containers may share a host name
    with `network_mode: host`). `started` is the process start time, so a PID reused after the holder
    exited is not mistaken for it. Empty where the platform does not say.
    """

    machine: str
    pid: int
    started: str

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(_machine(), pid, _start_time(pid))

    def is_gone(self) -> bool:
        """True only when this machine can tell that the process has exited; False when unsure."""
        if self.machine != _machine():
            return False  # another machine's process: only its ttl can free its leases
        if self.pid == os.getpid():
            return self.started != _start_time(self.pid)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # exists, owned by another user
        stat = _proc_stat(self.pid)
        if stat is None:
            return False  # alive as far as this platform can tell
        state, started = stat
        return state == "Z" or (bool(self.started) and started != self.started)  # zombie, or PID reused


@cache
def _machine() -> str:
    parts = [socket.gethostname()]
    with suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "|".join(parts)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) from /proc/<pid>/stat, or None where there is no such file."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name, in parentheses, may hold spaces
    return fields[0], fields[19]  # fields 3 (state) and 22 (starttime) of proc(5)


def _start_time(pid: int) -> str:
    stat = _proc_stat(pid)
    return stat[1] if stat is not None else ""
