"""The evaluation report renderers (`unichunk.eval_report_html`, `unichunk.retrieval.evaluation.markdown`) on reports made here, shaped exactly as
the evaluation contract says (`unichunk eval --json`): one and two generations, with a gate, with
unlocated references. The HTML must parse strictly, load nothing from elsewhere and escape every string."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.html_checks import parse_html
from unichunk.eval_report_html import render_html
from unichunk.retrieval.evaluation.markdown import markdown_report

CHARS, TOKENS = [1000, 2000, 4000], [217, 434, 869]


def _scores(base: float) -> dict[str, Any]:
    return {
        "chars": {str(b): {"recall": min(1, base + i / 10), "precision": base / 2, "iou": base / 3}
                  for i, b in enumerate(CHARS)},
        "tokens": {str(b): {"recall": min(1, base + i / 12), "precision": base / 2, "iou": base / 3}
                   for i, b in enumerate(TOKENS)},
    }  # fmt: skip


def one_generation() -> dict[str, Any]:
    return {
        "questions_file": "questions.csv",
        "created_at": "2026-11-26T21:00:00Z",
        "budgets": {"chars": CHARS, "tokens": TOKENS},
        "k": 10,
        "generations": [{"label": "live", "generation_id": "g-live", "settings": "auto, 512 tokens"}],
        "overall": {"live": {**_scores(0.5), "hit_at_k": 0.9, "mrr": 0.71, "questions": 3}},
        "questions": [
            {
                "question": f"question {n}?",
                "id": f"q{n}",
                "scores": {"live": {**_scores(0.3 + n / 10), "rank": n or None}},
            }
            for n in range(3)
        ],
        "unlocated": [],
        "gate": None,
    }


def two_generations(passed: bool = False) -> dict[str, Any]:
    report = one_generation()
    report["generations"].append({"label": "candidate", "generation_id": "g-cand", "settings": "fixed 2000"})
    report["overall"]["candidate"] = {**_scores(0.4), "hit_at_k": 0.8, "mrr": 0.6, "questions": 3}
    for n, q in enumerate(report["questions"]):
        q["scores"]["candidate"] = {**_scores(0.2 + n / 5 - (0.2 if n == 0 else 0)), "rank": 2}
    report["differences"] = {
        unit: {str(b): {"recall": {"mean": -0.1, "low": -0.2, "high": 0.01, "wins": 1, "losses": 2}}
               for b in budgets}
        for unit, budgets in (("chars", CHARS), ("tokens", TOKENS))
    }  # fmt: skip
    report["gate"] = {
        "tolerance": 0.01,
        "passed": passed,
        "reasons": [] if passed else ["recall at 1000 chars: -10.0 points, beyond the tolerance"],
    }
    report["unlocated"] = [
        {"question": "question 1?", "reference": "a passage that is nowhere", "reason": "not in the text"}
    ]
    return report


def test_one_generation_draws_a_line_per_unit_and_no_differences() -> None:
    page = render_html(one_generation())
    parsed = parse_html(page)
    assert not parsed.external_refs() and not parsed.scripts
    assert "http://" not in page and "https://" not in page
    assert len(parsed.attrs("svg")) == 2  # recall against chars and against tokens
    assert len(parsed.attrs("polyline")) == 2  # one generation: one line each
    assert "Wins and losses" not in page and "Gate" not in page
    assert "Every reference was located" in page
    assert "hit@10" in page and "90.0%" in page and "71.0%" in page  # the overall table


def test_two_generations_show_the_wins_losses_the_gate_and_the_unlocated() -> None:
    page = render_html(two_generations())
    parsed = parse_html(page)
    assert not parsed.external_refs() and not parsed.scripts
    assert "http://" not in page and "https://" not in page
    assert len(parsed.attrs("polyline")) == 4  # two generations x (chars, tokens)
    # one bar chart per chars budget, one bar per question, colour by sign
    bars = [a for a in parsed.attrs("rect") if a.get("fill") in ("#2ca02c", "#d62728")]
    assert len(bars) == 3 * len(CHARS)
    assert "Gate refused" in page and "beyond the tolerance" in page
    assert 'class="verdict fail"' in page
    assert "a passage that is nowhere" in page and "Unlocated references (1)" in page
    assert "-10.0 pt" in page  # the mean difference
    assert "Gate passed" in render_html(two_generations(passed=True))


def test_markdown_is_one_row_per_budget_with_the_difference() -> None:
    md = markdown_report(two_generations())
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len(rows) == 2 + len(CHARS) + len(TOKENS)  # header, rule, one per budget
    assert all(row.count("|") == rows[0].count("|") for row in rows)
    assert rows[2].startswith("| 1,000 characters | 50.0 / 25.0 / 16.7 | 40.0 / 20.0 / 13.3 |")
    assert rows[2].endswith("| -10.0 [-20.0, +1.0], 1/2 |")
    assert "refused the switch" in md and "beyond the tolerance" in md and "1 reference(s)" in md
    single = markdown_report(one_generation())
    assert len([line for line in single.splitlines() if line.startswith("|")]) == 2 + len(CHARS) + len(TOKENS)
    assert "gate" not in single


def test_a_report_missing_optional_parts_still_renders() -> None:
    report = one_generation()
    del report["questions"], report["unlocated"], report["gate"]
    report["budgets"] = {"chars": [1000], "tokens": []}
    parse_html(render_html(report))
    assert markdown_report(report).count("|") > 0


text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(question=text, label=text, settings_text=text, reference=text, reason=text, source=text)
def test_hostile_strings_stay_text(
    question: str, label: str, settings_text: str, reference: str, reason: str, source: str
) -> None:
    """Questions, labels, settings and references are user text: whatever they hold, the page parses to
    the same elements and no script or markup of theirs gets in; the Markdown keeps its table."""
    report = copy.deepcopy(two_generations())
    report["questions_file"] = source
    report["questions"][0]["question"] = question
    report["questions"][0]["id"] = question
    report["generations"][1]["label"] = label or "c"
    report["generations"][1]["settings"] = settings_text
    report["overall"][label or "c"] = report["overall"].pop("candidate")
    for q in report["questions"]:
        q["scores"][label or "c"] = q["scores"].pop("candidate")
    report["unlocated"][0].update(reference=reference, reason=reason)
    page = render_html(report)
    parsed = parse_html(page)
    assert not parsed.scripts and not parsed.external_refs()
    assert not re.search(r"<script", page, re.IGNORECASE)
    expected = {tag for tag, _ in parse_html(render_html(two_generations())).tags}
    assert {tag for tag, _ in parsed.tags} <= expected
    md = markdown_report(report)
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len({row.replace("\\|", "").count("|") for row in rows}) == 1
