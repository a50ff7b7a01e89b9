"""MiniLM's backends side by side in one run: throughput, vectors against torch's, retrieval quality.

    python -m benchmarks.embedder_speed [--variants torch,fp32,int8-skip-ends,...] [--texts 400]
        [--rounds 3] [--no-retrieval] [--json FILE]

The texts are the chunks `auto` cuts from the evaluation corpora (`benchmarks.evaldata`, ../shared/eval),
every n-th to `--texts` of them. Each round embeds them once with every variant, in turn, so a load
change on the (shared) machine touches every variant alike; a variant's figure is its median over the
rounds of its throughput divided by torch fp32's in the same round. Cosine: each variant's vectors
against torch fp32's, text by text (mean and min).

Retrieval: `benchmarks.retrieval_quality.run` (the strict metric: recall of the reference characters in
the top hits cut to a budget) with `auto` only, no baselines, each variant as the embedder of chunks and
questions; the `vectors` and `hybrid` retrievers' recall at 1,000 / 2,000 / 4,000 characters, and the
difference to torch fp32 in points.

Variants: `torch` (the shipped fp32 backend; until 2026-11-27 sentence-transformers' `encode`), `torch-bf16`
(bfloat16, compiled as shipped) and the names of `unichunk.sinks.vectors.onnx_export.VARIANTS`
(ONNX Runtime fp32 with and without ONNX Runtime's BERT fusions; int8 recipes of `quantize_dynamic`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import evaldata, retrieval_quality
from benchmarks.budget_metric import BUDGETS, GRID
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.service import ChunkingService
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.onnx_export import VARIANTS

DEFAULT_VARIANTS = ("torch", "fp32-plain", "fp32", "int8-default", "int8-perchannel", "int8-skip-ends")
RETRIEVERS = ("vectors", "hybrid")


def corpus_texts(limit: int) -> list[str]:
    """`auto`'s chunks of the eval corpora, every n-th to about `limit` (the embedded text, as stored)."""
    corpora = retrieval_quality.load_corpora(evaldata.corpora_dir("embedder_speed"))
    service = ChunkingService()
    texts = [c.content for doc in corpora.values() for c in service.chunk(doc, ChunkStrategy())]
    step = max(1, len(texts) // limit)
    return texts[::step][:limit]


TORCH_VARIANTS = ("torch", "torch-bf16")  # the shipped torch backends, fp32 and bfloat16


def make(variant: str, cache_dir: Path) -> MiniLMEmbedder:
    if variant in TORCH_VARIANTS:
        return MiniLMEmbedder(backend=variant)  # type: ignore[arg-type]
    return MiniLMEmbedder(variant=variant, cache_dir=cache_dir)


def throughput(embedders: dict[str, MiniLMEmbedder], texts: list[str], rounds: int) -> dict[str, dict]:
    """Per variant: median texts/s and median ratio to torch in the same round; vectors of the last round."""
    speed: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, np.ndarray] = {}
    for embedder in embedders.values():  # warm: load, export, first session run
        embedder.embed(texts[:8])
    for number in range(rounds):
        for name, embedder in embedders.items():
            started = time.perf_counter()
            vectors[name] = np.asarray(embedder.embed(texts), dtype=np.float32)
            speed[name].append(len(texts) / (time.perf_counter() - started))
        line = ", ".join(f"{n} {s[-1]:.1f}/s" for n, s in speed.items())
        print(f"round {number + 1}: {line}", file=sys.stderr, flush=True)
    reference = vectors["torch"]
    out = {}
    for name in embedders:
        cosine = (vectors[name] * reference).sum(axis=1)
        ratios = [a / b for a, b in zip(speed[name], speed["torch"], strict=True)]
        out[name] = {
            "texts_per_s": statistics.median(speed[name]),
            "ratio_to_torch": statistics.median(ratios),
            "ratios": ratios,
            "cosine_mean": float(cosine.mean()),
            "cosine_min": float(cosine.min()),
            "runs": embedders[name].runs,
            "fingerprint": embedders[name].fingerprint,
        }
    return out


def retrieval(embedders: dict[str, MiniLMEmbedder]) -> dict[str, dict[str, list[float]]]:
    """Per variant and retriever: mean strict recall (%) at BUDGETS characters, `auto` chunks."""
    corpora = evaldata.corpora_dir("embedder_speed")
    questions = evaldata.questions_file("embedder_speed")
    out: dict[str, dict[str, list[float]]] = {}
    columns = [GRID.index(b) for b in BUDGETS]
    for name, embedder in embedders.items():
        started = time.perf_counter()
        results = retrieval_quality.run(
            corpora, questions, False, None, "auto", embedder=embedder, with_baselines=False
        )
        (label,) = results.configs
        out[name] = {
            retriever: [
                100 * float(results.strict[(label, retriever, "chars")][:, i, 0].mean()) for i in columns
            ]
            for retriever in RETRIEVERS
        }
        print(f"retrieval {name}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    return out


def report(speed: dict[str, dict], quality: dict[str, dict[str, list[float]]] | None, texts: int) -> None:
    print(f"\n### MiniLM backends: {texts} texts (auto chunks of the eval corpora), load {machine_load()}\n")
    print("| variant | runs | texts/s | × torch fp32 (median of rounds) | cosine to torch mean / min |")
    print("|---|---|---|---|---|")
    for name, row in speed.items():
        print(
            f"| {name} | {row['runs']} | {row['texts_per_s']:.1f} | {row['ratio_to_torch']:.2f} "
            f"({', '.join(f'{r:.2f}' for r in row['ratios'])}) | "
            f"{row['cosine_mean']:.4f} / {row['cosine_min']:.4f} |"
        )
    if not quality:
        return
    budgets = " | ".join(f"{r} {b:,}" for r in RETRIEVERS for b in BUDGETS)
    print("\n### strict recall (%) by characters, `auto`; in brackets: points against torch fp32\n")
    print(f"| variant | {budgets} |")
    print("|---|" + "---|" * (len(RETRIEVERS) * len(BUDGETS)))
    base = quality["torch"]
    for name, rows in quality.items():
        cells = [f"{v:.1f} ({v - base[r][i]:+.1f})" for r in RETRIEVERS for i, v in enumerate(rows[r])]
        print(f"| {name} | " + " | ".join(cells) + " |")


def machine_load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"comma-separated: torch, torch-bf16 and any of {', '.join(VARIANTS)}")  # fmt: skip
    parser.add_argument("--texts", type=int, default=400, help="texts embedded per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-retrieval", action="store_true", help="throughput and cosine only")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where the ONNX files are exported (default: a temporary directory)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    names = ["torch", *(v for v in args.variants.split(",") if v and v != "torch")]
    unknown = [n for n in names if n not in TORCH_VARIANTS and n not in VARIANTS]
    if unknown:
        raise SystemExit(
            f"unknown variants {unknown}: want torch, torch-bf16 or one of {', '.join(VARIANTS)}"
        )
    logging.getLogger("unichunk.sinks.vectors.sink").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="bench_onnx_") as tmp:
        cache = args.cache_dir or Path(tmp)
        embedders = {name: make(name, cache) for name in names}
        texts = corpus_texts(args.texts)
        print(f"load before: {machine_load()}", file=sys.stderr)
        speed = throughput(embedders, texts, args.rounds)
        quality = None if args.no_retrieval else retrieval(embedders)
    report(speed, quality, len(texts))
    print(f"\nload after: {machine_load()}")
    if args.json:
        args.json.write_text(json.dumps({"throughput": speed, "retrieval": quality}, indent=1))


if __name__ == "__main__":
    main()
