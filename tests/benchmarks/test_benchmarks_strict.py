"""The strict character-budget metric: its arithmetic on hand-made spans, budget filling, the paired
comparison, and an end-to-end run on a tiny corpus that prints the strict table and writes the plots."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.budget_metric import (
    FixedBM25,
    fill_budget,
    merge,
    paired_bootstrap,
    small_to_big,
    strict_scores,
    subtract,
)
from benchmarks.retrieval_quality import main
from benchmarks.strict_report import GRID, print_strict, write_plots


def test_fill_budget_dedupes_overlaps_and_cuts_the_last_chunk_at_its_head() -> None:
    # [0,10) costs 10; [5,20) costs only its 10 new characters; [30,40) gets the 5 left: [30,35)
    assert fill_budget([("d", 0, 10), ("d", 5, 20), ("d", 30, 40)], 25) == {"d": [(0, 20), (30, 35)]}
    # a chunk wholly inside what was taken costs nothing, and the next still gets the whole rest
    assert fill_budget([("d", 0, 10), ("d", 2, 8), ("e", 0, 100)], 15) == {"d": [(0, 10)], "e": [(0, 5)]}
    # a chunk straddling a taken one spends its new characters in text order: [0,5) then [15,20)
    assert fill_budget([("d", 5, 15), ("d", 0, 30)], 20) == {"d": [(0, 20)]}
    assert fill_budget([("d", 5, 15), ("d", 0, 30)], 13) == {"d": [(0, 3), (5, 15)]}  # 3 left: [0,3)
    assert fill_budget([], 1000) == {}


def test_strict_scores_exact_numbers() -> None:
    refs = [(100, 200), (150, 250)]  # overlapping references merge: [100, 250), 150 characters
    # 120 characters retrieved: [80, 200); 100 of them in the reference
    r, p, iou = strict_scores(refs, "d", [("d", 80, 200), ("d", 300, 400)], 120)
    assert (r, p, iou) == pytest.approx((100 / 150, 100 / 120, 100 / 170))
    # the budget reaches the second chunk: [80,200) + [300,330); a hit in another document is noise
    r, p, iou = strict_scores(refs, "d", [("d", 80, 200), ("x", 100, 200), ("d", 200, 260)], 300)
    assert (r, p, iou) == pytest.approx((150 / 150, 150 / 280, 150 / 280))
    assert strict_scores(refs, "d", [], 1000) == (0.0, 0.0, 0.0)


@given(
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 200)), max_size=20),
    st.integers(0, 2000),
)
def test_fill_budget_never_exceeds_the_budget_and_takes_only_retrieved_characters(hits, budget) -> None:
    ranked = [("d", s, s + n) for s, n in hits]
    taken = fill_budget(ranked, budget).get("d", [])
    total = sum(e - s for s, e in taken)
    assert total <= budget
    union = merge([(s, e) for _, s, e in ranked])
    assert total == min(budget, sum(e - s for s, e in union))  # fills the budget unless hits run out
    assert all(not subtract(span, union) for span in taken)  # nothing retrieved that no hit covers


def test_small_to_big_follows_each_hit_with_its_neighbours() -> None:
    a, b, c = ("d", 0, 10), ("d", 10, 20), ("d", 20, 30)
    near = {a: (None, b), b: (a, c), c: (b, None)}
    assert small_to_big([b, a], near) == [b, c, a, a, b]


def test_fixed_bm25_ranks_the_matching_span_first() -> None:
    bm25 = FixedBM25([("d", 0, 5), ("d", 5, 10)], ["harbour lights at night", "garden roses in june"])
    assert bm25.ranked("roses garden", 5) == [("d", 5, 10)]
    assert bm25.ranked("zzz unknown", 5) == []


def test_paired_bootstrap_counts_and_brackets_the_mean() -> None:
    d, lo, hi, wins, losses, ties = paired_bootstrap(
        np.array([1.0, 0.5, 0.2, 0.3]), np.array([0.5, 0.5, 0.4, 0.3])
    )
    assert d == pytest.approx(0.075) and (wins, losses, ties) == (1, 1, 2)
    assert lo <= d <= hi


def test_print_and_plot_on_hand_made_scores(tmp_path, capsys) -> None:
    ours = np.zeros((4, len(GRID), 3))
    ours[:, :, 0] = np.linspace(0.2, 0.9, len(GRID))
    theirs = ours * 0.5
    strict = {("auto (x)", "fixed-bm25"): ours, ("base", "fixed-bm25"): theirs}
    configs, baseline = ["auto (x)", "base"], {"auto (x)": False, "base": True}
    print_strict(strict, configs, baseline, chars_per_token=4.0)
    out = capsys.readouterr().out
    i = GRID.index(1000)
    assert f"| auto (x) | {100 * ours[0, i, 0]:.1f} / 0.0 / 0.0 |" in out
    assert "1,000 chars ~ 250 tokens" in out and "| base | +" in out and "4/0/0" in out
    paths = write_plots(strict, configs, baseline, tmp_path / "plots")
    assert [p.name for p in paths] == ["strict_recall_fixed-bm25.png"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_strict_benchmark_end_to_end_on_a_tiny_corpus(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("UNICHUNK_EVAL_DIR", str(tmp_path / "no-eval-data"))
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    filler = " ".join(
        f"Paragraph {i} talks about harbour boats and garden sheds at length." for i in range(60)
    )
    answer = "The lighthouse keeper logs every passing vessel in a leather-bound book."
    text = f"# Harbour\n\n{filler}\n\n## Keeper\n\n{answer}\n\n{filler}\n"
    (corpora / "harbour.md").write_text(text, encoding="utf-8")
    questions = tmp_path / "questions.csv"
    with questions.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "references", "corpus_id"])
        ref = {
            "content": answer,
            "start_index": text.index(answer),
            "end_index": text.index(answer) + len(answer),
        }
        writer.writerow(["lighthouse keeper leather-bound book", json.dumps([ref]), "harbour"])
    plots = tmp_path / "plots"
    main(["--corpora", str(corpora), "--questions", str(questions), "--quick", "--configs", "auto",
          "--cache-dir", "", "--strict-only", "--plots-dir", str(plots)])  # fmt: skip
    out = capsys.readouterr().out
    assert "### strict character budget" in out and "#### fixed-bm25" in out and "held-out check" in out
    row = next(line for line in out.splitlines() if line.startswith("| auto (") and "/" in line)
    assert row.split("|")[2].strip().startswith("100.0 /")  # the answer sentence fills part of 1,000 chars
    assert sorted(p.name for p in plots.iterdir()) == sorted(
        f"strict_recall_{r}.png" for r in ("fixed-bm25", "fixed-bm25_s2b", "keywords", "vectors", "hybrid")
    )
