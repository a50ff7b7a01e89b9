"""The strict table, the paired comparisons and the recall-vs-budget plots of `retrieval_quality`.

Kept apart from the run so the printing and plotting can be tested on hand-made score arrays. Figures
come from `benchmarks.budget_metric` (the budget filling and its scores are defined there).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from chonkie import RecursiveChunker, SentenceChunker, TokenChunker

from benchmarks.budget_metric import BUDGETS, paired_bootstrap
from chunking.models import Chunk, Document
from chunking.tokenizer import TokenCounter, get_encoding

GRID = (250, 500, 1000, 1500, 2000, 3000, 4000, 6000)  # characters; the plots use all, the tables BUDGETS
RETRIEVERS = ("fixed-bm25", "fixed-bm25+s2b", "keywords", "vectors", "hybrid")
SPLITTER = "llama SentenceSplitter 512/128"


def issue_baselines(quick: bool, from_spans: Callable, llama: Callable) -> list[tuple[str, bool, Callable]]:
    """The issue's baselines beside the existing ones: SentenceSplitter 512/128 and chonkie's token,
    sentence and recursive chunkers at 512 cl100k tokens (128 overlap where they take one). chonkie gives
    exact start/end offsets, so its chunks are used as they are."""
    encoding, counter = get_encoding(), TokenCounter()

    def chonkie(chunker: object) -> Callable[[Document], list[Chunk]]:
        def chunk(document: Document) -> list[Chunk]:
            pieces = chunker(document.text)  # type: ignore[operator]
            return from_spans(document, [(p.start_index, p.end_index) for p in pieces], counter)

        return chunk

    out = [(SPLITTER, True, llama(512, 128))]
    if quick:
        return out
    return [
        *out,
        ("chonkie TokenChunker 512/128", True, chonkie(TokenChunker(tokenizer=encoding, chunk_size=512, chunk_overlap=128))),
        ("chonkie SentenceChunker 512/128", True, chonkie(SentenceChunker(tokenizer=encoding, chunk_size=512, chunk_overlap=128))),
        ("chonkie RecursiveChunker 512", True, chonkie(RecursiveChunker(tokenizer=encoding, chunk_size=512))),
    ]  # fmt: skip


def default_label(configs: list[str], baseline: dict[str, bool]) -> str:
    """The shipped default's row (`auto (...)`), else the first of ours."""
    return next((c for c in configs if c.startswith("auto (")), next(c for c in configs if not baseline[c]))


def print_strict(
    strict: dict[tuple[str, str], np.ndarray],
    configs: list[str],
    baseline: dict[str, bool],
    chars_per_token: float,
    budgets: tuple[int, ...] = BUDGETS,
) -> None:
    """Per retriever: mean strict recall / precision / IoU (%) at each character budget; then the default
    against every other row, question by question, on recall; then the two halves of the questions."""
    cols = [GRID.index(b) for b in budgets]
    retrievers = [r for r in RETRIEVERS if any((c, r) in strict for c in configs)]
    equiv = ", ".join(f"{b:,} chars ~ {b / chars_per_token:.0f} tokens" for b in budgets)
    print(f"\n### strict character budget: recall / precision / IoU (%) ({equiv}; cl100k on these corpora)\n")
    for r in retrievers:
        print(f"\n#### {r}\n")
        print("| chunking | " + " | ".join(f"B={b:,} R / P / IoU" for b in budgets) + " |")
        print("|" + "---|" * (1 + len(budgets)))
        for c in configs:
            if (c, r) not in strict:
                continue
            mean = strict[(c, r)].mean(axis=0)
            cells = [" / ".join(f"{100 * v:.1f}" for v in mean[i]) for i in cols]
            print(f"| {'**' + c + '** (baseline)' if baseline[c] else c} | " + " | ".join(cells) + " |")
    ours = default_label(configs, baseline)
    print(
        f"\n### paired by question, strict recall: {ours} minus each row (mean, 95 % bootstrap CI; W/L/T)\n"
    )
    for r in retrievers:
        print(f"\n#### {r}\n")
        print("| vs | " + " | ".join(f"B={b:,}" for b in budgets) + " |")
        print("|" + "---|" * (1 + len(budgets)))
        for c in configs:
            if c == ours or (c, r) not in strict:
                continue
            cells = []
            for i in cols:
                d, lo, hi, w, lo_n, t = paired_bootstrap(strict[(ours, r)][:, i, 0], strict[(c, r)][:, i, 0])
                cells.append(f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] {w}/{lo_n}/{t}")
            print(f"| {c} | " + " | ".join(cells) + " |")
    print(
        "\n### held-out check, fixed-bm25 strict recall (%): even-numbered questions / odd-numbered questions\n"
    )
    print("| chunking | " + " | ".join(f"B={b:,} even / odd" for b in budgets) + " |")
    print("|" + "---|" * (1 + len(budgets)))
    for c in configs:
        if (c, "fixed-bm25") in strict:
            arr = strict[(c, "fixed-bm25")]
            cells = [f"{100 * arr[0::2, i, 0].mean():.1f} / {100 * arr[1::2, i, 0].mean():.1f}" for i in cols]
            print(f"| {c} | " + " | ".join(cells) + " |")


def write_plots(
    strict: dict[tuple[str, str], np.ndarray], configs: list[str], baseline: dict[str, bool], out_dir: Path
) -> list[Path]:
    """One PNG per retriever: mean strict recall against the character budget, a line per config
    (baselines dashed). Small (100 dpi) so they can sit beside the README tables."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for r in RETRIEVERS:
        rows = [c for c in configs if (c, r) in strict]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
        for c in rows:
            ax.plot(GRID, 100 * strict[(c, r)][:, :, 0].mean(axis=0), "--" if baseline[c] else "-",
                    marker=".", label=c, linewidth=1.2)  # fmt: skip
        ax.set(xscale="log", xlabel="budget (characters of retrieved text)", ylabel="character recall (%)",
               title=f"strict recall vs budget: {r}", ylim=(0, 100))  # fmt: skip
        ax.set_xticks(GRID, [f"{b:,}" for b in GRID])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
        fig.tight_layout()
        path = out_dir / f"strict_recall_{r.replace('+', '_')}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
