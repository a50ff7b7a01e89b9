"""The default-embedder benchmark compares what it says it compares: MiniLM as the peers run it (fp32
through sentence-transformers) against our fp32 uncompiled, bfloat16 uncompiled and the default as this
machine resolves it (a compiled package); and its paired table (shared with `benchmarks.model_input`)
subtracts the right run from the right one."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.default_embedder import BASELINE, UNCOMPILED, backends
from benchmarks.model_input import paired_table
from unichunk.retrieval.evaluation.questions import Question
from unichunk.sinks.config import machine_backend


def test_the_baseline_is_the_peers_fp32_and_ours_give_its_sums() -> None:
    embedders = backends()
    assert list(embedders) == [BASELINE, UNCOMPILED, "bf16 uncompiled", "default (auto)"]
    assert embedders[UNCOMPILED].runs == "torch on cpu"
    assert embedders["bf16 uncompiled"].runs == "torch-bf16 on cpu"
    expected = "torch-bf16:compiled" if machine_backend("auto") == "torch-bf16" else "torch:compiled"
    assert embedders["default (auto)"].runs == f"{expected} on cpu"
    texts = ["Ownership rules.", "Borrowing lets code use a value without taking it. " * 6, "x"]
    peers = np.asarray(embedders[BASELINE].embed_sums(texts))
    ours = np.asarray(embedders[UNCOMPILED].embed_sums(texts))
    default = np.asarray(embedders["default (auto)"].embed_sums(texts))
    assert peers.shape == ours.shape == (3, 384)
    assert np.allclose(ours, peers, rtol=1e-4, atol=1e-3)  # fp32 both: batching changes the last digits only
    if expected == "torch:compiled":  # fp32 compiled: the same arithmetic, fused
        assert np.allclose(default, ours, rtol=1e-4, atol=1e-3)


def _scores(recalls: list[float]) -> dict[str, dict]:
    def at(value: float) -> dict:
        return {"chars": {budget: {"recall": value} for budget in ("1000", "2000", "4000")}}

    return {f"q{i}": {"live": at(value), "live:vectors": at(value / 2)} for i, value in enumerate(recalls)}


def test_the_paired_table_reads_other_minus_base_per_half(capsys: pytest.CaptureFixture[str]) -> None:
    questions = [Question(id=f"q{i}", text=f"question {i}") for i in range(4)]
    paired_table(_scores([0.5, 0.5, 0.5, 0.5]), _scores([0.6, 0.6, 0.6, 0.6]), questions, ("base", "new"))
    out = capsys.readouterr().out
    assert "| retriever | half | base | new | new - base (fused: 95 % interval) |" in out
    fused_all = next(line for line in out.splitlines() if line.startswith("| fused (shipped search) | all |"))
    assert "| 50.0 / 50.0 / 50.0 | 60.0 / 60.0 / 60.0 | +10.0 [+10.0, +10.0]" in fused_all
    assert "| vectors alone | all | 25.0 / 25.0 / 25.0 | 30.0 / 30.0 / 30.0 | +5.0 / +5.0 / +5.0 |" in out
