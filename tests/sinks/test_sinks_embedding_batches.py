"""MiniLM's batch shape: texts per call and texts per forward pass are separate settings, and the model
batch size changes the speed only, never a vector or its order; token counts need no model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.embedders import make_embedder
from unichunk.sinks.vectors.minilm import MiniLMEmbedder, load_minilm


def test_settings_reach_the_embedder(tmp_path: Path) -> None:
    settings = SinkSettings(data_dir=tmp_path, embedding_batch_size=96, embedding_model_batch_size=12)
    embedder = make_embedder(settings)
    assert isinstance(embedder, MiniLMEmbedder)
    assert (embedder.batch_size, embedder.model_batch_size) == (96, 12)
    defaults = MiniLMEmbedder()
    plain = SinkSettings(data_dir=tmp_path)
    assert (defaults.batch_size, defaults.model_batch_size) == (
        plain.embedding_batch_size,
        plain.embedding_model_batch_size,
    )


@pytest.mark.parametrize("backend", ["torch", "torch-bf16"])
def test_model_batch_size_changes_no_vector_nor_order(backend: str) -> None:
    # lengths all over the place, so sorting within the call really reorders them
    texts = [("ownership and borrowing " * (1 + (i * 7) % 23)) + f"text {i}" for i in range(40)]
    one_batch = np.array(MiniLMEmbedder(batch_size=64, model_batch_size=64, backend=backend).embed(texts))
    small = np.array(MiniLMEmbedder(batch_size=64, model_batch_size=4, backend=backend).embed(texts))
    assert one_batch.shape == small.shape == (40, 384)
    if backend == "torch":
        assert np.allclose(one_batch, small, atol=1e-5)
    else:  # bfloat16 keeps 8 bits of mantissa: other batch shapes round the sums differently
        assert np.sum(one_batch * small, axis=1).min() > 0.9995
    # each vector belongs to its own text: the nearest vector of text i is text i's
    assert (np.argmax(small @ one_batch.T, axis=1) == np.arange(40)).all()


def test_counting_tokens_loads_no_model() -> None:
    script = (
        "import sys\n"
        "from unichunk.sinks.vectors.minilm import MiniLMEmbedder\n"
        "print(MiniLMEmbedder().count_tokens(['hello world', 'word ' * 300]), 'torch' in sys.modules)\n"
    )
    root = Path(__file__).parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[4, 302] False", out.stderr


def test_token_counts_are_the_models_own() -> None:
    texts = ["hello world", "Ownership: `&mut T` borrows — naïve café ½ 🦀", "word " * 300, "", "a\u200bb\tc"]
    tokenizer = load_minilm().tokenizer
    expected = [len(ids) for ids in tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]]
    assert MiniLMEmbedder().count_tokens(texts) == expected
