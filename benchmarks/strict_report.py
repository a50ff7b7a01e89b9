"""The strict tables, paired comparisons, leave-one-corpus-out check and plots of `retrieval_quality`.

Kept apart from the run so they can be tested on hand-made score arrays. Every figure comes from the
per-question arrays `Results.strict[(config, retriever, unit)]` of shape (questions, len(GRID), 3):
(recall, precision, IoU) at each budget, in characters (GRID) or tokens (`Results.token_grid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.budget_metric import BUDGETS, GRID, paired_bootstrap
from unichunk.retrieval.evaluation.metric import token_budgets

HEADLINE = "fixed-bm25"
# The targets for the shipped default's fixed-BM25 character recall, by character budget.
TARGETS = {1000: 0.55, 2000: 0.85, 4000: 0.94}


@dataclass
class Results:
    """Lenient top-k means in `rows`; per-question strict scores in `strict`:
    (config, retriever, unit) -> (questions, len(GRID), 3) with unit "chars" (budgets GRID) or "tokens"
    (budgets `token_grid`)."""

    rows: list[dict]
    strict: dict[tuple[str, str, str], np.ndarray] = field(default_factory=dict)
    corpus: list[str] = field(default_factory=list)  # each question's corpus
    configs: list[str] = field(default_factory=list)
    baseline: dict[str, bool] = field(default_factory=dict)
    chars_per_token: float = 4.0  # of the corpora (cl100k)
    info: dict[str, dict] = field(default_factory=dict)  # per config: chunks, mean tokens, chunking seconds

    @property
    def token_grid(self) -> tuple[int, ...]:
        return token_budgets(GRID, self.chars_per_token)


def retrievers(results: Results) -> list[str]:
    """Retriever names in the order the run made them."""
    return list(dict.fromkeys(r for _, r, _ in results.strict))


def unit_of(results: Results, retriever: str) -> str:
    """ "chars" where the retriever was scored in characters (rankers), else "tokens" (contexts)."""
    return "chars" if any(r == retriever and u == "chars" for _, r, u in results.strict) else "tokens"


def columns(results: Results, unit: str) -> list[tuple[int, str]]:
    """(index into the grid, label) of the table budgets (BUDGETS, or their token equivalents)."""
    if unit == "chars":
        return [(GRID.index(b), f"{b:,} chars") for b in BUDGETS]
    return [(GRID.index(b), f"{results.token_grid[GRID.index(b)]:,} tokens") for b in BUDGETS]


def default_label(results: Results) -> str:
    """The shipped default's row (`auto (...)`), else the first of ours."""
    ours = [c for c in results.configs if not results.baseline[c]]
    return next((c for c in ours if c.startswith("auto (")), ours[0])


def name_cell(config: str, baseline: dict[str, bool]) -> str:
    return f"**{config}** (baseline)" if baseline[config] else config


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def print_strict(results: Results) -> None:
    """Every strict view, as Markdown tables."""
    budgets = ", ".join(f"{b:,} chars ~ {results.token_grid[GRID.index(b)]} tokens" for b in BUDGETS)
    print(f"\n### strict budgeted metric: recall / precision / IoU (%) ({budgets}: cl100k on these corpora)")
    for retriever in retrievers(results):
        print_retriever(results, retriever)
    print_per_corpus(results)
    print_paired(results)
    print_leave_one_corpus_out(results)
    print_verdict(results)


def print_retriever(results: Results, retriever: str) -> None:
    """One retriever: R / P / IoU at each budget of its unit, and for rankers recall at the token budgets."""
    unit = unit_of(results, retriever)
    cols = columns(results, unit)
    extra = columns(results, "tokens") if unit == "chars" else []
    print(f"\n#### {retriever}\n")
    print("| chunking | " + " | ".join(f"{label} R / P / IoU" for _, label in cols)
          + "".join(f" | R@{label}" for _, label in extra) + " |")  # fmt: skip
    print("|" + "---|" * (1 + len(cols) + len(extra)))
    for c in results.configs:
        if (c, retriever, unit) not in results.strict:
            continue
        mean = results.strict[(c, retriever, unit)].mean(axis=0)
        cells = [" / ".join(_pct(v) for v in mean[i]) for i, _ in cols]
        if extra:
            tok = results.strict[(c, retriever, "tokens")].mean(axis=0)
            cells += [_pct(tok[i, 0]) for i, _ in extra]
        print(f"| {name_cell(c, results.baseline)} | " + " | ".join(cells) + " |")


def print_per_corpus(results: Results) -> None:
    """Recall (%) per corpus at each budget, per retriever: a gain that shows on one corpus only is not one."""
    corpora = sorted(set(results.corpus))
    corpus = np.array(results.corpus)
    print("\n### recall (%) per corpus\n")
    for retriever in retrievers(results):
        unit = unit_of(results, retriever)
        cols = columns(results, unit)
        print(f"\n#### {retriever} ({'characters' if unit == 'chars' else 'tokens'})\n")
        print(
            "| chunking | "
            + " | ".join(f"{name} {label.split()[0]}" for name in corpora for _, label in cols)
            + " |"
        )
        print("|" + "---|" * (1 + len(corpora) * len(cols)))
        for c in results.configs:
            if (c, retriever, unit) not in results.strict:
                continue
            arr = results.strict[(c, retriever, unit)]
            cells = [_pct(arr[corpus == name, i, 0].mean()) for name in corpora for i, _ in cols]
            print(f"| {name_cell(c, results.baseline)} | " + " | ".join(cells) + " |")


def print_paired(results: Results) -> None:
    """The default minus every other row, question by question, on recall: mean difference (points),
    95 % bootstrap CI, wins/losses/ties, exact sign-test p. `*` marks a CI that excludes zero."""
    ours = default_label(results)
    print(f"\n### paired by question, recall: {ours} minus each row")
    print(
        "(mean difference in points, [95 % bootstrap CI], wins/losses/ties, sign-test p; * = CI excludes 0)"
    )
    for retriever in retrievers(results):
        unit = unit_of(results, retriever)
        cols = columns(results, unit)
        if (ours, retriever, unit) not in results.strict:
            continue
        print(f"\n#### {retriever}\n")
        print("| vs | " + " | ".join(label for _, label in cols) + " |")
        print("|" + "---|" * (1 + len(cols)))
        mine = results.strict[(ours, retriever, unit)]
        for c in results.configs:
            if c == ours or (c, retriever, unit) not in results.strict:
                continue
            theirs = results.strict[(c, retriever, unit)]
            cells = []
            for i, _ in cols:
                p = paired_bootstrap(mine[:, i, 0], theirs[:, i, 0])
                cells.append(f"{100 * p.mean:+.1f} [{100 * p.low:+.1f}, {100 * p.high:+.1f}] "
                             f"{p.wins}/{p.losses}/{p.ties} p={p.p:.2g}{'*' if p.significant else ''}")  # fmt: skip
            print(f"| {name_cell(c, results.baseline)} | " + " | ".join(cells) + " |")


def leave_one_corpus_out(results: Results, retriever: str = HEADLINE) -> list[tuple[str, str, np.ndarray]]:
    """For each corpus: the config of ours with the best mean recall over BUDGETS on the *other* corpora,
    and its recall at BUDGETS on the held-out one: (held-out corpus, chosen config, recalls). Nothing
    with fewer than two corpora."""
    corpus = np.array(results.corpus)
    if len(set(results.corpus)) < 2:
        return []
    idx = [GRID.index(b) for b in BUDGETS]
    ours = [
        c for c in results.configs if not results.baseline[c] and (c, retriever, "chars") in results.strict
    ]
    out = []
    for held in sorted(set(results.corpus)):
        train = corpus != held
        chosen = max(ours, key=lambda c: results.strict[(c, retriever, "chars")][train][:, idx, 0].mean())
        out.append(
            (held, chosen, results.strict[(chosen, retriever, "chars")][~train][:, idx, 0].mean(axis=0))
        )
    return out


def print_leave_one_corpus_out(results: Results) -> None:
    """Choosing on two corpora, reporting the third: does the choice generalise?"""
    ours, corpus = default_label(results), np.array(results.corpus)
    idx = [GRID.index(b) for b in BUDGETS]
    bases = [c for c in results.configs if results.baseline[c] and (c, HEADLINE, "chars") in results.strict]
    print(f"\n### leave one corpus out ({HEADLINE}, recall %): the best of ours on the other two corpora, "
          "scored on the held-out one\n")  # fmt: skip
    print("| held out | chosen on the others | " + " | ".join(f"{b:,} chars" for b in BUDGETS)
          + f" | {ours} | best baseline there |")  # fmt: skip
    print("|" + "---|" * (4 + len(BUDGETS)))
    for held, chosen, recall in leave_one_corpus_out(results):
        default = results.strict[(ours, HEADLINE, "chars")][corpus == held][:, idx, 0].mean(axis=0)
        best = [max(results.strict[(b, HEADLINE, "chars")][corpus == held][:, i, 0].mean() for b in bases)
                for i in idx] if bases else []  # fmt: skip
        print(f"| {held} | {chosen} | " + " | ".join(_pct(v) for v in recall)
              + f" | {' / '.join(_pct(v) for v in default)} | {' / '.join(_pct(v) for v in best)} |")  # fmt: skip


def print_verdict(results: Results) -> None:
    """The issue's targets and whether the default beats every baseline at every budget (headline)."""
    ours = default_label(results)
    if (ours, HEADLINE, "chars") not in results.strict:
        return
    mean = results.strict[(ours, HEADLINE, "chars")].mean(axis=0)
    print(f"\n### verdict ({HEADLINE} character recall of {ours})\n")
    for budget, target in TARGETS.items():
        value = mean[GRID.index(budget), 0]
        losers = [c for c in results.configs if results.baseline[c] and (c, HEADLINE, "chars") in results.strict
                  and results.strict[(c, HEADLINE, "chars")].mean(axis=0)[GRID.index(budget), 0] >= value]  # fmt: skip
        print(f"- {budget:,} chars: {_pct(value)} % (target {_pct(target)}: {'met' if value >= target else 'NOT met'}); "
              + ("ahead of every baseline" if not losers else "not ahead of " + ", ".join(losers)))  # fmt: skip
    ceiling = best_of_ours(results)
    print(f"- the best of this run's {sum(not results.baseline[c] for c in results.configs)} configurations "
          "of ours at each budget (each budget's own best: none of them does better there): "
          + " / ".join(f"{_pct(v)} ({c})" for c, v in ceiling.values()))  # fmt: skip


def best_of_ours(results: Results) -> dict[int, tuple[str, float]]:
    """Per budget of BUDGETS, the config of ours with the highest mean headline recall and that recall.
    Over a `--configs sweep` run this is the ceiling of the swept boundaries: what no single one of them
    beats at that budget (the best at 1,000 and the best at 4,000 are usually different configs)."""
    ours = [
        c for c in results.configs if not results.baseline[c] and (c, HEADLINE, "chars") in results.strict
    ]
    out = {}
    for budget in BUDGETS:
        i = GRID.index(budget)
        best = max(ours, key=lambda c: results.strict[(c, HEADLINE, "chars")][:, i, 0].mean())
        out[budget] = (best, float(results.strict[(best, HEADLINE, "chars")][:, i, 0].mean()))
    return out


def write_plots(results: Results, out_dir: Path) -> list[Path]:
    """One PNG per retriever: mean recall against the budget (characters for rankers, tokens for the
    assembled contexts), a line per config, baselines dashed. 100 dpi, to sit beside the tables."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for retriever in retrievers(results):
        unit = unit_of(results, retriever)
        grid: Sequence[int] = GRID if unit == "chars" else results.token_grid
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=100)
        for c in results.configs:
            if (c, retriever, unit) in results.strict:
                recall = 100 * results.strict[(c, retriever, unit)][:, :, 0].mean(axis=0)
                ax.plot(grid, recall, "--" if results.baseline[c] else "-", marker=".", label=c,
                        linewidth=2.2 if c == default_label(results) else 1.1)  # fmt: skip
        what = "characters" if unit == "chars" else "cl100k tokens, headers included"
        ax.set(xscale="log", xlabel=f"budget ({what} of retrieved text)", ylabel="recall (%)",
               title=f"strict recall vs budget: {retriever}", ylim=(0, 100))  # fmt: skip
        ax.set_xticks(list(grid), [f"{b:,}" for b in grid])
        ax.minorticks_off()  # log-scale minor labels would print over the budgets
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
        fig.tight_layout()
        path = out_dir / f"strict_recall_{_slug(retriever)}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name).strip("_").replace("__", "_")


def as_json(results: Results) -> dict:
    """Every mean figure: the lenient top-k rows, and per (config, retriever, unit) the mean
    recall/precision/IoU at every budget of the grid, overall and per corpus."""
    corpus = np.array(results.corpus)
    strict = []
    for (c, retriever, unit), arr in results.strict.items():
        grid = GRID if unit == "chars" else results.token_grid
        row = {
            "config": c,
            "baseline": results.baseline[c],
            "retriever": retriever,
            "unit": unit,
            "budgets": list(grid),
        }
        row["mean"] = arr.mean(axis=0).tolist()
        row["per_corpus"] = {
            name: arr[corpus == name].mean(axis=0).tolist() for name in sorted(set(results.corpus))
        }
        strict.append(row)
    return {
        "topk": results.rows,
        "strict": strict,
        "info": results.info,
        "chars_per_token": results.chars_per_token,
    }
