"""What the models read, as shipped: `model_input=segments` against `chunks` (issue 25):
`python -m benchmarks.model_input [--embedding-backend torch]`.

Each way ingests the eval corpora into a fresh data dir with the shipped pipeline (all three sinks,
`auto`, default settings but `UNICHUNK_MODEL_INPUT`), timed, then scores the shipped search with
`Pipeline.eval` (strict character recall at 1,000 / 2,000 / 4,000 characters, each retriever alone too).
Printed side by side in one run: the ingest wall time of each way and their ratio, recall per half
(tune, report, all 276 questions) per retriever, and segments minus chunks for the fused search, paired by
question with its 95 % bootstrap interval (`unichunk.retrieval.evaluation.paired`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import evaldata
from unichunk import Pipeline
from unichunk.retrieval.evaluation.metric import BUDGETS
from unichunk.retrieval.evaluation.paired import paired_bootstrap
from unichunk.retrieval.evaluation.questions import Question, load_questions, split_halves
from unichunk.settings import SinkSettings

WAYS = ("chunks", "segments")


def measure(
    way: str, corpora: Path, questions: Path, workdir: Path, backend: str, *, compiled: bool = True
) -> dict[str, Any]:
    """Ingest (timed) and evaluate one way in its own data dir."""
    settings = SinkSettings(
        data_dir=workdir / way, model_input=way, embedding_backend=backend, embedding_compiled=compiled
    )
    with Pipeline(settings) as pipeline:
        started = time.perf_counter()
        summary = pipeline.ingest(corpora)
        seconds = time.perf_counter() - started
        report = pipeline.eval(questions, retrievers=True)
    scores = {q["id"]: q["scores"] for q in report["questions"]}
    return {"seconds": seconds, "embedded": summary.embedded, "scores": scores}


def recall(scores: dict[str, Any], ids: list[str], label: str, budget: int) -> np.ndarray:
    return np.array([scores[i][label]["chars"][str(budget)]["recall"] * 100 for i in ids])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedding-backend", default="torch", choices=["torch", "onnx", "onnx-int8"])
    args = parser.parse_args(argv)
    corpora = evaldata.corpora_dir("benchmarks.model_input")
    questions_file = evaldata.questions_file("benchmarks.model_input")
    questions = load_questions(questions_file)
    with tempfile.TemporaryDirectory(prefix="unichunk-model-input-") as work:
        runs = {
            way: measure(way, corpora, questions_file, Path(work), args.embedding_backend) for way in WAYS
        }
    for way, run in runs.items():
        print(f"{way}: ingest {run['seconds']:.1f} s (all sinks, {run['embedded']} chunks embedded)")
    print(f"segments / chunks, ingest wall: {runs['segments']['seconds'] / runs['chunks']['seconds']:.2f}x\n")
    paired_table(runs["chunks"]["scores"], runs["segments"]["scores"], questions, ("chunks", "segments"))


def paired_table(
    base: dict[str, Any], other: dict[str, Any], questions: list[Question], names: tuple[str, str]
) -> None:
    """Strict recall of two runs' scores per retriever and half (tune, report, all), and `other` minus
    `base` paired by question (the fused search with its 95 % bootstrap interval)."""
    tune, report = split_halves(questions)
    halves = {
        "tune": [q.id for q in tune],
        "report": [q.id for q in report],
        "all": [q.id for q in questions],
    }
    halves = {
        name: [i for i in ids if i in base and base[i]["live"]["chars"]] for name, ids in halves.items()
    }
    print(f"strict recall (%) at {' / '.join(f'{b:,}' for b in BUDGETS)} characters")
    print(f"| retriever | half | {names[0]} | {names[1]} | {names[1]} - {names[0]} (fused: 95 % interval) |")
    print("|---|---|---|---|---|")
    for label in base[halves["all"][0]]:
        for half, ids in halves.items():
            cells = [
                " / ".join(f"{recall(scores, ids, label, b).mean():.1f}" for b in BUDGETS)
                for scores in (base, other)
            ]
            deltas = []
            for b in BUDGETS:
                paired = paired_bootstrap(recall(other, ids, label, b), recall(base, ids, label, b))
                shown = f"{paired.mean:+.1f}"
                if label == "live":
                    shown += f" [{paired.low:+.1f}, {paired.high:+.1f}]"
                deltas.append(shown)
            name = "fused (shipped search)" if label == "live" else label.removeprefix("live:") + " alone"
            print(f"| {name} | {half} | {cells[0]} | {cells[1]} | {' / '.join(deltas)} |", flush=True)


if __name__ == "__main__":
    main()
