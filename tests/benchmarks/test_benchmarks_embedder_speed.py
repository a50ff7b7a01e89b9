"""The embedder benchmark's comparison on a few texts of its own: every variant against torch in the same
rounds, with its cosine to torch's vectors, and the table it prints (real torch and ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.embedder_speed import make, report, throughput

TEXTS = ["Ownership rules in Rust.", "Borrowing lets code use a value without taking it. " * 5, "", "Traits."]


def test_variants_are_compared_with_torch_in_the_same_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    embedders = {name: make(name, tmp_path) for name in ("torch", "fp32", "int8-perchannel")}
    speed = throughput(embedders, TEXTS, rounds=2)
    assert speed["torch"]["ratio_to_torch"] == 1.0 and speed["torch"]["cosine_min"] > 0.9999
    assert speed["fp32"]["cosine_min"] > 0.999 and speed["fp32"]["runs"] == "onnx:fp32 on cpu"
    assert 0.95 < speed["int8-perchannel"]["cosine_min"] < 0.9999  # int8 really ran
    assert all(len(row["ratios"]) == 2 and row["texts_per_s"] > 0 for row in speed.values())
    assert (
        speed["fp32"]["fingerprint"]
        == speed["torch"]["fingerprint"]
        != speed["int8-perchannel"]["fingerprint"]
    )
    report(speed, {"torch": {"vectors": [50.0] * 3, "hybrid": [60.0] * 3},
                   "fp32": {"vectors": [50.0] * 3, "hybrid": [59.5] * 3}}, len(TEXTS))  # fmt: skip
    out = capsys.readouterr().out
    assert "| int8-perchannel | onnx:int8-perchannel on cpu |" in out
    assert "59.5 (-0.5)" in out
