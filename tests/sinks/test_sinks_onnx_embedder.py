"""MiniLM through ONNX Runtime: torch's vectors, the export cached and checked, torch as the fallback, and
the device choice.

Everything is real: the graph is exported from the bundled weights into a temporary cache (once for the
module), run by onnxruntime and compared with sentence-transformers on torch. The fallback is a real
failed import (a runtime module name that does not exist), not a mock. The int8 bound is the measured
minimum cosine to torch's vectors (benchmarks/README.md, "Embedder backends") with a margin.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.index.run import index_settings
from unichunk.sinks.config import SinkSettings, machine_backend
from unichunk.sinks.device import DeviceError, onnx_cuda_available, resolve_device, torch_cuda_available
from unichunk.sinks.vectors import onnx_export
from unichunk.sinks.vectors.base import EmbedderError
from unichunk.sinks.vectors.embedders import make_embedder
from unichunk.sinks.vectors.minilm import INT8_VARIANT, MiniLMEmbedder

TEXTS = [
    "Ownership is Rust's most unique feature.",
    "   leading and trailing whitespace   ",
    "Ownership: `&mut T` borrows — naïve café ½ 🦀",
    "word " * 300,  # over 256 word pieces: truncated alike
    "",
    "a\u200bb\tc\x00d",
    "Rust has three rules of ownership. " * 6,
]
INT8_MIN_COSINE = 0.98  # measured minimum 0.988 on 150 eval chunks (benchmarks.embedder_speed), 0.9855 here
INT8_EMPTY_COSINE = 0.97  # the empty text ([CLS] [SEP] alone) is int8's worst case: 0.978 measured
EMPTY = TEXTS.index("")
HAS_CUDA = torch_cuda_available() or onnx_cuda_available()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx_cache")


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return np.asarray(MiniLMEmbedder(backend="torch").embed(TEXTS))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_onnx_fp32_gives_torchs_vectors_in_order(cache_dir: Path, torch_vectors: np.ndarray) -> None:
    embedder = MiniLMEmbedder(backend="onnx", cache_dir=cache_dir, model_batch_size=3)
    vectors = np.asarray(embedder.embed(TEXTS))
    assert embedder.runs == "onnx:fp32 on cpu"
    assert vectors.shape == (len(TEXTS), 384)
    assert _cosines(vectors, torch_vectors).min() >= 0.999  # text by text: sorting restored the order
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = np.asarray(embedder.embed_query(TEXTS[0]))  # the one-thread session
    assert float(query @ torch_vectors[0]) >= 0.999


def test_the_default_backend_is_within_its_measured_bound(torch_vectors: np.ndarray) -> None:
    default = SinkSettings.model_fields["embedding_backend"].default
    embedder = MiniLMEmbedder()  # the default cache, as a user's run has it
    assert embedder.backend == (machine_backend("auto") if default == "auto" else default)
    cosines = _cosines(np.asarray(embedder.embed(TEXTS)), torch_vectors)
    if default == "onnx-int8":
        assert np.delete(cosines, EMPTY).min() >= INT8_MIN_COSINE and cosines[EMPTY] >= INT8_EMPTY_COSINE
    else:
        assert cosines.min() >= 0.999


def test_int8_is_close_and_a_distinct_embedder(cache_dir: Path, torch_vectors: np.ndarray) -> None:
    int8 = MiniLMEmbedder(backend="onnx-int8", cache_dir=cache_dir)
    vectors = np.asarray(int8.embed(TEXTS))
    assert int8.runs == f"onnx:{INT8_VARIANT} on cpu"
    cosines = _cosines(vectors, torch_vectors)
    assert np.delete(cosines, EMPTY).min() >= INT8_MIN_COSINE and cosines[EMPTY] >= INT8_EMPTY_COSINE
    assert cosines.max() < 0.9999  # really other vectors: int8 ran, not fp32
    fp32 = MiniLMEmbedder(backend="onnx", cache_dir=cache_dir)
    torch = MiniLMEmbedder(backend="torch")
    # same vectors, same fingerprint (an embedding cache serves either); int8's is its own
    assert fp32.fingerprint == torch.fingerprint
    assert int8.fingerprint.startswith(torch.fingerprint) and int8.fingerprint != torch.fingerprint
    assert torch.fingerprint.startswith("all-MiniLM-L6-v2@")


def test_the_index_generation_changes_only_for_int8(tmp_path: Path) -> None:
    def of(backend: str) -> dict[str, object]:
        return index_settings(SinkSettings(data_dir=tmp_path, embedding_backend=backend))

    assert of("torch") == of("onnx")  # an index built with torch is the same generation under ONNX fp32
    assert "embedding_variant" not in of("onnx")  # the fingerprint of existing indexes stays as it was
    assert of("onnx-int8") == of("onnx") | {"embedding_variant": "int8"}
    assert (
        SinkSettings(data_dir=tmp_path, embedding_backend="onnx-int8").embedder_identity().endswith("+int8")
    )


def test_the_export_is_reused_and_a_corrupt_one_redone(cache_dir: Path, torch_vectors: np.ndarray) -> None:
    MiniLMEmbedder(backend="onnx", cache_dir=cache_dir).embed(TEXTS[:1])  # exported by now
    variant = onnx_export.VARIANTS["fp32"]
    path = onnx_export.model_file(cache_dir, variant)
    exports, mtime = onnx_export.EXPORTS.get("fp32", 0), path.stat().st_mtime_ns
    second = MiniLMEmbedder(backend="onnx", cache_dir=cache_dir)
    second.embed(TEXTS[:1])
    assert onnx_export.EXPORTS.get("fp32", 0) == exports and path.stat().st_mtime_ns == mtime  # reused

    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a half-written file
    assert not onnx_export.is_valid(path)
    # what a process killed while exporting leaves (its work folder, its renamed copy), and what a process
    # exporting right now has: the old is removed, the young left alone
    abandoned = [cache_dir / ".export-killed", cache_dir / f".{path.name}.killed.tmp"]
    in_progress = [cache_dir / ".export-running", cache_dir / f".{path.name}.running.tmp"]
    for folder in (abandoned[0], in_progress[0]):
        folder.mkdir()
        (folder / "plain.onnx").write_bytes(b"half")
    for file in (abandoned[1], in_progress[1]):
        file.write_bytes(b"half")
    for stale in abandoned:
        os.utime(stale, (1_000_000_000, 1_000_000_000))
    third = MiniLMEmbedder(backend="onnx", cache_dir=cache_dir)
    vectors = np.asarray(third.embed(TEXTS))
    assert onnx_export.EXPORTS["fp32"] == exports + 1 and onnx_export.is_valid(path)
    assert _cosines(vectors, torch_vectors).min() >= 0.999
    assert not any(stale.exists() for stale in abandoned) and all(young.exists() for young in in_progress)
    for young in in_progress:  # the other process's, gone when it finishes
        shutil.rmtree(young) if young.is_dir() else young.unlink()
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_two_processes_exporting_at_once_leave_one_good_file(tmp_path: Path) -> None:
    script = (
        "import sys; from pathlib import Path\n"
        "from unichunk.sinks.vectors.onnx_export import VARIANTS, ensure_model\n"
        "print(ensure_model(Path(sys.argv[1]), VARIANTS['fp32-plain']))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs[0] == outputs[1]
    assert onnx_export.is_valid(Path(outputs[0]))
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(outputs[0]).name]  # nothing half-written


def test_without_onnxruntime_it_falls_back_to_torch(
    cache_dir: Path, torch_vectors: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = MiniLMEmbedder(
        backend="onnx-int8", cache_dir=cache_dir, runtime_module="unichunk_no_such_runtime"
    )
    with caplog.at_level("WARNING", logger="unichunk.sinks.vectors.minilm"):
        vectors = np.asarray(embedder.embed(TEXTS))
    assert embedder.runs == "torch on cpu"
    assert (
        embedder.fingerprint == MiniLMEmbedder(backend="torch").fingerprint
    )  # torch's vectors, torch's name
    assert _cosines(vectors, torch_vectors).min() >= 0.9999
    (record,) = [r for r in caplog.records if "ONNX Runtime unavailable" in r.getMessage()]
    assert "unichunk_no_such_runtime" in record.getMessage()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=300), min_size=1, max_size=6))
def test_any_texts_give_one_unit_vector_each(cache_dir: Path, texts: list[str]) -> None:
    vectors = np.asarray(MiniLMEmbedder(backend="onnx", cache_dir=cache_dir).embed(texts))
    assert vectors.shape == (len(texts), 384)
    assert np.isfinite(vectors).all()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


def test_device_selection_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if HAS_CUDA else "cpu")
    monkeypatch.setenv("UNICHUNK_DEVICE", "cpu")
    monkeypatch.setenv("UNICHUNK_EMBEDDING_BACKEND", "onnx-int8")
    monkeypatch.setenv("UNICHUNK_MODEL_CACHE_DIR", str(tmp_path))
    embedder = make_embedder(SinkSettings())
    assert isinstance(embedder, MiniLMEmbedder)
    assert (embedder.device_setting, embedder.backend, embedder.cache_dir) == ("cpu", "onnx-int8", tmp_path)


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present: cuda is a valid choice here")
def test_cuda_asked_for_without_one_fails_clearly(cache_dir: Path) -> None:
    with pytest.raises(DeviceError, match="UNICHUNK_DEVICE=cuda"):
        resolve_device("cuda")
    with pytest.raises(EmbedderError, match="neither torch nor onnxruntime sees a CUDA device"):
        MiniLMEmbedder(device="cuda", cache_dir=cache_dir).embed(["x"])


def test_gpu_check_reports_what_it_found() -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "UNICHUNK_EVAL_DIR": "/nonexistent",
    }
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from benchmarks.gpu_check import found; print(json.dumps(found()))",
        ],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=True,
    )
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["torch.cuda.is_available()"] is HAS_CUDA or facts["torch.cuda.is_available()"] is False
    assert "CPUExecutionProvider" in facts["onnxruntime providers"]
    assert facts["UNICHUNK_DEVICE=auto resolves to"] == ("cuda" if HAS_CUDA else "cpu")
