"""The bf16 benchmark's loop computes what the shipped embedder returns (`embed_sums`), so its ratios are
about the vectors the pipeline stores; and its bf16 variant is really bfloat16 (close, not equal)."""

from __future__ import annotations

import numpy as np

from benchmarks.embedder_bf16 import batches, summed, variants
from unichunk.sinks.vectors.minilm import MiniLMEmbedder, load_minilm

TEXTS = [
    "Ownership rules in Rust.",
    "Borrowing lets code use a value without taking it. " * 5,
    "Traits.",
    "x",
]


def test_the_loop_sums_what_the_embedder_sums_and_bf16_is_close_not_equal() -> None:
    forwards = variants(compiled=False)
    prepared = batches(load_minilm("cpu").tokenizer, TEXTS, size=3)
    ordered = sorted(TEXTS, key=len)  # the loop's order
    shipped = np.asarray(MiniLMEmbedder(backend="torch").embed_sums(ordered), dtype=np.float32)
    shipped /= np.linalg.norm(shipped, axis=1, keepdims=True)
    fp32 = summed(forwards["fp32"], prepared).numpy()
    bf16 = summed(forwards["bf16"], prepared).numpy()
    assert fp32.shape == (len(TEXTS), 384)
    assert (fp32 * shipped).sum(axis=1).min() > 0.99999
    cosine = (bf16 * fp32).sum(axis=1)
    assert cosine.min() > 0.999 and not np.allclose(bf16, fp32, atol=1e-6)
