"""One /metrics for the serving process (or a worker) and every flow run it spawns (prometheus_client
multiprocess mode).

Each flow run is a subprocess: counting in its own memory, it would start from zero and its samples would
never reach the serving process's /metrics. In multiprocess mode every process writes its samples to files
under PROMETHEUS_MULTIPROC_DIR and /metrics renders `MultiProcessCollector` over them, so counters only go
up while the service lives.

Why a re-exec: prometheus_client picks in-memory or file storage once, when `prometheus_client.values` is
imported, and the CLI imports the metric modules before it knows it will serve. So
`enter_multiprocess_mode()`, the first thing `unichunk serve` does, clears the directory, sets the variable
and `os.execv`s the same command line (same pid: a supervisor sees nothing). The directory is cleared
because an earlier service's files would be summed into this one's counters; in server mode
(UNICHUNK_DATABASE_URL) and for `unichunk worker` (`temporary=True`) it is a fresh temporary one, removed
on exit, so that several workers on one machine each sum only their own runs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from unichunk.index.metrics import initialize_series, multiprocess_mode
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The pid that prepared the directory: execv keeps it, so the re-executed process knows it is done.
PREPARED_ENV = "UNICHUNK_METRICS_PREPARED_PID"
DEFAULT_SUBDIR = "prometheus-multiproc"
# Set when the directory is a temporary one of this service (server mode): removed at its exit.
TEMPORARY_ENV = "UNICHUNK_METRICS_TEMPORARY"


def enter_multiprocess_mode(data_dir: Path, *, temporary: bool = False) -> Path:
    """Return the multiprocess directory once this process records into it; else clear it, set the
    variable and re-execute this command line (does not return). See the module docstring.

    The directory is PROMETHEUS_MULTIPROC_DIR if set, else a temporary one removed at exit (`temporary`,
    as a `unichunk worker` asks, or server mode), else `<data_dir>/prometheus-multiproc`."""
    if os.environ.get(PREPARED_ENV) == str(os.getpid()) and multiprocess_mode():
        initialize_series(SINK_NAMES)  # every known counter series at 0, so the first run's increase counts
        directory = Path(os.environ[MULTIPROC_ENV])
        if os.environ.get(TEMPORARY_ENV) == str(os.getpid()):
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
        return directory
    if os.environ.get(MULTIPROC_ENV):
        directory = Path(os.environ[MULTIPROC_ENV])
    elif temporary or SinkSettings().database_url is not None:
        directory = Path(tempfile.mkdtemp(prefix="unichunk-metrics-"))
        os.environ[TEMPORARY_ENV] = str(os.getpid())
    else:
        directory = Path(data_dir) / DEFAULT_SUBDIR
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    os.environ[PREPARED_ENV] = str(os.getpid())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    raise AssertionError("unreachable: execv returned")  # pragma: no cover


def exposition_registry() -> CollectorRegistry:
    """What /metrics renders: every process's samples in multiprocess mode, else this process's registry."""
    if not multiprocess_mode():
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return registry


def metrics_page() -> tuple[bytes, str]:
    """The /metrics body and its content type."""
    return generate_latest(exposition_registry()), CONTENT_TYPE_LATEST
