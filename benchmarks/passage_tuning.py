"""Passages chosen by measurement (issue 27): tuned on one half of the evaluation questions, reported on the other.

    python -m benchmarks.passage_tuning [--data-dir DIR] [--corpora DIR] [--questions FILE]

1. The evaluation corpora (or `--corpora`, with `--questions`) are ingested as shipped (`Pipeline.ingest`,
   the embedded defaults) into `--data-dir` (a temporary folder by default; an index already there is
   reused as it is).
2. Every question is ranked once by the shipped ranking (`retrieve`: hybrid, `DEPTH` candidates a
   retriever, `DEPTH` hits: what `unichunk eval` scores).
3. Every candidate cuts the first `hits_used` hits into passages and ranks them with `weight` on their own
   BM25 (`unichunk.retrieval.passages.rank_passages`); the passages, then the hits, fill 1,000 / 2,000 /
   4,000 characters (`budget_grid`: overlaps paid once) and are scored on the **tune** half of
   `split_halves`. The choice, by `benchmarks.fusion_tuning`'s rule: the best mean recall over the budgets;
   within `TIE` of it, the fewest hits cut, then the higher mean. No passages at all is a candidate too.
4. The **report** half, never read by step 3: no passages, the choice, and each candidate for the record,
   with the choice paired question by question against no passages (bootstrap CI, sign test).
5. What passages cost: `search()` on every question without and with them, interleaved (p50, p90).
6. What a generator reads: `search()`'s `result.context` as shipped (k 5, neighbours ±1) at the token budgets
   of those characters (cl100k on the located documents, as `unichunk eval` converts them), assembled from
   the hits alone and with the passages admitted first; both halves, paired on the report half.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Mapping, Sequence
from itertools import product
from pathlib import Path

import numpy as np

from benchmarks import evaldata
from unichunk import Pipeline
from unichunk.chunking.tokenizer import TokenCounter
from unichunk.index.generations import reading_settings
from unichunk.index.status import StatusStore
from unichunk.retrieval.evaluation.metric import BUDGETS, budget_grid, spans_scores, token_budgets
from unichunk.retrieval.evaluation.paired import paired_bootstrap
from unichunk.retrieval.evaluation.questions import load_questions, split_halves
from unichunk.retrieval.evaluation.references import Documents, Located, locate
from unichunk.retrieval.evaluation.run import DEPTH
from unichunk.retrieval.passages import LEXICAL_WEIGHT, PASSAGE_HITS, rank_passages
from unichunk.retrieval.ranking import RetrievalSettings, retrieve
from unichunk.retrieval.readers import RANKING_SINKS, Readers, open_readers
from unichunk.retrieval.search import SearchOptions, search
from unichunk.sinks.base import TextScorer

HITS_USED = (1, 2, 3, 5, 10)
WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)
TIE = 0.0025  # recall: candidates within a quarter of a point of the best count as tied
Candidate = tuple[int, float] | None  # (hits cut, weight), or None: no passages


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="where the corpora are ingested")
    parser.add_argument("--corpora", type=Path, default=None, help="default: the evaluation data's")
    parser.add_argument("--questions", type=Path, default=None, help="default: the evaluation data's")
    args = parser.parse_args(argv)
    corpora = args.corpora or evaldata.corpora_dir("passage tuning")
    questions = args.questions or evaldata.questions_file("passage tuning")
    with tempfile.TemporaryDirectory(prefix="passage-tuning-") as scratch:
        data_dir = args.data_dir or Path(scratch)
        with Pipeline(data_dir=data_dir) as pipeline:
            if not pipeline.indexed():
                pipeline.ingest(corpora)
            run(pipeline, questions)


def choose(tuned: Mapping[Candidate, np.ndarray]) -> Candidate:
    """`fusion_tuning`'s rule: the best mean recall; among candidates within `TIE` of it, the fewest hits
    cut (none at all the fewest), then the higher mean."""
    best = max(rows.mean() for rows in tuned.values())
    tied = [c for c, rows in tuned.items() if rows.mean() >= best - TIE]
    return min(tied, key=lambda c: (0 if c is None else c[0], -tuned[c].mean()))


def run(pipeline: Pipeline, questions_file: Path) -> None:
    pinned = reading_settings(pipeline.settings)
    questions = load_questions(questions_file)
    documents = Documents(StatusStore.of(pinned, readonly=True).rows())
    located, _ = locate(questions, documents)
    tune, report = ({q.id for q in half} for half in split_halves(questions))
    readers = open_readers(pinned, RANKING_SINKS)
    scorer = readers.keywords if isinstance(readers.keywords, TextScorer) else None
    settings = RetrievalSettings(mode="hybrid", candidates=DEPTH)
    ranked = [
        (q, retrieve(readers.rankers(), q.question.text, DEPTH, settings).hits) for q in located if q.spans
    ]
    candidates: list[Candidate] = [None, *product(HITS_USED, WEIGHTS)]

    def recall(candidate: Candidate, half: set[str]) -> np.ndarray:
        rows = []
        for q, hits in ranked:
            if q.question.id not in half:
                continue
            spans = [(h.document_id, h.chunk.start_char, h.chunk.end_char) for h in hits]
            if candidate is not None:
                found = rank_passages(q.question.text, hits, readers.neighbour_store(), scorer,
                                      hits_used=candidate[0], weight=candidate[1])  # fmt: skip
                spans = [(p.document_id, p.start_char, p.end_char) for p in found] + spans
            rows.append(budget_grid(q.spans, spans, BUDGETS, None)[:, 0])
        return np.asarray(rows)

    tuned = {c: recall(c, tune) for c in candidates}
    choice = choose(tuned)
    print(
        f"tune half ({len(tuned[None])} questions), recall (%) at {' / '.join(map(str, BUDGETS))} characters, mean"
    )
    for c in sorted(candidates, key=lambda c: -tuned[c].mean()):
        print(f"  {_name(c):28} {_figures(tuned[c])}{'   <- chosen' if c == choice else ''}")
    print(f"shipped now: hits cut {PASSAGE_HITS}, weight {LEXICAL_WEIGHT}")
    held = {c: recall(c, report) for c in candidates}
    print(f"\nreport half ({len(held[None])} questions, not used to choose)")
    for c in [None, choice]:
        print(f"  {_name(c):28} {_figures(held[c])}")
    if choice is not None:
        for i, budget in enumerate(BUDGETS):
            d = paired_bootstrap(held[choice][:, i], held[None][:, i])
            print(f"  paired, {budget} chars: {d.mean * 100:+.1f} [{d.low * 100:+.1f}, {d.high * 100:+.1f}] "
                  f"{d.wins}/{d.losses}/{d.ties} p={d.p:.2g}")  # fmt: skip
    print("\nreport half, every candidate (for the record, not for choosing)")
    for c in candidates:
        print(f"  {_name(c):28} {_figures(held[c])}")
    print(_latency(readers, [q.question.text for q, _ in ranked]))
    scored = [q for q, _ in ranked]
    texts = [t for d in {d for q in scored for d in q.spans} if (t := documents.text(d)) is not None]
    counter = TokenCounter()
    chars_per_token = sum(map(len, texts)) / max(1, sum(counter.count(t) for t in texts))
    _contexts(readers, scored, token_budgets(BUDGETS, chars_per_token), tune, report)


def _contexts(
    readers: Readers, located: Sequence[Located], budgets: Sequence[int], tune: set[str], report: set[str]
) -> None:
    """Step 6: recall of `result.context` (the document characters from each span's start to its end) at
    each token budget, without and with the passages admitted first, per half; the difference paired by
    question on the report half."""
    rows: dict[bool, dict[str, list[list[float]]]] = {False: {}, True: {}}
    for q in located:
        half = "tune" if q.question.id in tune else "report" if q.question.id in report else ""
        for passages in (False, True):
            row = []
            for budget in budgets:
                found = search(
                    readers, q.question.text, 5, SearchOptions(budget=budget, graph=False, passages=passages)
                )
                taken: dict[str, list[tuple[int, int]]] = {}
                for span in found.context.spans if found.context else ():
                    taken.setdefault(span.document_id, []).append((span.start_char, span.end_char))
                row.append(spans_scores(q.spans, taken)[0])
            rows[passages].setdefault(half, []).append(row)
    print(
        f"\nwhat a generator reads: result.context (k 5, neighbours ±1), recall (%) at "
        f"{' / '.join(map(str, budgets))} tokens ({' / '.join(map(str, BUDGETS))} characters), mean"
    )
    for half in ("tune", "report"):
        alone, first = (np.asarray(rows[flag].get(half, [])) for flag in (False, True))
        print(f"  {half} half: hits alone {_figures(alone)}; passages first {_figures(first)}")
    alone, first = (np.asarray(rows[flag].get("report", [])) for flag in (False, True))
    for i, budget in enumerate(budgets):
        d = paired_bootstrap(first[:, i], alone[:, i])
        print(f"  paired on the report half, {budget} tokens: {d.mean * 100:+.1f} [{d.low * 100:+.1f}, "
              f"{d.high * 100:+.1f}] {d.wins}/{d.losses}/{d.ties}")  # fmt: skip


def _latency(readers: Readers, queries: Sequence[str]) -> str:
    """`search()` (k 5, as shipped) on every query without and with passages, interleaved so a noisy
    machine weighs on both alike: p50 and p90 in ms."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for query in queries:
        for passages in (False, True):
            started = time.perf_counter()
            search(readers, query, 5, SearchOptions(passages=passages))
            times[passages].append((time.perf_counter() - started) * 1000)
    p50, p90 = ({flag: np.percentile(ms, q) for flag, ms in times.items()} for q in (50, 90))
    return (
        f"\nsearch() over {len(queries)} questions, interleaved: p50 {p50[False]:.1f} ms without passages, "
        f"{p50[True]:.1f} ms with (p90 {p90[False]:.1f} / {p90[True]:.1f})"
    )


def _name(candidate: Candidate) -> str:
    return "no passages" if candidate is None else f"hits cut {candidate[0]}, weight {candidate[1]:g}"


def _figures(rows: np.ndarray) -> str:
    means = rows.mean(axis=0) * 100
    return " / ".join(f"{m:4.1f}" for m in means) + f"  ({means.mean():4.1f})"


if __name__ == "__main__":
    main()
