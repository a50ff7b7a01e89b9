"""MiniLM compiled ahead of time (AOTInductor) into a package file, bfloat16 or fp32: built once, into a cache.

Eager bfloat16 stops near 1.7x torch fp32 on a CPU with bf16 instructions, because CPU flash attention is
slower in bfloat16 than in fp32; compiled, the kernels around it fuse and the model reaches about 2x
(benchmarks/README.md, "Embedder backends"). In fp32 (a CPU without bf16) compiling gains less in
throughput, but a process that loads the package needs neither transformers nor sentence-transformers, whose
imports are most of an embedder's start (benchmarks/README.md, "fp32 compiled ahead of time").
`torch.compile` would pay its compile (about 27 s) in every process; a package is compiled once (about 20 s,
with a C++ compiler) and loaded in a second or two, torch's inductor runtime included.

The package is the transformer only (its last hidden states, batch and length dynamic); pooling stays in the
runner, so vectors and unpooled sums come from one call. Its file name carries a key over everything that
decides its bytes or whether it runs: the weights' sha256, the torch version, the machine and the CPU's
instruction set (generated code for AVX-512 must never run on a CPU without it, as a cache shared between
machines would), and `PACKAGE_VERSION`; the precision is in its name. Written to a temporary name and
renamed, as the ONNX export is; a package that does not load is compiled again.

The cache keeps the package unpacked, a folder, and loads it from there. Loaded from its `.pt2` file,
torch's loader unpacks the whole package (89 MB in fp32) into a new `$TMPDIR/aotinductor_*` folder in every
process and removes it only when the loaded model is destroyed: a process that ends without that (a stopped
run's `os._exit`, a SIGKILL) left the folder behind, so every Ctrl-C filled /tmp by one more copy. Loaded
from the folder nothing is copied, and a process starts the model sooner (nothing is unzipped).
`torch._inductor.aoti_compile_and_package` and `aoti_load_package` are the entry points torch's AOTInductor
guide documents (torch is pinned). Imported only where the compiled model runs
(`unichunk.sinks.vectors.minilm`): torch's inductor takes a second.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

try:
    import fcntl
except ImportError:  # Windows: no cross-process lock; two processes may both compile, the rename is atomic
    fcntl = None  # type: ignore[assignment]

import torch
from torch._inductor import aoti_compile_and_package, aoti_load_package
from torch._inductor import config as inductor_config

from unichunk.sinks.config import MODEL_CACHE_STALE_DAYS
from unichunk.sinks.device import cpu_flags
from unichunk.sinks.vectors.base import EmbedderError
from unichunk.sinks.vectors.onnx_export import remove_abandoned, weights_sha256

logger = logging.getLogger(__name__)

# Bumped when what is compiled changes, so no older package is reused.
PACKAGE_VERSION = 1
_PREFIX = "all-MiniLM-L6-v2."  # every package's name starts so, its lock's after a dot (ONNX files' too)
_LOCK_GRACE = 3600.0  # seconds: a lock file younger than this may be a compile about to write its package
_MAX_BATCH = 2048  # the settings' largest model batch (`embedding_model_batch_size`)
_MAX_LENGTH = 256  # MiniLM's word pieces, [CLS] and [SEP] included
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

# Builds per process: tests read it to prove a second load reuses the file.
BUILDS: dict[str, int] = {}
_build_lock = threading.Lock()

States = Callable[..., Any]
Precision = Literal["bf16", "fp32"]
# Weights frozen into the compiled code (inductor's `freezing`) where it measured faster: in bfloat16
# (2.04x fp32 with it); in fp32 on an AVX2 CPU it made the model 0.8x eager, against 1.07x without.
_FREEZING: dict[Precision, bool] = {"bf16": True, "fp32": False}
_LONG_NAMES: dict[Precision, str] = {"bf16": "bfloat16", "fp32": "fp32"}


class NoCompiler(EmbedderError):
    """No C++ compiler where inductor would call one: compiling cannot work, so it is not tried (a failed
    try costs a process about 13 s of export and code generation before the compiler is found missing)."""


def require_compiler() -> None:
    """Raise `NoCompiler` unless the compiler inductor calls (`CXX`, else g++, clang++ on macOS: its
    `cpp.cxx` setting) is on PATH."""
    name = inductor_config.cpp.cxx[-1]
    if shutil.which(name) is None:
        raise NoCompiler(f"no C++ compiler {name!r} found (install g++ or set CXX)")


class HiddenStates(torch.nn.Module):
    """A transformer's last hidden states, its inputs by keyword (as `torch.export` traces it)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
        return self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            return_dict=False,
        )[0]


def cache_key() -> str:
    """What decides the package's bytes and where it may run, hashed."""
    parts = [
        weights_sha256(),
        f"torch={torch.__version__}",
        f"machine={platform.machine()}",
        f"capability={torch.backends.cpu.get_cpu_capability()}",
        "flags=" + " ".join(sorted(cpu_flags())),
        f"package={PACKAGE_VERSION}",
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def package_dir(cache_dir: Path, precision: Precision = "bf16") -> Path:
    """Where the compiled package lies unpacked, the folder loaded (the `.pt2` file of the same name is
    where it is compiled, and what earlier versions kept: unpacked on first use, then removed)."""
    return cache_dir / f"{_PREFIX}{precision}-aot.{cache_key()}"


def load_states(cache_dir: Path, transformer: Callable[[], Any], precision: Precision = "bf16") -> States:
    """MiniLM's transformer in `precision`, compiled: from the cache, or compiled into it first from what
    `transformer()` gives (a Hugging Face BERT in that precision, loaded only then). Called with the
    tokenizer's tensors by keyword, it returns the last hidden states."""
    target = package_dir(cache_dir, precision)
    if target.is_dir():
        try:
            return _used(target, load_unpacked(target))
        except Exception:  # damaged or foreign: looked at again under the lock below
            pass
    with _compiling(target):
        if target.is_dir():  # another process may have compiled it while this one waited
            try:
                return _used(target, load_unpacked(target))
            except Exception as exc:
                logger.warning("compiled MiniLM %s does not load (%s); compiling it again", target, exc)
        packed = target.with_name(f"{target.name}.pt2")
        if not _unpack(packed, target):
            require_compiler()
            compile_package(transformer(), packed, precision)
            if not _unpack(packed, target):
                raise EmbedderError(f"the package compiled into {packed} could not be unpacked")
        prune_cache(cache_dir, keep=target)  # the cache grew by one package: the time to shed old ones
    return load_unpacked(target)


def _used(folder: Path, states: States) -> States:
    """`states`, loaded from `folder`, whose time is set to now: when it was last used, for `prune_cache`
    (a read-only cache stays as it is)."""
    with suppress(OSError):
        os.utime(folder)
    return states


def prune_cache(cache_dir: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Remove what no load of this version will use again, and return it: packages (folders, or `.pt2`
    files an earlier version kept) of another key, precision or version that no process loaded for
    `MODEL_CACHE_STALE_DAYS` (a torch upgrade or another CPU leaves one per key, 89 MB each), and lock
    files whose package is gone (earlier versions named theirs after the `.pt2`). A package used within
    the period stays: another installation may share the cache. `keep`, the package just made, stays."""
    now = time.time() if now is None else now
    # packages only (`-aot.`): the ONNX backend's files stay
    removed = remove_abandoned(
        cache_dir, f"{_PREFIX}*-aot.*", MODEL_CACHE_STALE_DAYS * 86400, keep=keep, now=now
    )
    for lock in cache_dir.glob(f".{_PREFIX}*-aot.*.lock"):
        package = cache_dir / lock.name[1 : -len(".lock")]
        try:
            if package.exists() or now - lock.stat().st_mtime <= _LOCK_GRACE:
                continue
            lock.unlink()
            removed.append(lock)
        except OSError:
            continue
    return removed


class _DirectoryLoadNotes(logging.Filter):
    """Drops the two warnings torch logs on every load of an unpacked package: its `.pt2` reader, tried
    first, says it wants a file, and the loader it falls back to (the one that reads folders) calls the
    package outdated. Neither is true of a folder, and a run would print both each time."""

    NOTES = ("Unable to load package.", "Loading outdated pt2 file.")

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.NOTES)


_SIZES = "unpacked-sizes.json"  # each file's size as unpacked, beside the package's own root folder
_LOAD_LOGGERS = ("torch.export.pt2_archive._package", "torch._inductor.package.package")
_load_lock = threading.Lock()


def load_unpacked(folder: Path) -> States:
    """The package unpacked in `folder`, loaded in place (`aoti_load_package` reads a folder as well as a
    `.pt2` file: torch is pinned), without torch's two notes about it. Its files are first checked against
    the sizes `_unpack` wrote down: a truncated library would not fail to load, it would crash the process
    (SIGBUS) when run."""
    _check_sizes(folder)
    note_filter = _DirectoryLoadNotes()
    loggers = [logging.getLogger(name) for name in _LOAD_LOGGERS]
    with _load_lock:
        for torch_logger in loggers:
            torch_logger.addFilter(note_filter)
        try:
            return aoti_load_package(str(folder))
        finally:
            for torch_logger in loggers:
                torch_logger.removeFilter(note_filter)


def _check_sizes(folder: Path) -> None:
    try:
        sizes = json.loads((folder / _SIZES).read_text(encoding="utf-8"))
        damaged = [name for name, size in sizes.items() if (folder / name).stat().st_size != size]
    except (OSError, ValueError, AttributeError) as exc:
        raise EmbedderError(f"{folder} has no readable list of its files ({exc})") from exc
    if damaged:
        raise EmbedderError(f"{folder}: {damaged[0]} is not the size it was unpacked at")


def _unpack(packed: Path, target: Path) -> bool:
    """Unpack the package file `packed` into the folder `target` (through a temporary folder beside it,
    renamed into place) and remove the file; False when there is no such file or it is not a whole package
    (removed too: it is compiled again)."""
    if not packed.is_file():
        return False
    remove_abandoned(target.parent, f".{target.name}.*.tmp")
    work = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        with zipfile.ZipFile(packed) as archive:
            archive.extractall(work)
            sizes = {
                i.filename: i.file_size for i in archive.infolist() if not i.is_dir() and i.filename != _SIZES
            }
        (work / _SIZES).write_text(json.dumps(sizes), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)  # a damaged copy, which did not load
        os.replace(work, target)
        return True
    except (zipfile.BadZipFile, OSError) as exc:
        logger.warning("compiled MiniLM %s is not a whole package (%s); compiling it again", packed, exc)
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)
        packed.unlink(missing_ok=True)


@contextmanager
def _compiling(target: Path) -> Iterator[None]:
    """One compile of `target` at a time: in this process (embedders loading in several task threads) and,
    where the platform has `flock`, across processes sharing the cache (shard workers or a service and a
    CLI run starting together would each compile it otherwise)."""
    with _build_lock:
        if fcntl is None:
            yield
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        with (target.parent / f".{target.name}.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process ends
            yield


def compile_package(transformer: Any, target: Path, precision: Precision = "bf16") -> None:
    """`transformer` (in `precision`) exported with a dynamic batch and length and compiled into the
    package `target` (written beside it under a temporary name, then renamed)."""
    example = {name: torch.ones((8, 64), dtype=torch.long) for name in INPUT_NAMES}
    batch = torch.export.Dim("batch", min=1, max=_MAX_BATCH)
    length = torch.export.Dim("length", min=2, max=_MAX_LENGTH)
    # a warning, so the CLI shows why its first run waits (its bar cannot move meanwhile); once per CPU
    logger.warning(
        "compiling MiniLM in %s for this CPU, once (about 20 s), into %s",
        _LONG_NAMES[precision],
        target.parent,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(target.parent, f".{target.name}.*.tmp.pt2")
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp.pt2")
    os.close(fd)
    try:
        with torch.no_grad():
            exported = torch.export.export(
                HiddenStates(transformer).eval(),
                (),
                kwargs=example,
                dynamic_shapes={name: {0: batch, 1: length} for name in INPUT_NAMES},
            )
            aoti_compile_and_package(
                exported, package_path=temporary, inductor_configs={"freezing": _FREEZING[precision]}
            )
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    BUILDS[precision] = BUILDS.get(precision, 0) + 1
    logger.info("compiled MiniLM (%s) to %s", _LONG_NAMES[precision], target)
