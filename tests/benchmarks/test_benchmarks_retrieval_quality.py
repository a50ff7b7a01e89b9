"""The retrieval-quality benchmark's scoring, and a whole run on small data of its own (real BM25Sink,
in-memory Qdrant and MiniLM): it needs no evaluation data when `--corpora` and `--questions` are given."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from texts import GARDEN, TOPICS
from texts import repeated as _text

from benchmarks.budget_metric import TokenMeter
from benchmarks.retrieval_quality import Question, main, score


def test_bench_scores_merge_retrieved_spans_by_offsets():
    question = Question("q", "c", ((10, 20),))
    meter = TokenMeter({"d": np.arange(0, 101, 5), "o": np.arange(0, 101, 2)})
    # Two overlapping hits in the corpus (count once: 30 chars), one elsewhere (10 chars).
    recall, precision, iou, tokens = score(question, "d", [("d", 0, 15), ("d", 12, 30), ("o", 0, 10)], meter)
    assert (recall, precision, iou, tokens) == (1.0, 0.25, 0.25, 6 + 5)
    assert score(question, "d", [("d", 15, 40)], meter)[:3] == (0.5, 5 / 25, 5 / 30)


def test_bench_runs_end_to_end_on_other_data(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UNICHUNK_EVAL_DIR", str(tmp_path / "no-eval-data"))  # explicit files need none
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    harbour = _text(TOPICS, 12)
    (corpora / "harbour.md").write_text(harbour, encoding="utf-8")
    (corpora / "garden.md").write_text(_text(GARDEN, 20), encoding="utf-8")
    sentence = "The lighthouse keeper logs every passing vessel in a leather-bound book. (note 7)"
    start = harbour.index(sentence)
    questions = tmp_path / "questions.csv"
    with questions.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "references", "corpus_id"])
        ref = {"content": sentence, "start_index": start, "end_index": start + len(sentence)}
        writer.writerow(["lighthouse keeper leather-bound book note 7", json.dumps([ref]), "harbour"])
    out = tmp_path / "results.json"
    monkeypatch.chdir(tmp_path)  # so a cache written despite --cache-dir '' would show up here
    main(
        [
            "--corpora",
            str(corpora),
            "--questions",
            str(questions),
            "--quick",
            "--cache-dir",
            "",
            "--json",
            str(out),
            "--plots-dir",
            "",
        ]
    )
    saved = json.loads(out.read_text())
    rows = saved["topk"]
    configs = {r["config"] for r in rows}
    assert {"fixed token window 800/400", "llama SentenceSplitter 512/128", "semantic 220/0"} <= configs
    assert any(c.startswith("auto (") for c in configs)
    assert len(rows) == len(configs) * 3 * 4
    for r in rows:
        assert 0.0 <= r["iou"] <= min(r["recall"], r["precision"]) <= 1.0
        assert saved["info"][r["config"]]["chunks"] >= 4 and r["tokens"] > 0
    best = [
        r
        for r in rows
        if r["retriever"] == "keywords" and r["k"] == 1 and not r["config"].startswith("semantic")
    ]
    assert all(r["recall"] == 1.0 for r in best), best  # the distinctive sentence is BM25's first hit
    # semantic may cut between the sentence and its "(note 7)" on this repetitive text; it is still found
    assert (
        next(
            r
            for r in rows
            if r["config"].startswith("semantic") and (r["retriever"], r["k"]) == ("keywords", 10)
        )["recall"]
        > 0
    )
    assert "### lenient top-k" in capsys.readouterr().out
    # ours embedded as the pipeline embeds them (segments composed), every baseline's chunks whole
    assert {c: saved["info"][c]["model_input"] for c in configs} == {
        r["config"]: "chunks" if r["baseline"] else "segments" for r in rows
    }
    assert not list(tmp_path.glob("*.sqlite")) and not (tmp_path / ".unichunk").exists()  # cache disabled
    assert not list(tmp_path.rglob("*.png"))  # --plots-dir '' writes no plot

    bad = tmp_path / "bad.csv"
    bad.write_text(questions.read_text().replace(str(start), str(start + 1), 1), encoding="utf-8")
    with pytest.raises(SystemExit, match="does not match"):
        main(["--corpora", str(corpora), "--questions", str(bad), "--quick", "--cache-dir", ""])
