"""The evaluation report (docs/evaluation contract, `unichunk eval --json`) as one HTML page.

`render_html` makes one self-contained page a person opens from disk or the service's `/ui`: the plots are
inline SVG drawn here (matplotlib is only a dev dependency, and a few lines and bars need no library), no
script, no stylesheet or font from elsewhere, so it reads offline and in a mail attachment. The Markdown
table of a Prefect artifact is `unichunk.retrieval.evaluation.markdown`'s (the flows render it). It reads the report dict as `unichunk eval --json` prints it
and escape every string in it: question texts and settings are user text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

__all__ = ["render_html"]

# One colour per generation, in report order (live, candidate); wins and losses of a difference.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")
WIN, LOSS = "#2ca02c", "#d62728"
UNITS = ("chars", "tokens")
METRICS = ("recall", "precision", "iou")

PAGE_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;
 padding:0 1em;color:#222}
"""
# The report's own rules (the service's /ui embeds the report in its pages with these)
STYLE = """
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.text,th.text{text-align:left}
.verdict{padding:.6em 1em;border-radius:4px;font-weight:600}.pass{background:#e3f5e3}.fail{background:#fbe3e3}
.muted{color:#777}.plots{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}figcaption{font-size:.9em}
svg text{font:11px system-ui,sans-serif}
"""


def render_html(report: Mapping[str, Any]) -> str:
    """The whole report as one HTML page: gate verdict, recall-vs-budget plots, wins and losses per
    question, the overall and per-question tables and the references that could not be located."""
    labels = _labels(report)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>unichunk evaluation: {escape(str(report.get('questions_file', '')))}</title>",
        f"<style>{PAGE_STYLE}{STYLE}</style></head><body>",
        report_body(report, labels),
        "</body></html>",
    ]
    return "\n".join(parts)


def report_body(report: Mapping[str, Any], labels: Sequence[str] | None = None) -> str:
    """The report's sections without the page around them (the service's `/ui` embeds them)."""
    labels = list(labels if labels is not None else _labels(report))
    sections = [
        '<section class="eval-report">',
        "<h1>Retrieval evaluation</h1>",
        _header(report),
        _gate(report.get("gate")),
        _recall_plots(report, labels),
        _differences(report, labels),
        _overall(report, labels),
        _questions(report, labels),
        _unlocated(report.get("unlocated") or []),
        "</section>",
    ]
    return "\n".join(s for s in sections if s)


def _header(report: Mapping[str, Any]) -> str:
    rows = "".join(
        f'<tr><td class="text">{escape(str(g.get("label", "")))}</td>'
        f'<td class="text"><code>{escape(str(g.get("generation_id", "")))}</code></td>'
        f'<td class="text">{escape(str(g.get("settings", "")))}</td></tr>'
        for g in report.get("generations") or []
    )
    return (
        f"<p>Questions: <code>{escape(str(report.get('questions_file', '')))}</code> · "
        f"{escape(str(report.get('created_at', '')))} · k = {escape(str(report.get('k', '')))}</p>"
        '<table class="generations"><tr><th class="text">generation</th><th class="text">ID</th>'
        f'<th class="text">settings</th></tr>{rows}</table>'
    )


def _gate(gate: Mapping[str, Any] | None) -> str:
    if not gate:
        return ""
    passed = bool(gate.get("passed"))
    verdict = (
        "Gate passed: the candidate is not worse beyond the tolerance; it may switch."
        if passed
        else "Gate refused: the candidate is worse beyond the tolerance; the live generation stays."
    )
    reasons = "".join(f"<li>{escape(str(r))}</li>" for r in gate.get("reasons") or [])
    return (
        f'<h2>Gate</h2><p class="verdict {"pass" if passed else "fail"}" id="gate-verdict">'
        f"{escape(verdict)} (tolerance {_pct(gate.get('tolerance'))})</p>"
        + (f"<ul>{reasons}</ul>" if reasons else "")
    )


def _recall_plots(report: Mapping[str, Any], labels: Sequence[str]) -> str:
    figures = []
    for unit in UNITS:
        budgets = _budgets(report, unit)
        if not budgets:
            continue
        series = {
            label: [
                _metric((report.get("overall") or {}).get(label) or {}, unit, b, "recall") for b in budgets
            ]
            for label in labels
        }
        figures.append(
            f"<figure>{line_chart(budgets, series, unit)}"
            f"<figcaption>Recall against a budget of retrieved {unit}, per generation.</figcaption></figure>"
        )
    if not figures:
        return ""
    return '<h2>Recall against budget</h2><div class="plots">' + "".join(figures) + "</div>"


def _differences(report: Mapping[str, Any], labels: Sequence[str]) -> str:
    """With two generations: per budget, the bootstrap interval of the difference and the per-question
    recall difference as sorted bars (wins above the line, losses below)."""
    if len(labels) != 2:
        return ""
    live, candidate = labels
    budgets = _budgets(report, "chars")
    differences = (report.get("differences") or {}).get("chars") or {}
    rows, figures = [], []
    for b in budgets:
        d = (differences.get(str(b)) or {}).get("recall") or {}
        rows.append(
            f"<tr><td>{b}</td><td>{_signed(d.get('mean'))}</td><td>{_signed(d.get('low'))} … "
            f"{_signed(d.get('high'))}</td><td>{d.get('wins', '–')}</td><td>{d.get('losses', '–')}</td></tr>"
        )
        per_question = []
        for q in report.get("questions") or []:
            scores = q.get("scores") or {}
            a = _metric(scores.get(live) or {}, "chars", b, "recall")
            c = _metric(scores.get(candidate) or {}, "chars", b, "recall")
            if a is not None and c is not None:
                per_question.append((str(q.get("id") or q.get("question", "")), c - a))
        figures.append(
            f"<figure>{bar_chart(per_question)}<figcaption>Recall at {b} chars, {escape(candidate)} − "
            f"{escape(live)}, per question: {sum(v > 0 for _, v in per_question)} wins, "
            f"{sum(v < 0 for _, v in per_question)} losses.</figcaption></figure>"
        )
    return (
        f"<h2>Wins and losses: {escape(candidate)} − {escape(live)}</h2>"
        '<table class="differences"><tr><th>budget (chars)</th><th>mean recall difference</th>'
        "<th>95 % interval</th><th>wins</th><th>losses</th></tr>" + "".join(rows) + "</table>"
        '<div class="plots">' + "".join(figures) + "</div>"
    )


def _overall(report: Mapping[str, Any], labels: Sequence[str]) -> str:
    overall = report.get("overall") or {}
    k = escape(str(report.get("k", "k")))
    columns = [(unit, b) for unit in UNITS for b in _budgets(report, unit)]
    head = "".join(f"<th>{b} {unit}<br>recall / precision / IoU</th>" for unit, b in columns)
    rows = []
    for label in labels:
        row = overall.get(label) or {}
        cells = "".join(
            "<td>" + " / ".join(_pct(_metric(row, unit, b, m)) for m in METRICS) + "</td>"
            for unit, b in columns
        )
        rows.append(
            f'<tr><td class="text">{escape(label)}</td>{cells}<td>{_pct(row.get("hit_at_k"))}</td>'
            f"<td>{_pct(row.get('mrr'))}</td><td>{escape(str(row.get('questions', '–')))}</td></tr>"
        )
    return (
        '<h2>Overall</h2><table class="overall"><tr><th class="text">generation</th>'
        f"{head}<th>hit@{k}</th><th>MRR</th><th>questions</th></tr>" + "".join(rows) + "</table>"
    )


def _questions(report: Mapping[str, Any], labels: Sequence[str]) -> str:
    questions = report.get("questions") or []
    if not questions:
        return ""
    budgets = _budgets(report, "chars")
    head = "".join(f"<th>{escape(label)}<br>recall@{b}</th>" for label in labels for b in budgets)
    head += "".join(f"<th>{escape(label)}<br>rank</th>" for label in labels)
    rows = []
    for q in questions:
        scores = q.get("scores") or {}
        cells = "".join(
            f"<td>{_pct(_metric(scores.get(label) or {}, 'chars', b, 'recall'))}</td>"
            for label in labels
            for b in budgets
        )
        cells += "".join(
            f"<td>{escape(str((scores.get(label) or {}).get('rank') or '–'))}</td>" for label in labels
        )
        rows.append(
            f'<tr><td class="text">{escape(str(q.get("id", "")))}</td>'
            f'<td class="text">{escape(str(q.get("question", "")))}</td>{cells}</tr>'
        )
    return (
        f"<h2>Per question</h2><details><summary>{len(questions)} questions</summary>"
        '<table class="questions"><tr><th class="text">ID</th><th class="text">question</th>'
        f"{head}</tr>" + "".join(rows) + "</table></details>"
    )


def _unlocated(unlocated: Sequence[Mapping[str, Any]]) -> str:
    if not unlocated:
        return '<h2>Unlocated references</h2><p class="muted">Every reference was located.</p>'
    rows = "".join(
        f'<tr><td class="text">{escape(str(u.get("question", "")))}</td>'
        f'<td class="text"><code>{escape(str(u.get("reference", "")))}</code></td>'
        f'<td class="text">{escape(str(u.get("reason", "")))}</td></tr>'
        for u in unlocated
    )
    return (
        f"<h2>Unlocated references ({len(unlocated)})</h2>"
        "<p>These references were not found in their documents' text; they count in no score.</p>"
        '<table class="unlocated"><tr><th class="text">question</th><th class="text">reference</th>'
        f'<th class="text">reason</th></tr>{rows}</table>'
    )


# --- plots (inline SVG) -----------------------------------------------------------------------------------


def line_chart(
    budgets: Sequence[int], series: Mapping[str, Sequence[float | None]], unit: str, width: int = 420
) -> str:
    """Recall (0..1, y) against the budgets (x, evenly spaced: they usually double), a line per series."""
    height, left, right, top, bottom = 260, 44, 110, 14, 36
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(i: int) -> float:
        return left + (plot_w * i / (len(budgets) - 1) if len(budgets) > 1 else plot_w / 2)

    def y(v: float) -> float:
        return top + plot_h * (1 - max(0.0, min(1.0, v)))

    out = [_svg_open(width, height, f"recall against budget ({unit})")]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e5e5e5"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.0%}</text>'
        )
    for i, b in enumerate(budgets):
        out.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{int(b)}</text>')
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">budget ({escape(unit)})</text>'
    )
    for n, (label, values) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        points = [(x(i), y(v)) for i, v in enumerate(values) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"><title>{escape(label)}: '
            f"{_pct(v)}</title></circle>"
            for (px, py), v in zip(points, [v for v in values if v is not None], strict=True)
        ]
        ly = top + 12 + 18 * n
        out.append(
            f'<rect x="{left + plot_w + 12}" y="{ly - 9}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{left + plot_w + 30}" y="{ly + 1}">{escape(_short(label, 12))}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def bar_chart(values: Sequence[tuple[str, float]], width: int = 420) -> str:
    """Per-question differences, sorted from the largest win to the largest loss, around a zero line."""
    height, left, top, plot_h = 200, 64, 12, 160
    ordered = sorted(values, key=lambda item: -item[1])
    scale = max([abs(v) for _, v in ordered] + [0.05])
    zero = top + plot_h / 2
    plot_w = width - left - 10
    bar = plot_w / max(1, len(ordered))
    out = [_svg_open(width, height, "per-question recall difference")]
    out.append(
        f'<text x="{left - 6}" y="{top + 8}" text-anchor="end">{_signed(scale)}</text>'
        f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">{_signed(-scale)}</text>'
    )
    for i, (name, v) in enumerate(ordered):
        h = abs(v) / scale * plot_h / 2
        y0 = zero - h if v > 0 else zero
        colour = WIN if v > 0 else LOSS
        out.append(
            f'<rect x="{left + i * bar + 0.5:.1f}" y="{y0:.1f}" width="{max(1.0, bar - 1):.1f}" '
            f'height="{max(h, 0.5 if v else 0):.1f}" fill="{colour}"><title>{escape(name)}: '
            f"{_signed(v)}</title></rect>"
        )
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{zero}" y2="{zero}" stroke="#444"/>')
    if not ordered:
        out.append(f'<text x="{left + plot_w / 2}" y="{zero - 6}" text-anchor="middle">no questions</text>')
    out.append("</svg>")
    return "".join(out)


# --- helpers ----------------------------------------------------------------------------------------------


def _svg_open(width: int, height: int, title: str) -> str:
    return (
        f'<svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{escape(title)}</title>'
    )


def _labels(report: Mapping[str, Any]) -> list[str]:
    labels = [str(g.get("label", "")) for g in report.get("generations") or []]
    return labels or list((report.get("overall") or {}).keys())


def _budgets(report: Mapping[str, Any], unit: str) -> list[int]:
    return [int(b) for b in (report.get("budgets") or {}).get(unit) or []]


def _metric(scores: Mapping[str, Any], unit: str, budget: int, metric: str) -> float | None:
    value = ((scores.get(unit) or {}).get(str(budget)) or {}).get(metric)
    return float(value) if isinstance(value, int | float) else None


def _pct(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def _signed(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "–"
    return f"{value * 100:+.1f} pt"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
