"""MiniLM with bfloat16 weights (`UNICHUNK_EMBEDDING_BACKEND=torch-bf16`): the real model, vectors within
cosine 0.999 of torch fp32's (sums too), and a distinct embedder, so an index never mixes the two."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unichunk.index.run import index_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.minilm import MiniLMEmbedder

TEXTS = [
    "Ownership is a set of rules that govern how a Rust program manages memory.",
    "Qdrant stores vectors; BM25 ranks chunks by keyword overlap.",
    "word " * 300,
    "",
    "naïve café ½ 🦀 — `&mut T` borrows",
]


def test_bf16_vectors_and_sums_are_torchs_to_three_decimals_yet_not_the_same_embedder() -> None:
    fp32, bf16 = MiniLMEmbedder(backend="torch"), MiniLMEmbedder(backend="torch-bf16")
    exact, low = np.asarray(fp32.embed(TEXTS)), np.asarray(bf16.embed(TEXTS))
    assert low.dtype == np.float64 and low.shape == (len(TEXTS), 384)
    cosines = np.sum(exact * low, axis=1)
    assert cosines.min() > 0.999, cosines
    assert not np.array_equal(exact, low)  # other arithmetic: other digits
    assert np.allclose(np.linalg.norm(low, axis=1), 1.0, atol=1e-6)  # unit vectors, as torch's
    sums = np.asarray(bf16.embed_sums(TEXTS))
    composed = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    assert np.sum(composed * exact, axis=1).min() > 0.999
    assert bf16.runs.startswith("torch-bf16 on ")
    assert bf16.fingerprint == fp32.fingerprint + "+bf16"


def test_bf16_is_a_generation_of_its_own(tmp_path: Path) -> None:
    plain = SinkSettings(data_dir=tmp_path)
    bf16 = SinkSettings(data_dir=tmp_path, embedding_backend="torch-bf16")
    assert index_settings(bf16) == index_settings(plain) | {"embedding_variant": "bf16"}
    assert bf16.embedder_identity() == plain.embedder_identity() + "+bf16"
    # an endpoint's vectors do not depend on how MiniLM would have run
    endpoint = SinkSettings(data_dir=tmp_path, embedder="openai", embedding_backend="torch-bf16")
    assert "embedding_variant" not in index_settings(endpoint)
