"""MiniLM in fp32 compiled ahead of time (`torch` on a CPU, `auto` where the CPU has no bf16 instructions):
torch's vectors to float rounding under the same fingerprint, a process that loads the cached package
imports neither transformers nor sentence-transformers, and `UNICHUNK_EMBEDDING_COMPILED=false` runs the
uncompiled model. The package's cache, locking, recovery and running without a compiler are tested with
bfloat16's (`test_sinks_bf16_embedder`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from unichunk.index.run import index_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.embedders import make_embedder
from unichunk.sinks.vectors.minilm import MiniLMEmbedder

TEXTS = [
    "Ownership is a set of rules that govern how a Rust program manages memory.",
    "word " * 300,
    "",
    "naïve café ½ 🦀 — `&mut T` borrows",
    "A second, longer text, so that the batches of two pad texts of other lengths to their longest one.",
]


def test_compiled_fp32_gives_torchs_vectors_and_sums_under_torchs_fingerprint() -> None:
    # model batches of 2: texts of other lengths share a batch, so padding and sorting are exercised
    compiled = MiniLMEmbedder(backend="torch", model_batch_size=2)
    uncompiled = MiniLMEmbedder(backend="torch", compiled=False, model_batch_size=2)
    assert compiled.runs == "torch:compiled on cpu" and uncompiled.runs == "torch on cpu"
    fast, plain = np.asarray(compiled.embed(TEXTS)), np.asarray(uncompiled.embed(TEXTS))
    assert np.abs(fast - plain).max() < 1e-5  # unit vectors: the last float digits only
    sums = np.asarray(compiled.embed_sums(TEXTS)), np.asarray(uncompiled.embed_sums(TEXTS))
    assert np.allclose(sums[0], sums[1], rtol=1e-4, atol=1e-3)
    assert np.abs(np.asarray(compiled.embed_query(TEXTS[0])) - plain[0]).max() < 1e-5
    assert compiled.fingerprint == uncompiled.fingerprint  # the same embedder for an index and a cache


def test_a_process_with_the_package_cached_imports_no_transformers() -> None:
    assert MiniLMEmbedder(backend="torch").runs == "torch:compiled on cpu"  # compiled here if not yet
    script = (
        "import sys\n"
        "from unichunk.sinks.vectors.minilm import MiniLMEmbedder\n"
        "e = MiniLMEmbedder(backend='torch')\n"
        "e.embed(['Ownership rules'])\n"
        "print(e.runs, 'transformers' in sys.modules, 'sentence_transformers' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "torch:compiled on cpu False False"


def test_the_setting_turns_compiling_off_and_spacy_follows_the_gil(tmp_path) -> None:
    plain = SinkSettings(data_dir=tmp_path, embedding_backend="torch", embedding_compiled=False, device="cpu")
    assert make_embedder(plain).runs == "torch on cpu"
    assert not plain.minilm_compiled() and not plain.spacy_in_worker()  # torch eager releases the GIL
    compiled = SinkSettings(data_dir=tmp_path, embedding_backend="torch", device="cpu")
    assert compiled.minilm_compiled() and compiled.embedding_compiled  # the default
    assert index_settings(compiled) == index_settings(plain)  # the same vectors: one generation
    assert not SinkSettings(data_dir=tmp_path, embedding_backend="onnx").minilm_compiled()
    assert not SinkSettings(data_dir=tmp_path, embedding_backend="torch", device="cuda").minilm_compiled()
