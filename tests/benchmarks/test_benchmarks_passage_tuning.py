"""Passage tuning (issue 27): its choice rule, and a whole run on small data of its own, ingested as shipped
(real stores, the session's Prefect server), that tunes on one half and reports the other."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from texts import small_eval_set

from benchmarks.passage_tuning import choose, main
from unichunk.retrieval.passages import LEXICAL_WEIGHT, PASSAGE_HITS


def test_the_choice_is_the_best_mean_and_ties_go_to_the_fewest_hits_cut_then_the_higher_mean():
    flat = np.full((4, 3), 0.8)
    tuned = {None: flat, (10, 1.0): flat + 0.01, (3, 0.5): flat + 0.008, (3, 1.0): flat + 0.009}
    assert choose(tuned) == (3, 1.0)  # within a quarter point of the best; fewer hits cut; higher mean
    assert choose({None: flat, (3, 1.0): flat + 0.01}) == (3, 1.0)  # a point is no tie
    assert choose({None: flat, (3, 1.0): flat + 0.002}) is None  # passages must earn their place


def test_a_whole_run_tunes_on_one_half_and_reports_the_other(pipeline_env: Path, tmp_path, capsys):
    corpora, questions = small_eval_set(tmp_path)
    main(["--data-dir", str(pipeline_env), "--corpora", str(corpora), "--questions", str(questions)])
    out = capsys.readouterr().out
    tune, report = out.split("\nreport half (")[0], out.split("\nreport half (")[1]
    assert tune.startswith("tune half (4 questions)") and report.startswith(
        "4 questions, not used to choose)"
    )
    assert (
        out.count("<- chosen") == 1
        and f"shipped now: hits cut {PASSAGE_HITS}, weight {LEXICAL_WEIGHT}" in out
    )
    rows = [line for line in tune.splitlines()[1:] if line.startswith("  ")]
    assert len(rows) == 26 and "no passages" in tune  # every candidate, none included
    means = [float(line.rsplit("(", 1)[1].rstrip(")").split(")")[0]) for line in rows]
    assert means == sorted(means, reverse=True)  # best first
    assert "search() over 8 questions, interleaved: p50 " in out and " ms with (p90 " in out
    context = out.split("\nwhat a generator reads: result.context (k 5, neighbours ±1), recall (%) at ")[1]
    assert " tokens (1000 / 2000 / 4000 characters), mean\n  tune half: hits alone " in context
    assert "\n  report half: hits alone " in context and context.count("paired on the report half, ") == 3
