"""Free space under the data dir, checked before the writes a full disk would crash.

qdrant-edge writes through memory maps: a page first written into a hole of a sparse file when the disk is
full is a SIGBUS, which kills the process with no message and leaves the stores half written. Nothing can
be caught there, so the only safe place is before: the engine checks each batch's estimated growth against
the free space (`unichunk.index.batch_space`), and opening a shard checks the room its load takes (on
tmpfs, mapping a vector file fills its holes). SQLite's own "database or disk is full" becomes the same
error, `DiskFull`: one line naming the directory, the space needed and the space free (exit 3).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from unichunk.chunking.errors import UnichunkError
from unichunk.sinks.config import SinkSettings

_BLOCK = 512  # st_blocks counts 512-byte units whatever the file system's block size
# Disk bytes a store may take per byte it is given, at most: qdrant-edge writes each point to its WAL and
# to a segment (measured: 4.6 KiB per 384-dim point with 0.6 KiB of payload, 2.2x), SQLite a row to its WAL
# and then its table; 4 leaves room for indexes and pages written half full.
WRITE_FACTOR = 4
# File systems that allocate a hole of a shared memory map when it is only read (shmem's fault handler).
_FILLED_ON_READ = frozenset({"tmpfs", "ramfs", "shmem"})


class DiskFull(UnichunkError):
    """The disk under the data dir has less free space than a write needs (plus the kept margin,
    UNICHUNK_MIN_FREE_BYTES); nothing of that write was done."""

    def __init__(
        self, message: str, *, path: Path, needed: int | None = None, free: int | None = None
    ) -> None:
        super().__init__(message)
        self.path, self.needed, self.free = path, needed, free


def size_text(count: int) -> str:
    """Bytes for people: `512 B`, `3.2 KiB`, `41.0 MiB`, `1.5 GiB`."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def free_bytes(path: Path) -> int:
    """Free bytes (for an unprivileged writer) on the file system holding `path`, or its nearest existing
    parent when `path` is yet to be created."""
    return shutil.disk_usage(_existing(path)).free


def _existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists."""
    path = Path(path).absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def local_stores(settings: SinkSettings) -> set[str]:
    """What `settings` keep on the data dir's disk: the embedded sinks (`vectors`, `keywords`, `graph`) and,
    without a database server, the pipeline's `records`; a store on a server costs this disk nothing."""
    local = set()
    if settings.qdrant_url is None:
        local.add("vectors")
    if settings.database_url is None:
        local |= {"keywords", "records"}
    if settings.neo4j_uri is None and settings.falkordb_url is None:
        local.add("graph")
    return local


def require_free(data_dir: Path, needed: int, margin: int, what: str) -> None:
    """Raise `DiskFull` unless the disk under `data_dir` has `needed` bytes free beyond `margin`; `what`
    says what was refused ("writing batch 3 (4 documents)", "opening the vector store")."""
    free = free_bytes(data_dir)
    if free >= needed + margin:
        return
    kept = f"UNICHUNK_MIN_FREE_BYTES {size_text(margin)} kept free"
    parts = f"{size_text(needed)} estimated + {kept}" if needed else kept
    raise DiskFull(
        f"disk full: the data dir {data_dir} has {size_text(free)} free, {what} needs "
        f"{size_text(needed + margin)} ({parts}); nothing was written: free some space and run again",
        path=data_dir,
        needed=needed + margin,
        free=free,
    )


def sparse_holes(paths: Iterable[Path]) -> int:
    """Bytes of `paths` not yet backed by disk blocks (apparent size beyond the blocks allocated): what
    writing, or on tmpfs even reading, them through a memory map may still take."""
    holes = 0
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        holes += max(0, st.st_size - st.st_blocks * _BLOCK)
    return holes


def fills_holes_on_read(path: Path) -> bool:
    """Whether mapping a sparse file under `path` allocates its holes even when only read (tmpfs), by the
    file system type of its mount in /proc/self/mounts; False where that cannot be told."""
    target = str(_existing(path).resolve())
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    best, kind = "", ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])  # `\040` is a space
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind in _FILLED_ON_READ


def is_sqlite_full(exc: BaseException) -> bool:
    """SQLite's SQLITE_FULL: "database or disk is full" (SQLAlchemy's OperationalError wraps it)."""
    orig = getattr(exc, "orig", exc)
    code = getattr(orig, "sqlite_errorcode", None)
    return code == 13 or "database or disk is full" in str(orig)


def sqlite_full_error(exc: BaseException, database: Path) -> DiskFull:
    """The one-line `DiskFull` for SQLite's "database or disk is full" on the file `database`."""
    free = free_bytes(database)
    cause = " ".join(str(getattr(exc, "orig", exc)).split())
    return DiskFull(
        f"disk full: writing the records file {database} failed ({cause}); the disk under "
        f"{database.parent} has {size_text(free)} free: free some space and run again",
        path=database,
        free=free,
    )
