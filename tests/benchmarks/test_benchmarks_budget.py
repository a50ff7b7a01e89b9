"""The strict metric's arithmetic on hand-made spans: every expected number below was worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.budget_metric import (
    FixedBM25,
    TokenMeter,
    fill_budget,
    interval_scores,
    merge,
    overlap,
    paired_bootstrap,
    sign_test,
    strict_grid,
    strict_scores,
    subtract,
)

# A document of 100 characters whose tokens start every 5 characters: 20 tokens, [0,5) [5,10) ... [95,100).
EVERY_FIVE = TokenMeter({"d": np.arange(0, 101, 5)})


def test_interval_arithmetic() -> None:
    assert merge([(10, 20), (0, 5), (5, 8), (15, 30), (40, 40)]) == [(0, 8), (10, 30)]  # touching joins
    assert subtract((0, 50), [(10, 20), (30, 35)]) == [(0, 10), (20, 30), (35, 50)]
    assert subtract((12, 18), [(10, 20)]) == []
    assert overlap([(0, 10), (20, 30)], [(5, 25)]) == 5 + 5


def test_fill_budget_dedupes_overlaps_and_cuts_the_last_chunk_at_its_head() -> None:
    # [0,10) costs 10; [5,20) costs only its 10 new characters; [30,40) gets the 5 left: [30,35)
    assert fill_budget([("d", 0, 10), ("d", 5, 20), ("d", 30, 40)], 25) == {"d": [(0, 20), (30, 35)]}
    # a chunk wholly inside what was taken costs nothing, and the next still gets the whole rest
    assert fill_budget([("d", 0, 10), ("d", 2, 8), ("e", 0, 100)], 15) == {"d": [(0, 10)], "e": [(0, 5)]}
    # a chunk straddling a taken one spends its new characters in text order: [0,5) then [15,20)
    assert fill_budget([("d", 5, 15), ("d", 0, 30)], 20) == {"d": [(0, 20)]}
    assert fill_budget([("d", 5, 15), ("d", 0, 30)], 13) == {"d": [(0, 3), (5, 15)]}  # 3 left: [0,3)
    assert fill_budget([], 1000) == {}


def test_fill_budget_in_tokens_counts_the_tokens_starting_inside() -> None:
    assert EVERY_FIVE.cost("d", 0, 23) == 5  # tokens at 0, 5, 10, 15, 20
    assert EVERY_FIVE.cost("d", 12, 40) == 5  # at 15, 20, 25, 30, 35
    # 3 tokens from 0: the cut falls where the 4th token starts
    assert fill_budget([("d", 0, 23)], 3, EVERY_FIVE) == {"d": [(0, 15)]}
    # [0,23) costs 5, then [12,40) only its new [23,40): tokens at 25, 30, 35 = 3; 1 left of 9 buys [40,45)
    assert fill_budget([("d", 0, 23), ("d", 12, 40), ("d", 40, 90)], 9, EVERY_FIVE) == {"d": [(0, 45)]}
    assert fill_budget([("d", 95, 100)], 50, EVERY_FIVE) == {"d": [(95, 100)]}  # the end of the text


def test_strict_scores_exact_numbers() -> None:
    refs = [(100, 200), (150, 250)]  # overlapping references merge: [100, 250), 150 characters
    # 120 characters retrieved: [80, 200); 100 of them in the reference; union 170
    r, p, iou = strict_scores(refs, "d", [("d", 80, 200), ("d", 300, 400)], 120)
    assert (r, p, iou) == pytest.approx((100 / 150, 100 / 120, 100 / 170))
    # the budget reaches on: [80,200) 120 + [100,200) of x 100 + [200,260) 60 = 280; x is noise
    r, p, iou = strict_scores(refs, "d", [("d", 80, 200), ("x", 100, 200), ("d", 200, 260)], 300)
    assert (r, p, iou) == pytest.approx((150 / 150, 150 / 280, 150 / 280))
    assert strict_scores(refs, "d", [], 1000) == (0.0, 0.0, 0.0)


def test_strict_scores_in_tokens_and_on_a_grid() -> None:
    refs = [(20, 40)]  # 20 characters
    # 4 tokens from [10, 60): [10, 30) holds 10 reference characters of the 20 retrieved; union 30
    assert strict_scores(refs, "d", [("d", 10, 60)], 4, EVERY_FIVE) == pytest.approx((0.5, 0.5, 10 / 30))
    grid = strict_grid(refs, "d", [("d", 10, 60)], [2, 4, 10], EVERY_FIVE)
    assert grid.shape == (3, 3)
    assert grid[:, 0] == pytest.approx([0.0, 0.5, 1.0])  # [10,20) misses it; [10,60) covers it all
    assert grid[2, 1] == pytest.approx(20 / 50)


def test_interval_scores_count_other_documents_as_retrieved_noise() -> None:
    taken = {"d": [(0, 10)], "e": [(0, 30)]}
    assert interval_scores([(5, 15)], "d", taken) == pytest.approx((5 / 10, 5 / 40, 5 / 45))


@given(
    st.lists(st.tuples(st.integers(0, 90), st.integers(0, 30)), max_size=20),
    st.integers(0, 200),
    st.booleans(),
)
def test_fill_budget_never_exceeds_the_budget_and_takes_only_retrieved_characters(
    hits, budget, tokens
) -> None:
    ranked = [("d", s, min(100, s + n)) for s, n in hits]
    meter = EVERY_FIVE if tokens else None
    taken = fill_budget(ranked, budget, meter).get("d", [])
    cost = sum(EVERY_FIVE.cost("d", s, e) if tokens else e - s for s, e in taken)
    assert cost <= budget
    union = merge([(s, e) for _, s, e in ranked])
    if not tokens:  # characters: the budget is filled unless the hits run out
        assert cost == min(budget, sum(e - s for s, e in union))
    assert all(not subtract(span, union) for span in taken)  # nothing retrieved that no hit covers


def test_sign_test_exact_two_sided_values() -> None:
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    assert sign_test(9, 1) == pytest.approx(2 * 11 / 1024)  # (C(10,0) + C(10,1)) / 2^10, both tails
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0


def test_paired_bootstrap_counts_and_brackets_the_mean() -> None:
    p = paired_bootstrap(np.array([1.0, 0.5, 0.2, 0.3]), np.array([0.5, 0.5, 0.4, 0.3]))
    assert p.mean == pytest.approx(0.075) and (p.wins, p.losses, p.ties) == (1, 1, 2)
    assert p.low <= p.mean <= p.high and p.p == 1.0 and not p.significant
    sure = paired_bootstrap(np.full(20, 1.0), np.zeros(20))
    assert sure.significant and sure.p == pytest.approx(2 / 2**20)


def test_fixed_bm25_ranks_the_matching_span_first() -> None:
    bm25 = FixedBM25([("d", 0, 5), ("d", 5, 10)], ["harbour lights at night", "garden roses in june"])
    assert bm25.ranked("roses garden", 5) == [("d", 5, 10)]
    assert bm25.ranked("zzz unknown", 5) == []
