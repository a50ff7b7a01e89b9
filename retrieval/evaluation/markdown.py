"""An evaluation report as a small Markdown table: what a gated rebuild leaves as its Prefect artifact.

The one Markdown rendering of a report (the HTML page is `unichunk.eval_report_html`'s): per budget, recall / precision / IoU of each generation and the recall
difference with its bootstrap interval, then hit@k, MRR and the gate's verdict. Every figure in percent;
labels, settings and reasons are escaped (`_md`): they may be user text.
"""

from __future__ import annotations

from html import escape
from typing import Any

UNITS = {"chars": "characters", "tokens": "tokens"}


def markdown_report(report: dict[str, Any]) -> str:
    labels = list(report["overall"])
    diff = report.get("differences")
    head = ["budget", *(f"{_md(label)} R / P / IoU" for label in labels)]
    if diff:
        head.append("recall difference [95 % CI], wins/losses")
    lines = ["### evaluation: " + ", ".join(_generation(g) for g in report["generations"]), ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for unit, name in UNITS.items():
        for budget in map(str, report["budgets"][unit]):
            cells = [f"{int(budget):,} {name}"]
            for label in labels:
                s = report["overall"][label][unit].get(budget)
                cells.append(
                    "-" if s is None else f"{_p(s['recall'])} / {_p(s['precision'])} / {_p(s['iou'])}"
                )
            if diff:
                d = diff[unit].get(budget, {}).get("recall")
                cells.append(
                    "-" if d is None else
                    f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}], {d['wins']}/{d['losses']}"
                )  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for label in labels:
        o = report["overall"][label]
        lines.append(
            f"- {_md(label)}: hit@{report['k']} {_p(o['hit_at_k'])}, MRR {o['mrr']:.3f}, {o['questions']} questions"
        )
    if report.get("unlocated"):
        lines.append(f"- {len(report['unlocated'])} reference(s) could not be located (not scored)")
    gate = report.get("gate")
    if gate:
        verdict = "passed" if gate["passed"] else "refused the switch"
        lines.append(f"- gate (tolerance {_p(gate['tolerance'])} points): {verdict}")
        lines += [f"  - {_md(reason)}" for reason in gate["reasons"]]
    return "\n".join(lines) + "\n"


def _generation(generation: dict[str, Any]) -> str:
    return f"{_md(generation['label'])} `{_md(generation['generation_id'])}` ({_md(generation['settings'])})"


def _p(value: float) -> str:
    return f"{100 * value:.1f}"


def _md(text: object) -> str:
    """Text safe in a Markdown table cell: pipes and backticks escaped, no line breaks, no HTML."""
    return escape(" ".join(str(text).split())).replace("|", "\\|").replace("`", "'")
