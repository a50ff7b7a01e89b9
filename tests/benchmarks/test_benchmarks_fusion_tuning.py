"""Fusion tuning (issue 27): the score fusion it measures, its choice rule, and a whole run on small data of
its own (real BM25Sink, in-memory Qdrant and MiniLM) that tunes on one half and reports the other."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from texts import GARDEN, small_eval_set
from texts import repeated as _text

from benchmarks.fusion_tuning import (
    Candidate,
    adds_and_costs_none,
    candidates,
    choose,
    main,
    old_default,
    score_fuse,
    uses_extra,
    without_extra,
)
from benchmarks.retrieval_quality import load_corpora, load_questions
from unichunk.retrieval.fusion import rrf_fuse
from unichunk.retrieval.ranking import RetrievalSettings
from unichunk.sinks.base import ScoredChunk


def _found(chunk_id: str, score: float) -> ScoredChunk:
    return ScoredChunk(chunk_id, "doc", 0, 0, 4, "text", score=score)


def test_minmax_fusion_scales_each_list_and_counts_a_missing_chunk_as_last():
    # keywords 10 / 6 / 2 -> 1 / .5 / 0; vectors .9 / .8 -> 1 / 0 (raw scales differ by 10x)
    rankings = {
        "keywords": [_found("a", 10), _found("b", 6), _found("c", 2)],
        "vectors": [_found("b", 0.9), _found("d", 0.8)],
    }
    fused = score_fuse(rankings, k=10, weights={"keywords": 0.5, "vectors": 0.5}, normalise="minmax")
    # b .75, a .5; c and d 0 (each its list's last), d first by its better rank (2nd against 3rd)
    assert [h.chunk_id for h in fused] == ["b", "a", "d", "c"]
    assert [h.score for h in fused] == pytest.approx([0.75, 0.5, 0.0, 0.0])
    assert fused[0].ranks == {"keywords": 2, "vectors": 1} and fused[0].scores["keywords"] == 6


def test_zscore_fusion_orders_by_weighted_deviations():
    rankings = {"keywords": [_found("a", 3), _found("b", 1)], "vectors": [_found("b", 5), _found("a", 1)]}
    ahead = score_fuse(rankings, weights={"keywords": 0.6, "vectors": 0.4}, normalise="zscore")
    behind = score_fuse(rankings, weights={"keywords": 0.4, "vectors": 0.6}, normalise="zscore")
    assert [h.chunk_id for h in ahead] == ["a", "b"] and [h.chunk_id for h in behind] == ["b", "a"]


def test_an_rrf_candidate_is_the_shipped_rrf_on_its_depth():
    lists = {"keywords": [_found(c, 1.0) for c in "abcdef"], "vectors": [_found(c, 1.0) for c in "fedxyz"]}
    candidate = Candidate("rrf", (("keywords", 1.0), ("vectors", 0.5)), depth=3, rrf_k=2)
    cut = {name: found[:3] for name, found in lists.items()}
    expected = rrf_fuse(cut, k=40, weights={"keywords": 1.0, "vectors": 0.5}, rrf_k=2)
    assert [h.chunk_id for h in candidate.fuse(lists)] == [h.chunk_id for h in expected]


def test_the_choice_is_the_best_mean_and_ties_go_to_the_fewest_changes():
    old = old_default(["keywords", "vectors"])
    grid = candidates(["keywords", "vectors"])
    assert old in grid and {c.method for c in grid} == {"rrf", "minmax", "zscore"}
    one_change = Candidate("rrf", old.weights, old.depth, 10)
    three = Candidate("zscore", (("keywords", 0.7), ("vectors", 0.3)), 100)
    scored = {old: np.full((4, 3), 0.80), one_change: np.full((4, 3), 0.81), three: np.full((4, 3), 0.812)}
    assert choose(scored, old) == one_change  # within the tie of the best, one change beats three
    scored[three] = np.full((4, 3), 0.85)
    assert choose(scored, old) == three  # clearly best: chosen however many constants it changes
    assert one_change.changes(old) == 1 and three.changes(old) == 3 and old.changes(old) == 0


def test_a_third_list_is_weighed_from_zero_and_must_add_without_costing():
    retrievers = ["keywords", "vectors", "graph"]
    old, grid = old_default(retrievers), candidates(retrievers)
    assert dict(old.weights)["graph"] == 0.0 and old in grid and not uses_extra(old)
    assert {dict(c.weights)["graph"] for c in grid if c.method == "rrf"} == {
        0.0,
        0.25,
        0.5,
        0.75,
        1.0,
        1.5,
        2.0,
    }
    assert all(abs(sum(w for _, w in c.weights) - 1.0) < 1e-9 for c in grid if c.method != "rrf")
    with_graph = Candidate("rrf", (("keywords", 1.0), ("vectors", 1.0), ("graph", 0.25)), 40, 2)
    assert uses_extra(with_graph) and without_extra(with_graph) == Candidate(
        "rrf", (("keywords", 1.0), ("vectors", 1.0), ("graph", 0.0)), 40, 2
    )
    assert adds_and_costs_none(np.array([0.01, 0.0, 0.0]))
    assert not adds_and_costs_none(np.array([0.012, -0.004, 0.019]))  # the report half's, in issue 27
    assert not adds_and_costs_none(np.zeros(3))  # adding nothing is not adding


def test_a_whole_run_tunes_on_one_half_and_reports_the_other(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UNICHUNK_EVAL_DIR", str(tmp_path / "no-eval-data"))  # explicit files need none
    corpora, questions = small_eval_set(tmp_path)
    lists = tmp_path / "lists.json"
    args = ["--corpora", str(corpora), "--questions", str(questions), "--lists", str(lists),
            "--cache-dir", "", "--plots-dir", str(tmp_path / "plots"), "--no-baselines"]  # fmt: skip
    main(args)
    out = capsys.readouterr().out
    assert "### tune half (4 questions)" in out and "### report half (4 questions" in out
    assert "(chosen)" in out and "old default" in out and "keywords alone" in out
    assert "auto's chunks read by the models as segments" in out  # as shipped
    assert (tmp_path / "plots" / "fusion_report_half.png").stat().st_size > 0
    saved = json.loads(lists.read_text())
    assert len(saved["ranked"]) == 8 and set(saved["ranked"][0]) == {"keywords", "vectors"}
    main(args)  # the cached lists are read again: same figures, nothing ranked
    again = capsys.readouterr().out
    assert "ranked 1/" not in again
    assert again.split("### tune half")[1].split("\n\n")[1] == out.split("### tune half")[1].split("\n\n")[1]
    now = RetrievalSettings()  # what search ships, as the run reads it
    ships = out.split("RetrievalSettings` ships:")[1].splitlines()[0]
    assert f"{now.fusion if now.fusion != 'rrf' else f'RRF k={now.rrf_k}'}" in ships
    assert f"vectors {now.weights['vectors']:g}" in ships


def test_retrieval_quality_reads_either_half_of_the_questions(tmp_path):
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    text = _text(GARDEN, 2)
    (corpora / "garden.md").write_text(text, encoding="utf-8")
    questions = tmp_path / "questions.csv"
    with questions.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "references", "corpus_id"])
        for sentence in GARDEN:
            start = text.index(sentence)
            ref = {"content": sentence, "start_index": start, "end_index": start + len(sentence)}
            writer.writerow([sentence.lower(), json.dumps([ref]), "garden"])
    documents = load_corpora(corpora)
    every = load_questions(questions, documents)
    tune, report = (load_questions(questions, documents, half) for half in ("tune", "report"))
    assert (len(tune), len(report)) == (3, 2)
    assert sorted(tune + report, key=every.index) == every and not set(tune) & set(report)
