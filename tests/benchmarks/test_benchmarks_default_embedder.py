"""The default-embedder benchmark compares what it says it compares: torch fp32, bfloat16 uncompiled and the
shipped default as this machine resolves it; and its paired table (shared with `benchmarks.model_input`)
subtracts the right run from the right one."""

from __future__ import annotations

import pytest

from benchmarks.default_embedder import backends
from benchmarks.model_input import paired_table
from unichunk.retrieval.evaluation.questions import Question
from unichunk.sinks.config import machine_backend


def test_the_backends_are_fp32_uncompiled_bf16_and_the_machines_default() -> None:
    embedders = backends()
    assert list(embedders) == ["torch fp32", "bf16 uncompiled", "default (auto)"]
    assert embedders["torch fp32"].runs == "torch on cpu"
    assert embedders["bf16 uncompiled"].runs == "torch-bf16 on cpu"
    expected = "torch-bf16:compiled" if machine_backend("auto") == "torch-bf16" else "torch"
    assert embedders["default (auto)"].runs == f"{expected} on cpu"


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
