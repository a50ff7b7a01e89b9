"""The retrieval benchmark's budget-matched view, question pairing and `--configs` parsing."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.retrieval_quality import DEPTH, Question, curve, paired, parse_configs, within_budget


def _curves(rows: list[list[tuple[float, float]]]) -> np.ndarray:
    """Per question, (recall, tokens) after 1, 2, ... hits; later rows repeat the last (no more hits)."""
    out = np.zeros((len(rows), DEPTH + 1, 4))
    for q, steps in enumerate(rows):
        for n in range(1, DEPTH + 1):
            recall, tokens = steps[min(n, len(steps)) - 1]
            out[q, n, 0], out[q, n, 3] = recall, tokens
    return out


def test_within_budget_stops_before_the_hit_that_overflows() -> None:
    curves = _curves([[(0.5, 400), (1.0, 800)], [(0.0, 400), (0.0, 800), (1.0, 1200)]])
    assert within_budget(curves, 399) == (0.0, 0.0)  # not even the first hit fits
    assert within_budget(curves, 800) == (0.5, 800.0)  # q1 complete, q2 still missing its third hit
    assert within_budget(curves, 1199) == (0.5, 800.0)
    assert within_budget(curves, 4000) == (1.0, 1000.0)


def test_paired_counts_questions_each_side_covers_better() -> None:
    ours = _curves([[(1.0, 1)], [(0.5, 1)], [(0.0, 1)]])
    theirs = _curves([[(0.5, 1)], [(0.5, 1)], [(0.25, 1)]])
    assert paired(ours, theirs, 5) == pytest.approx((0.25, 1, 1))


def test_paired_at_a_budget_compares_what_each_side_fits() -> None:
    big = _curves([[(1.0, 800)]])  # one big chunk holds the answer
    small = _curves([[(0.5, 200), (1.0, 400)]])  # two small ones do, at half the tokens
    assert paired(small, big, budget=500) == pytest.approx((1.0, 1, 0))
    assert paired(small, big, budget=800) == pytest.approx((0.0, 0, 0))
    assert paired(small, big, k=1) == pytest.approx((-0.5, 0, 1))


def test_curve_is_cumulative_and_merges_overlapping_hits() -> None:
    """Two overlapping windows over the reference count once; tokens never shrink as hits are added."""
    question = Question("q", "c", ((10, 20),))
    starts = {"d": np.arange(0, 100, 5)}  # a token every 5 characters
    out = curve(question, "d", [("d", 0, 15), ("d", 10, 30), ("d", 50, 60)], starts)
    assert out[1, 0] == pytest.approx(0.5) and out[2, 0] == pytest.approx(1.0)
    assert out[2, 3] == 6  # [0, 30) merged: 6 tokens, not 3 + 4
    assert out[3, 3] == 8 and (out[3:] == out[3]).all()
    assert (np.diff(out[:, 3]) >= 0).all()


def test_parse_configs_labels_and_dedups() -> None:
    labels = [
        c[0] for c in parse_configs("sentence:390/58,markdown:400/60,fixed_chars:1600/240,sentence:390/58")
    ]
    assert labels == ["sentence 390/58", "markdown 400/60", "fixed_chars 1600c/240"]
    assert len(parse_configs("quick")) == 2
    with pytest.raises(SystemExit, match="bad --configs item"):
        parse_configs("sentense:400/60")
