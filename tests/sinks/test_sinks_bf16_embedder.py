"""MiniLM in bfloat16 (`UNICHUNK_EMBEDDING_BACKEND=torch-bf16`, `auto`'s choice on a CPU with bf16
instructions): compiled ahead of time into a cached package, or uncompiled; vectors and sums within cosine
0.999 of torch fp32's either way; a distinct embedder, so an index never mixes the two."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from unichunk.index.run import index_settings
from unichunk.sinks.config import MODEL_CACHE_STALE_DAYS, SinkSettings, machine_backend
from unichunk.sinks.device import cpu_has_bf16
from unichunk.sinks.vectors import aot_package
from unichunk.sinks.vectors.minilm import MiniLMEmbedder

TEXTS = [
    "Ownership is a set of rules that govern how a Rust program manages memory.",
    "Qdrant stores vectors; BM25 ranks chunks by keyword overlap.",
    "word " * 300,
    "",
    "naïve café ½ 🦀 — `&mut T` borrows",
    "A second, longer text, so that the batches of two pad texts of other lengths to their longest one.",
]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return np.asarray(MiniLMEmbedder(backend="torch").embed(TEXTS))


def _close_to_torch(embedder: MiniLMEmbedder, exact: np.ndarray) -> np.ndarray:
    low = np.asarray(embedder.embed(TEXTS))
    assert low.dtype == np.float64 and low.shape == (len(TEXTS), 384)
    assert np.sum(exact * low, axis=1).min() > 0.999
    assert np.allclose(np.linalg.norm(low, axis=1), 1.0, atol=1e-6)  # unit vectors, as torch's
    sums = np.asarray(embedder.embed_sums(TEXTS))
    assert np.sum(sums / np.linalg.norm(sums, axis=1, keepdims=True) * exact, axis=1).min() > 0.999
    query = np.asarray(embedder.embed_query(TEXTS[0]))  # one text, one thread
    assert float(query @ exact[0]) > 0.999
    return low


def test_compiled_and_uncompiled_bf16_are_torchs_vectors_to_three_decimals_yet_another_embedder(
    tmp_path: Path, torch_vectors: np.ndarray
) -> None:
    # model batches of 2: texts of other lengths share a batch, so padding and sorting are exercised
    compiled = MiniLMEmbedder(backend="torch-bf16", cache_dir=tmp_path, model_batch_size=2)
    uncompiled = MiniLMEmbedder(backend="torch-bf16", compiled=False, model_batch_size=2)
    assert compiled.runs == "torch-bf16:compiled on cpu" and uncompiled.runs == "torch-bf16 on cpu"
    fast = _close_to_torch(compiled, torch_vectors)
    plain = _close_to_torch(uncompiled, torch_vectors)
    assert not np.array_equal(fast, torch_vectors)  # other arithmetic: other digits
    assert np.sum(fast * plain, axis=1).min() > 0.9995  # the same bfloat16 model, fused or not
    fp32 = MiniLMEmbedder(backend="torch")
    assert compiled.fingerprint == uncompiled.fingerprint == fp32.fingerprint + "+bf16"


def test_the_package_is_compiled_once_reused_and_compiled_again_when_unreadable(tmp_path: Path) -> None:
    before = aot_package.BUILDS.get("bf16", 0)
    MiniLMEmbedder(backend="torch-bf16", cache_dir=tmp_path).embed(TEXTS[:1])
    package, lock = sorted(tmp_path.iterdir(), key=lambda path: path.suffix == ".lock")
    assert package.name.startswith("all-MiniLM-L6-v2.bf16-aot.") and package.is_dir()  # kept unpacked
    assert lock.name == f".{package.name}.lock"  # and no package file or temporary one left beside them
    assert aot_package.BUILDS["bf16"] == before + 1
    os.utime(package, (1_000_000_000, 1_000_000_000))
    again = MiniLMEmbedder(backend="torch-bf16", cache_dir=tmp_path)
    assert again.runs == "torch-bf16:compiled on cpu" and aot_package.BUILDS["bf16"] == before + 1
    assert package.stat().st_mtime > 1_000_000_000  # a load marks it used, so no prune takes it

    # a package file an earlier version kept is unpacked in its place, not compiled again
    packed = tmp_path / f"{package.name}.pt2"
    (package / "unpacked-sizes.json").unlink()  # what unpacking adds
    shutil.make_archive(str(packed), "zip", package)
    Path(f"{packed}.zip").rename(packed)
    shutil.rmtree(package)
    earlier = MiniLMEmbedder(backend="torch-bf16", cache_dir=tmp_path)
    assert earlier.runs == "torch-bf16:compiled on cpu" and aot_package.BUILDS["bf16"] == before + 1
    assert package.is_dir() and not packed.exists()

    library = max((f for f in package.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    library.write_bytes(library.read_bytes()[:1000])  # damaged
    # what processes stopped while compiling or unpacking leave (a stop does not wait for either), and
    # what a process compiling right now has
    abandoned, in_progress = (tmp_path / f".{packed.name}.{n}.tmp.pt2" for n in ("old", "new"))
    abandoned.write_bytes(b""), in_progress.write_bytes(b"")
    half_unpacked = tmp_path / f".{package.name}.old.tmp"
    half_unpacked.mkdir()
    for stale in (abandoned, half_unpacked):
        os.utime(stale, (1_000_000_000, 1_000_000_000))
    # in a new process: this one keeps the library it loaded, as the dynamic loader does by its path
    script = (
        "from pathlib import Path\n"
        "from unichunk.sinks.vectors import aot_package\n"
        "from unichunk.sinks.vectors.minilm import MiniLMEmbedder\n"
        f"e = MiniLMEmbedder(backend='torch-bf16', cache_dir=Path({str(tmp_path)!r}))\n"
        "print('RUNS', e.runs, 'BUILDS', aot_package.BUILDS.get('bf16', 0))\n"
    )
    third = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert third.stdout.strip().endswith("RUNS torch-bf16:compiled on cpu BUILDS 1"), third.stderr[-2000:]
    assert "compiling it again" in third.stderr
    assert max(f.stat().st_size for f in package.rglob("*.so")) > 1_000_000  # whole again
    assert not abandoned.exists() and not half_unpacked.exists() and in_progress.exists()


def test_two_processes_starting_together_compile_the_package_once_and_leave_no_copy_of_it(
    tmp_path: Path,
) -> None:
    """Both end with `os._exit`, as a stopped run does: loaded from a `.pt2` file, each would have left
    its own unpacked copy of the package in `$TMPDIR`."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from unichunk.sinks.vectors import aot_package\n"
        "from unichunk.sinks.vectors.minilm import MiniLMEmbedder\n"
        f"e = MiniLMEmbedder(backend='torch-bf16', cache_dir=Path({str(tmp_path / 'cache')!r}))\n"
        "e.embed(['Ownership rules'])\n"
        "print('RUNS', e.runs, 'BUILDS', aot_package.BUILDS.get('bf16', 0), flush=True)\n"
        "os._exit(0)\n"
    )
    started = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(scratch)},
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=600) for process in started]
    assert all(process.returncode == 0 for process in started), [err[-2000:] for _, err in outputs]
    lines = [out.strip().splitlines()[-1] for out, _ in outputs]
    assert all(line.startswith("RUNS torch-bf16:compiled on cpu BUILDS ") for line in lines), lines
    assert sorted(int(line.rsplit(" ", 1)[1]) for line in lines) == [0, 1]  # one compiled, one waited
    assert not list(scratch.glob("aotinductor_*"))
    assert not [err for _, err in outputs if "outdated" in err or "Unable to load package" in err]


@pytest.mark.parametrize(("backend", "precision"), [("torch-bf16", "bfloat16"), ("torch", "fp32")])
def test_without_a_cpp_compiler_minilm_runs_uncompiled_with_one_warning(
    tmp_path: Path, backend: str, precision: str
) -> None:
    script = (
        "import logging, numpy as np\n"
        "logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(message)s')\n"
        "from unichunk.sinks.vectors.minilm import MiniLMEmbedder\n"
        f"e = MiniLMEmbedder(backend={backend!r}, cache_dir=__import__('pathlib').Path({str(tmp_path)!r}))\n"
        "v = np.asarray(e.embed(['Ownership rules']))\n"
        "print('RUNS', e.runs, round(float(np.linalg.norm(v)), 4))\n"
    )
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"RUNS {backend} on cpu 1.0" in done.stdout
    assert "compiling MiniLM" not in done.stderr  # not even tried: no export, no code generated
    warnings = [line for line in done.stderr.splitlines() if f"running {precision} uncompiled" in line]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING"), done.stderr[-3000:]
    assert "no C++ compiler" in warnings[0]
    assert [path.suffix for path in tmp_path.iterdir()] == [".lock"]  # nothing half-built left


def test_auto_is_bf16_exactly_where_the_cpu_computes_in_it(tmp_path: Path) -> None:
    expected = "torch-bf16" if cpu_has_bf16() else "torch"
    assert machine_backend("cpu") == expected and machine_backend("cuda") == "torch"  # fp32 on a GPU
    assert MiniLMEmbedder(device="cpu").backend == expected
    auto = SinkSettings(data_dir=tmp_path, device="cpu")
    assert auto.embedding_backend == "auto" and auto.minilm_backend() == expected
    assert index_settings(auto) == index_settings(SinkSettings(data_dir=tmp_path, embedding_backend=expected))


def test_bf16_is_a_generation_of_its_own(tmp_path: Path) -> None:
    plain = SinkSettings(data_dir=tmp_path, embedding_backend="torch")
    bf16 = SinkSettings(data_dir=tmp_path, embedding_backend="torch-bf16")
    assert index_settings(bf16) == index_settings(plain) | {"embedding_variant": "bf16"}
    assert bf16.embedder_identity() == plain.embedder_identity() + "+bf16"
    # an endpoint's vectors do not depend on how MiniLM would have run
    endpoint = SinkSettings(data_dir=tmp_path, embedder="openai", embedding_backend="torch-bf16")
    assert "embedding_variant" not in index_settings(endpoint)


def test_the_cache_sheds_packages_no_load_used_for_a_month_and_orphaned_locks(tmp_path: Path) -> None:
    """After a compile (`prune_cache`, with `keep` the package just made): another key's package or
    `.pt2` unused for `MODEL_CACHE_STALE_DAYS` goes, with the lock files whose package is gone; a package used
    lately, the one kept, a fresh lock and the ONNX backend's files stay."""
    now = 2_000_000_000.0
    old, recent = now - (MODEL_CACHE_STALE_DAYS + 1) * 86400, now - 86400
    made = {
        "all-MiniLM-L6-v2.bf16-aot.aaaa": old,  # another key's folder, unused for a month: goes
        "all-MiniLM-L6-v2.fp32-aot.bbbb.pt2": old,  # an earlier version's package file, as old: goes
        "all-MiniLM-L6-v2.fp32-aot.cccc": recent,  # loaded yesterday (another installation?): stays
        "all-MiniLM-L6-v2.bf16-aot.keep": old,  # the one just made stays, whatever its time
        "all-MiniLM-L6-v2.fp32.dddd.onnx": old,  # the ONNX backend's cache is not the packages'
        ".all-MiniLM-L6-v2.fp32-aot.cccc.lock": old,  # its package is there: stays
        ".all-MiniLM-L6-v2.bf16-aot.keep.pt2.lock": old,  # an earlier version's lock name: goes
        ".all-MiniLM-L6-v2.fp32-aot.eeee.lock": now - 60,  # a compile may be about to write it: stays
    }
    for name, when in made.items():
        path = tmp_path / name
        if name.endswith(("aaaa", "cccc", "keep")):
            (path / "data").mkdir(parents=True)
            (path / "data" / "model.so").write_bytes(b"x" * 10)
        else:
            path.write_bytes(b"")
        os.utime(path, (when, when))
    removed = aot_package.prune_cache(tmp_path, keep=tmp_path / "all-MiniLM-L6-v2.bf16-aot.keep", now=now)
    gone = {
        "all-MiniLM-L6-v2.bf16-aot.aaaa",
        "all-MiniLM-L6-v2.fp32-aot.bbbb.pt2",
        ".all-MiniLM-L6-v2.bf16-aot.keep.pt2.lock",
    }
    assert {p.name for p in removed} == gone
    assert {p.name for p in tmp_path.iterdir()} == set(made) - gone
    assert aot_package.prune_cache(tmp_path, keep=tmp_path / "all-MiniLM-L6-v2.bf16-aot.keep", now=now) == []
