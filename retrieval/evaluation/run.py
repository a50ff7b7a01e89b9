"""One evaluation: the questions run through the shipped search on one or two index generations, scored.

Per generation, every question is answered by `unichunk.retrieval.search.search` (the read path of the
CLI and the HTTP API; hybrid by default) over that generation's stores, pinned to it: a candidate is read
without switching. Its passages (the top hits' best stretches), then its `DEPTH` best hits, in rank
order, fill each budget (`metric.fill_budget`: characters, and cl100k tokens of the same budgets at the
evaluated documents' characters per token) and are scored against the located references (recall,
precision, IoU); the top `k` give hit@k and the reciprocal rank at document level. Without the passages,
this is the computation of the benchmark's "hybrid" row (`benchmarks.retrieval_quality`: `DEPTH` hits,
`DEPTH` candidates per retriever before fusion), so the shipped figures and the benchmark's agree on the
same chunks. Two generations are paired question by question (`paired.paired_bootstrap`,
candidate minus live). The report is the JSON document of `unichunk eval --json` (docs/evaluation.md).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from unichunk.chunking.pieces import token_starts
from unichunk.index.generations import registry_of
from unichunk.index.status import StatusStore
from unichunk.retrieval.evaluation.metric import (
    BUDGETS,
    TokenMeter,
    budget_grid,
    document_rank,
    token_budgets,
)
from unichunk.retrieval.evaluation.paired import paired_bootstrap
from unichunk.retrieval.evaluation.questions import QuestionsError, load_questions
from unichunk.retrieval.evaluation.references import Documents, Located, locate
from unichunk.retrieval.ranking import Mode, RetrievalSettings
from unichunk.retrieval.readers import RANKING_SINKS, SEARCH_SINKS, Readers
from unichunk.retrieval.search import SearchOptions, search
from unichunk.sinks.base import SinkName
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import flow_sinks

DEPTH = 40  # hits per question, and candidates per retriever before fusion: the benchmark's
DEFAULT_K = 10
METRICS = ("recall", "precision", "iou")
EVALUATIONS = "evaluations"  # under the data dir: latest.json and one stamped copy per evaluation
Reading = Callable[[SinkSettings], AbstractContextManager[Readers]]


@dataclass(frozen=True)
class Target:
    """A generation to evaluate, under a label of the report (`live`, `candidate`)."""

    label: str
    generation_id: str


@contextmanager
def pooled_readers(settings: SinkSettings, names: Sequence[SinkName] = RANKING_SINKS) -> Iterator[Readers]:
    """The stores `names` (by default the ranking stores) of the generation `settings` are pinned to,
    held for the block as a flow holds them (`flow_sinks`): a store a serving process keeps open for its
    searches stays open after."""
    with flow_sinks(names, settings) as sinks:
        yield Readers.of(sinks)


def stores_read(retrievers: bool) -> tuple[SinkName, ...]:
    """The stores an evaluation reads: the ranking stores, and the graph store when a scored list reads
    it (`retrievers`: the graph alone is one; hybrid, once its graph weight is above 0)."""
    return SEARCH_SINKS if retrievers or RetrievalSettings().uses_graph() else RANKING_SINKS


class TokenStarts(Mapping[str, np.ndarray]):
    """Where each document's cl100k tokens start, computed when a budget first prices its text (a
    retrieved document that holds no reference too); a document that cannot be loaded is missing, and
    `TokenMeter` prices it at the average characters per token."""

    def __init__(self, documents: Documents) -> None:
        self.documents = documents
        self.cache: dict[str, np.ndarray] = {}

    def __getitem__(self, document_id: str) -> np.ndarray:
        if document_id not in self.cache:
            text = self.documents.text(document_id) if document_id in self.documents.rows else None
            if text is None:
                raise KeyError(document_id)
            self.cache[document_id] = token_starts(text)
        return self.cache[document_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.cache)

    def __len__(self) -> int:
        return len(self.cache)


def evaluate(
    settings: SinkSettings,
    questions_file: str | Path,
    targets: Sequence[Target],
    *,
    budgets: Sequence[int] = BUDGETS,
    k: int = DEFAULT_K,
    retrievers: bool = False,
    reading: Reading | None = None,
) -> dict[str, Any]:
    """The report of `targets` (one or two; the second is compared with the first) on the questions of
    `questions_file`. References are located in the first target's documents. `retrievers`: each
    retriever alone too, as labels `<label>:keywords`, `<label>:vectors` and, with a graph store,
    `<label>:graph`. `reading` opens a generation's stores (default: `pooled_readers`, the graph
    store too when a retriever reads it)."""
    if not targets:
        raise QuestionsError("nothing to evaluate: no live generation and none named")
    questions = load_questions(questions_file)
    first = settings.for_generation(targets[0].generation_id)
    documents = Documents(StatusStore.of(first, readonly=True).rows())
    located, unlocated = locate(questions, documents)
    starts = TokenStarts(documents)
    texts = {d: documents.texts[d] for q in located for d in q.spans}
    tokens_total = sum(len(starts[d]) - 1 for d in texts)
    chars_per_token = sum(map(len, texts.values())) / tokens_total if tokens_total else 4.0
    meter = TokenMeter(starts, chars_per_token)
    token_grid = token_budgets(budgets, chars_per_token)
    registry = registry_of(settings)
    modes: list[tuple[str, Mode]] = [("", "hybrid")]
    if retrievers:
        modes += [(":keywords", "keywords"), (":vectors", "vectors"), (":graph", "graph")]
    if reading is None:
        reading = functools.partial(pooled_readers, names=stores_read(retrievers))
    scored: dict[str, list[dict[str, Any]]] = {}
    for target in targets:
        with reading(settings.for_generation(target.generation_id)) as readers:
            for suffix, mode in modes:
                if mode == "graph" and readers.graph is None:
                    continue  # a generation without a graph store: no graph row
                scored[target.label + suffix] = [
                    _score(readers, q, mode, budgets, token_grid, meter, k) for q in located
                ]
    generations = []
    for target in targets:
        found = registry.get(target.generation_id)
        chunking = found.description.get("chunking", {}) if found else {}
        generations.append(
            {"label": target.label, "generation_id": target.generation_id, "settings": describe(chunking)}
        )
    report: dict[str, Any] = {
        "questions_file": str(questions_file),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "budgets": {"chars": list(budgets), "tokens": list(token_grid)},
        "k": k,
        "depth": DEPTH,
        "generations": generations,
        "overall": {label: _overall(rows) for label, rows in scored.items()},
        "questions": [
            {
                "question": q.question.text,
                "id": q.question.id,
                "scores": {label: rows[i] for label, rows in scored.items()},
            }
            for i, q in enumerate(located)
        ],
        "unlocated": [u.as_dict() for u in unlocated],
        "gate": None,
    }
    if len(targets) > 1:
        report["differences"] = differences(scored[targets[1].label], scored[targets[0].label])
    return report


def describe(chunking: dict[str, Any]) -> str:
    """A generation's chunking in a few words (`auto`, `fixed_chars 2000/0`)."""
    name = str(chunking.get("name", "?"))
    size, overlap = chunking.get("chunk_size"), chunking.get("chunk_overlap")
    return name if size is None else f"{name} {size}/{overlap or 0}"


def _score(
    readers: Readers,
    question: Located,
    mode: Mode,
    budgets: Sequence[int],
    token_grid: Sequence[int],
    meter: TokenMeter,
    k: int,
) -> dict[str, Any]:
    """One question's scores on one generation: per budget R / P / IoU (characters, tokens), and the rank
    of its first hit in a relevant document (None: none in the top k)."""
    options = SearchOptions(mode=mode, candidates=DEPTH, context=False, graph=False)
    found = search(readers, question.question.text, DEPTH, options)
    hits = found.hits
    ranked = [(p.document_id, p.start_char, p.end_char) for p in found.passages]
    ranked += [(h.document_id, h.start_char, h.end_char) for h in hits]
    out: dict[str, Any] = {"chars": {}, "tokens": {}}
    if question.spans:
        for unit, grid, unit_meter in (("chars", budgets, None), ("tokens", token_grid, meter)):
            values = budget_grid(question.spans, ranked, grid, unit_meter)
            out[unit] = {str(b): dict(zip(METRICS, map(float, row), strict=True)) for b, row in zip(grid, values, strict=True)}  # fmt: skip
    out["rank"] = document_rank([h.document_id for h in hits], question.documents, k)
    out["relevant"] = bool(question.documents)
    return out


def _overall(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over the questions: span scores over those with located references, hit@k and MRR over
    those with a relevant document."""
    spans = [r for r in rows if r["chars"]]
    judged = [r for r in rows if r["relevant"]]
    out: dict[str, Any] = {}
    for unit in ("chars", "tokens"):
        out[unit] = {
            budget: {m: float(np.mean([r[unit][budget][m] for r in spans])) for m in METRICS}
            for budget in (spans[0][unit] if spans else {})
        }
    out["hit_at_k"] = float(np.mean([r["rank"] is not None for r in judged])) if judged else 0.0
    out["mrr"] = float(np.mean([1 / r["rank"] if r["rank"] else 0.0 for r in judged])) if judged else 0.0
    out["questions"] = len(rows)
    out["scored"] = len(spans)
    return out


def differences(candidate: Sequence[dict[str, Any]], live: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Candidate minus live per unit, budget and metric, paired over the questions scored on spans: mean,
    bootstrap 95 % interval, wins and losses."""
    pairs = [(c, v) for c, v in zip(candidate, live, strict=True) if c["chars"] and v["chars"]]
    out: dict[str, Any] = {}
    for unit in ("chars", "tokens"):
        out[unit] = {}
        for budget in pairs[0][0][unit] if pairs else {}:
            out[unit][budget] = {}
            for metric in METRICS:
                paired = paired_bootstrap(
                    np.array([c[unit][budget][metric] for c, _ in pairs]),
                    np.array([v[unit][budget][metric] for _, v in pairs]),
                )
                out[unit][budget][metric] = {
                    "mean": paired.mean, "low": paired.low, "high": paired.high,
                    "wins": paired.wins, "losses": paired.losses, "p": paired.p,
                }  # fmt: skip
    return out


def gate(report: dict[str, Any], tolerance: float, live: str = "live", candidate: str = "candidate") -> dict:
    """Whether the candidate may go live: its mean character recall is not below the live one's by more
    than `tolerance` at any character budget. Each budget where it is, is a reason; questions with no
    located span (document-level ones only) judge nothing, and so refuse too."""
    reasons = []
    ours, theirs = report["overall"][candidate]["chars"], report["overall"][live]["chars"]
    if not theirs:  # document-level questions only, or nothing located: recall cannot be judged
        reasons.append("no question has a located reference span, so recall cannot be compared")
    for budget, scores in theirs.items():
        drop = scores["recall"] - ours[budget]["recall"]
        if drop > tolerance:
            reasons.append(
                f"recall at {int(budget):,} characters: candidate {100 * ours[budget]['recall']:.1f} % against "
                f"live {100 * scores['recall']:.1f} %, {100 * drop:.1f} points worse (tolerance "
                f"{100 * tolerance:.1f})"
            )
    return {"tolerance": tolerance, "passed": not reasons, "reasons": reasons}


def save_report(report: dict[str, Any], data_dir: Path) -> Path:
    """Write the report as `<data_dir>/evaluations/<UTC stamp>.json` and `latest.json` (each written
    whole, then renamed: a reader never sees half a report); the stamped path."""
    folder = data_dir / EVALUATIONS
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    body = json.dumps(report, indent=1, ensure_ascii=False)
    stamped = folder / f"{stamp}.json"
    for path in (stamped, folder / "latest.json"):
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        partial.write_text(body, encoding="utf-8")
        partial.replace(path)
    return stamped
