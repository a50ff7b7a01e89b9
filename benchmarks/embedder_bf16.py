"""MiniLM in bfloat16 against torch fp32, eager and compiled (`torch.compile`, AOTInductor): how near 2x.

    python -m benchmarks.embedder_bf16 [--rounds 3] [--batch 8] [--no-compile]

The texts are what the pipeline embeds for the evaluation corpora (../shared/eval): the segments of
`auto`'s chunks that `model_input=segments` (the default) reads once each, and the chunks themselves (what
`model_input=chunks` reads). Each variant runs its own copy of the bundled MiniLM through the same loop:
texts sorted by length, cut into batches of `--batch` (as sentence-transformers cuts them), the token
states summed over each text's real tokens (what `embed_sums` returns), normalised. Variants:

- `fp32`: torch fp32, the baseline;
- `bf16`: the weights in bfloat16 (the shipped `torch-bf16` backend);
- `bf16-compiled`: the same, compiled by `torch.compile` (inductor, weights frozen, dynamic shapes); not
  shipped: its compile time is printed, paid again by every process that loads it, and it needs a C
  compiler at run time;
- `bf16-aot`: the same graph compiled ahead of time (`torch.export` with dynamic batch and length, then
  AOTInductor's `aoti_compile_and_package`, weights frozen) into a package file, and loaded from it: the
  compiling is paid once (as the ONNX export is), a process only loads the package. Shipped: `torch-bf16`,
  `auto`'s choice on a CPU with bf16 instructions (`unichunk.sinks.vectors.aot_package`, whose
  `compile_package` this calls; `benchmarks.default_embedder` measures the shipped embedder itself).

Each round runs every variant in turn on the same texts; a variant's ratio is fp32's seconds over its own
in the same round (median of the rounds, each in brackets), so a load change touches all alike. Cosine:
each text's normalised sum against fp32's (mean / min). One loop for all, not `SentenceTransformer.encode`:
the ratios compare the model's arithmetic, not the wrapper's.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import evaldata, retrieval_quality
from benchmarks.embedder_speed import machine_load
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.segments import segment_batch
from unichunk.chunking.service import ChunkingService
from unichunk.sinks.vectors.aot_package import HiddenStates, aoti_load_package, compile_package
from unichunk.sinks.vectors.minilm import load_minilm

Forward = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def pipeline_texts() -> dict[str, list[str]]:
    """The eval corpora's `auto` chunks (as embedded) and their segments (as `model_input=segments` reads)."""
    corpora = retrieval_quality.load_corpora(evaldata.corpora_dir("embedder_bf16"))
    service = ChunkingService()
    batch = [(doc, service.chunk(doc, ChunkStrategy())) for doc in corpora.values()]
    return {
        "segments": segment_batch(batch, headings=True).texts,
        "chunks": [chunk.embed_text for _, chunks in batch for chunk in chunks],
    }


def batches(tokenizer: Any, texts: list[str], size: int) -> list[dict[str, torch.Tensor]]:
    """`texts` sorted by length and tokenized `size` at a time, padded to each batch's longest."""
    ordered = sorted(texts, key=len)
    return [
        dict(
            tokenizer(
                ordered[i : i + size], padding=True, truncation=True, max_length=256, return_tensors="pt"
            )
        )
        for i in range(0, len(ordered), size)
    ]


def summed(forward: Forward, prepared: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    """Each text's token states summed over its real tokens, normalised, in float32."""
    out = []
    with torch.inference_mode():
        for features in prepared:
            states = forward(features)
            mask = features["attention_mask"].unsqueeze(-1).to(states.dtype)
            out.append((states * mask).sum(dim=1).float())
    return torch.nn.functional.normalize(torch.cat(out), dim=1)


def variants(compiled: bool) -> dict[str, Forward]:
    transformer = load_minilm("cpu")[0].auto_model.eval()
    fp32 = HiddenStates(copy.deepcopy(transformer))
    bf16 = HiddenStates(copy.deepcopy(transformer).to(torch.bfloat16))
    out: dict[str, Forward] = {"fp32": lambda f: fp32(**f), "bf16": lambda f: bf16(**f)}
    if compiled:
        import torch._inductor.config as inductor  # the one switch for frozen weights; benchmark only

        inductor.freezing = True
        model = torch.compile(HiddenStates(copy.deepcopy(transformer).to(torch.bfloat16)), dynamic=True)
        out["bf16-compiled"] = lambda f: model(**f)
        out["bf16-aot"] = _ahead_of_time(copy.deepcopy(transformer).to(torch.bfloat16))
    return out


def _ahead_of_time(model: torch.nn.Module) -> Forward:
    """`model` compiled as the shipped backend compiles it (`aot_package.compile_package`) into a
    temporary folder (removed at exit) and loaded back; prints the compile and load seconds."""
    folder = tempfile.mkdtemp(prefix="bench_aoti_")
    atexit.register(shutil.rmtree, folder, True)
    target = Path(folder) / "minilm_bf16.pt2"
    started = time.perf_counter()
    compile_package(model, target)
    compiled = time.perf_counter() - started
    started = time.perf_counter()
    loaded = aoti_load_package(str(target))
    print(f"bf16-aot: exported and compiled in {compiled:.1f} s, package loaded in "
          f"{time.perf_counter() - started:.2f} s", flush=True)  # fmt: skip
    return lambda f: loaded(**f)


def speedup(baseline: list[float], seconds: list[float]) -> str:
    """The baseline's seconds over these, round by round: the median in bold, each round in brackets."""
    ratios = [a / b for a, b in zip(baseline, seconds, strict=True)]
    return f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="texts per model call (the shipped default: 8)")
    parser.add_argument("--no-compile", action="store_true", help="fp32 and bf16 only")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    texts = pipeline_texts()
    tokenizer = load_minilm("cpu").tokenizer
    forwards = variants(not args.no_compile)
    print(f"load before: {machine_load()}", file=sys.stderr)
    for kind, items in texts.items():
        prepared = batches(tokenizer, items, args.batch)
        tokens = sum(int(f["attention_mask"].sum()) for f in prepared)
        warm = {}
        for name, forward in forwards.items():  # first call: compiles the compiled variant
            started = time.perf_counter()
            summed(forward, prepared[:2] + prepared[-2:])
            warm[name] = time.perf_counter() - started
        seconds: dict[str, list[float]] = {name: [] for name in forwards}
        vectors: dict[str, torch.Tensor] = {}
        for number in range(args.rounds):
            for name, forward in forwards.items():
                started = time.perf_counter()
                vectors[name] = summed(forward, prepared)
                seconds[name].append(time.perf_counter() - started)
            print(f"{kind} round {number + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items()),
                  file=sys.stderr, flush=True)  # fmt: skip
        print(f"\n### {kind}: {len(items)} texts, {tokens:,} word pieces, batches of {args.batch}\n")
        print("| variant | seconds (median) | x fp32 (rounds) | cosine to fp32 mean / min | first call s |")
        print("|---|---:|---|---|---:|")
        for name in forwards:
            cosine = (vectors[name] * vectors["fp32"]).sum(dim=1)
            print(
                f"| {name} | {statistics.median(seconds[name]):.2f} | {speedup(seconds['fp32'], seconds[name])} "
                f"| {float(cosine.mean()):.5f} / {float(cosine.min()):.5f} | {warm[name]:.1f} |"
            )
    print(f"\nload after: {machine_load()}")


if __name__ == "__main__":
    main()
