"""How `unichunk eval` and a gated `unichunk rebuild` show an evaluation report on a terminal.

The report is the dict `Pipeline.eval` returns (docs/evaluation.md); this module only renders it: one
table row per unit and budget, recall / precision / IoU per generation, and with two generations the
difference in recall (candidate minus live) with its bootstrap 95 % interval and wins / losses. `--html`
writes the page of `unichunk.eval_report_html`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unichunk.deployments.cli.console import console, err_console, literal, print_table
from unichunk.eval_report_html import render_html

UNITS = {"chars": "characters", "tokens": "tokens"}


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def print_report(report: dict[str, Any]) -> None:
    """The report as a table, then document-level figures, the gate and what could not be located."""
    labels = [g["label"] for g in report["generations"]]
    shown = list(report["overall"])  # with --retrievers, each retriever alone too
    differences = report.get("differences")
    headers = ["budget", *(f"{label} R / P / IoU" for label in shown)]
    if differences:
        headers.append(f"{labels[1]} - {labels[0]} recall [95 % CI] wins/losses")
    rows = []
    for unit, name in UNITS.items():
        for budget in report["budgets"][unit]:
            key = str(budget)
            cells = [f"{budget:,} {name}"]
            for label in shown:
                scores = report["overall"][label][unit].get(key)
                cells.append(
                    "-"
                    if scores is None
                    else " / ".join(_pct(scores[m]) for m in ("recall", "precision", "iou"))
                )
            if differences:
                d = differences[unit].get(key, {}).get("recall")
                cells.append(
                    "-" if d is None else
                    f"{_signed(d['mean'])} [{_signed(d['low'])}, {_signed(d['high'])}] {d['wins']}/{d['losses']}"
                )  # fmt: skip
            rows.append(cells)
    print_table(headers, rows)
    for label in shown:
        overall = report["overall"][label]
        console.print(
            f"{label}: hit@{report['k']} {_pct(overall['hit_at_k'])} %, MRR {overall['mrr']:.3f} "
            f"({overall['questions']} questions, {overall['scored']} with located references)"
        )
    for generation in report["generations"]:
        console.print(
            f"{generation['label']}: generation {generation['generation_id']} ({generation['settings']})"
        )
    print_unlocated(report)
    print_gate(report.get("gate"))


def print_unlocated(report: dict[str, Any], limit: int = 10) -> None:
    unlocated = report.get("unlocated") or []
    if not unlocated:
        return
    err_console.print(f"{len(unlocated)} reference(s) could not be located and are not scored:")
    for item in unlocated[:limit]:
        err_console.print(f"  {literal(item['reference'])!s}: {literal(item['reason'])}")
    if len(unlocated) > limit:
        err_console.print(f"  ... and {len(unlocated) - limit} more (`--json` lists them all)")


def print_gate(gate: dict[str, Any] | None) -> None:
    if not gate:
        return
    if gate["passed"]:
        console.print(
            f"gate passed: not worse than the live generation beyond {_pct(gate['tolerance'])} points"
        )
        return
    console.print(f"gate refused the switch (tolerance {_pct(gate['tolerance'])} points):")
    for reason in gate["reasons"]:
        console.print(f"  {reason}")


def write_html(report: dict[str, Any], path: Path) -> None:
    """The HTML report (`unichunk.eval_report_html.render_html`) at `path`."""
    path.write_text(render_html(report), encoding="utf-8")
    err_console.print(f"wrote {path}")
