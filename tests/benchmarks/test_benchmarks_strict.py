"""The strict report on hand-made per-question scores (tables, paired comparison, leave-one-corpus-out,
verdict, plots), and the whole benchmark on a tiny corpus of its own (real sinks, MiniLM)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from benchmarks.budget_metric import GRID
from benchmarks.retrieval_quality import main, parse_configs
from benchmarks.strict_report import Results, best_of_ours, leave_one_corpus_out, print_strict, write_plots


def _results() -> Results:
    """Four questions (two corpora); ours "auto (x)" and "small", one baseline. Recall at every budget:
    auto 0.8 everywhere; small 1.0 on corpus a, 0.2 on b; the baseline 0.4."""
    corpus = ["a", "a", "b", "b"]
    shape = (4, len(GRID), 3)
    auto, small, base = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    auto[:, :, 0] = 0.8
    small[:2, :, 0], small[2:, :, 0] = 1.0, 0.2
    base[:, :, 0] = 0.4
    strict = {}
    for name, arr in (("auto (x)", auto), ("small", small), ("base", base)):
        strict[(name, "fixed-bm25", "chars")] = arr
        strict[(name, "fixed-bm25", "tokens")] = arr
        strict[(name, "context ±1", "tokens")] = arr / 2
    return Results(rows=[], strict=strict, corpus=corpus, configs=["auto (x)", "small", "base"],
                   baseline={"auto (x)": False, "small": False, "base": True}, chars_per_token=4.0)  # fmt: skip


def test_leave_one_corpus_out_chooses_on_the_other_corpora() -> None:
    # holding a out, b decides: auto (0.8) beats small (0.2); holding b out, a decides: small (1.0) wins
    chosen = {held: (config, recall.tolist()) for held, config, recall in leave_one_corpus_out(_results())}
    assert chosen == {"a": ("auto (x)", [0.8, 0.8, 0.8]), "b": ("small", [pytest.approx(0.2)] * 3)}


def test_print_strict_tables_paired_and_verdict(capsys) -> None:
    print_strict(_results())
    out = capsys.readouterr().out
    assert "1,000 chars ~ 250 tokens" in out
    assert "| auto (x) | 80.0 / 0.0 / 0.0 | 80.0 / 0.0 / 0.0 | 80.0 / 0.0 / 0.0 | 80.0 | 80.0 | 80.0 |" in out
    assert "| auto (x) | 40.0 / 0.0 / 0.0 |" in out  # the context row, in tokens
    assert "| auto (x) | 80.0 | 80.0 | 80.0 | 80.0 | 80.0 | 80.0 |" in out  # per corpus: a then b
    # auto minus the baseline: +40 points on all 4 questions, CI [40, 40], sign test 2/16
    assert "| **base** (baseline) | +40.0 [+40.0, +40.0] 4/0/0 p=0.12* |" in out
    assert "| b | small | 20.0 | 20.0 | 20.0 | 80.0 / 80.0 / 80.0 | 40.0 / 40.0 / 40.0 |" in out
    assert "- 1,000 chars: 80.0 % (target 55.0: met); ahead of every baseline" in out
    assert "- 4,000 chars: 80.0 % (target 94.0: NOT met)" in out
    assert "best of this run's 2 configurations of ours at each budget" in out
    assert "80.0 (auto (x)) / 80.0 (auto (x)) / 80.0 (auto (x))" in out


def test_the_ceiling_is_each_budgets_own_best_of_ours() -> None:
    results = _results()
    assert best_of_ours(results) == {
        1000: ("auto (x)", 0.8),
        2000: ("auto (x)", 0.8),
        4000: ("auto (x)", 0.8),
    }
    small = results.strict[("small", "fixed-bm25", "chars")]
    small[2:, GRID.index(4000), 0] = 0.9  # small now best at 4,000 alone: (1.0 + 0.9) / 2; never a baseline
    results.strict[("base", "fixed-bm25", "chars")][:, :, 0] = 1.0
    assert best_of_ours(results)[4000] == ("small", pytest.approx(0.95))
    assert best_of_ours(results)[1000] == ("auto (x)", 0.8)


def test_plots_are_pngs_one_per_retriever(tmp_path) -> None:
    paths = write_plots(_results(), tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["strict_recall_context_1.png", "strict_recall_fixed-bm25.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_parse_configs_labels_dedups_and_refuses_typos() -> None:
    embed = lambda texts: [[1.0] for _ in texts]  # noqa: E731 (never called: nothing is chunked here)
    labels = [c[0] for c in parse_configs("sentence:390/58,fixed_chars:1600/240,sentence:390/58", embed)]
    assert labels == ["sentence 390/58", "fixed_chars 1600c/240"]
    assert [c[0] for c in parse_configs("semantic:200/0:semantic_window=0", embed)] == [
        "semantic 200/0 semantic_window=0"
    ]
    assert parse_configs("auto", embed)[0][0].startswith("auto (markdown ")
    assert len(parse_configs("default", embed)) == 7
    with pytest.raises(SystemExit, match="bad --configs item"):
        parse_configs("sentense:400/60", embed)
    with pytest.raises(SystemExit, match="bad --configs item"):
        parse_configs("semantic:200/0:semantic_window=9", embed)


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
    plots, figures = tmp_path / "plots", tmp_path / "figures.json"
    main(["--corpora", str(corpora), "--questions", str(questions), "--quick", "--configs", "auto",
          "--cache-dir", "", "--strict-only", "--plots-dir", str(plots), "--json", str(figures)])  # fmt: skip
    out = capsys.readouterr().out
    assert "### strict budgeted metric" in out and "#### fixed-bm25" in out and "leave one corpus out" in out
    row = next(line for line in out.splitlines() if line.startswith("| auto (") and "/" in line)
    assert row.split("|")[2].strip().startswith("100.0 /")  # the answer sentence fills part of 1,000 chars
    assert sorted(p.name for p in plots.iterdir()) == sorted(
        f"strict_recall_{r}.png"
        for r in ("fixed-bm25", "keywords", "vectors", "hybrid", "context_1", "context_0")
    )
    saved = json.loads(figures.read_text())
    fixed = next(r for r in saved["strict"] if r["retriever"] == "fixed-bm25" and r["unit"] == "chars"
                 and r["config"].startswith("auto ("))  # fmt: skip
    assert fixed["mean"][GRID.index(1000)][0] == 1.0 and fixed["per_corpus"]["harbour"] == fixed["mean"]
