"""int8 MiniLM on a CPU without bfloat16 (AVX2): how near 2x torch fp32, and what loses the accuracy.

    python -m benchmarks.embedder_int8 [--rounds 3] [--alphas 0.5,0.65,0.8] [--blocks 32,128]

On a CPU with bf16 instructions `auto` reaches 2x with compiled bfloat16 (`benchmarks.default_embedder`);
without them it runs torch fp32, and int8 (`onnx-int8`: ONNX Runtime's dynamic quantisation, per-channel
weights, linear layers only) is the one faster form, short of 2x and of the retrieval bar. This measures
two ways to bring int8 closer to fp32:

- accuracy, simulated in torch (every linear layer quantised and dequantised on the same texts):
  activations with one scale per tensor, as ONNX Runtime's dynamic kernels quantise them, against one
  scale per token (a row of the activation matrix), which ONNX Runtime's CPU kernels do not offer;
- speed and accuracy in ONNX Runtime of SmoothQuant (Xiao et al., 2023): each linear layer's input divided
  per channel by s = max|x|^a / max|w|^(1-a) and its weights multiplied by s, so BERT's few outlier
  channels stop setting the whole tensor's scale. BERT's residual stream is the LayerNorm's output, so the
  division cannot be folded into the LayerNorm: it is one Mul before each layer (Q, K and V share one).
  `max|x|` is calibrated on this repository's own docs/*.md (64 pieces of 900 characters), not on the
  eval data the vectors are then compared on;
- speed and accuracy of ONNX Runtime's one CPU kernel that scales activations finer than per tensor:
  `MatMulNBits` with 8-bit weights and `accuracy_level` 4, which quantises its input to int8 per block of
  `--blocks` values along each row (so per token, and finer) and multiplies in int8; built from the fused
  fp32 file by `onnxruntime.quantization.matmul_nbits_quantizer` (it needs `onnx_ir`, in the bench extra).

Texts: the segments `auto` embeds for the eval corpora (as `benchmarks.embedder_bf16`). The baseline is
the shipped torch fp32 backend (`MiniLMEmbedder(backend="torch").embed_sums`); in the same round, the
shipped `onnx-int8` and one smoothed int8 file per alpha, through the same ONNX runner and batching. A
ratio is torch's seconds over the variant's in one round (median, rounds in brackets); cosine: each
text's normalised sum against torch's (mean / min).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import torch
from transformers import AutoModel

from benchmarks.embedder_bf16 import batches, pipeline_texts, summed
from benchmarks.embedder_speed import machine_load
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.minilm import MiniLMEmbedder, load_minilm
from unichunk.sinks.vectors.minilm_onnx import OnnxRunner
from unichunk.sinks.vectors.onnx_export import (
    VARIANTS,
    ensure_model,
    export_fp32,
    optimize_and_quantize,
    weights_path,
)

REPO = Path(__file__).resolve().parents[1]
BATCH = 8  # the shipped model batch


def calibration_texts() -> list[str]:
    """This repository's docs, cut into 64 pieces of 900 characters: text of the kind users index, and
    none of the eval data."""
    docs = " ".join(page.read_text(encoding="utf-8") for page in sorted((REPO / "docs").glob("*.md")))
    return [docs[i : i + 900] for i in range(0, len(docs), 900)][:64]


def input_maxima(model: torch.nn.Module, prepared: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Each linear layer's largest |input| per channel over `prepared`."""
    maxima: dict[str, torch.Tensor] = {}

    def hook(name: str) -> Callable[..., None]:
        def record(_: torch.nn.Module, inputs: tuple[torch.Tensor, ...], __: torch.Tensor) -> None:
            seen = inputs[0].reshape(-1, inputs[0].shape[-1]).abs().amax(dim=0)
            maxima[name] = torch.maximum(maxima[name], seen) if name in maxima else seen

        return record

    handles = [
        m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    ]
    with torch.inference_mode():
        for features in prepared:
            model(**features)
    for handle in handles:
        handle.remove()
    return maxima


def sharing_groups(model: torch.nn.Module) -> list[list[str]]:
    """The linear layers by the input they read: query, key and value together, every other one alone."""
    groups: dict[str, list[str]] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            key = name.rsplit(".", 1)[0] if name.endswith(("query", "key", "value")) else name
            groups.setdefault(key, []).append(name)
    return list(groups.values())


class Smoothed(torch.nn.Module):
    """A linear layer whose input is divided per channel by `scale` and whose weights carry it instead."""

    def __init__(self, linear: torch.nn.Linear, scale: torch.Tensor) -> None:
        super().__init__()
        linear.weight.data *= scale
        self.linear = linear
        self.register_buffer("inverse", 1 / scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inverse)


def smooth(model: torch.nn.Module, maxima: dict[str, torch.Tensor], alpha: float) -> torch.nn.Module:
    """`model` with every linear layer `Smoothed` (one scale per group reading one input), in place."""
    modules = dict(model.named_modules())
    for names in sharing_groups(model):
        weights = torch.stack([modules[n].weight.detach().abs().amax(dim=0) for n in names]).amax(dim=0)
        scale = maxima[names[0]].clamp(min=1e-5) ** alpha / weights.clamp(min=1e-5) ** (1 - alpha)
        for name in names:
            parent, attribute = name.rsplit(".", 1)
            setattr(modules[parent], attribute, Smoothed(modules[name], scale))
    return model


def fake_int8(x: torch.Tensor, per_token: bool) -> torch.Tensor:
    """`x` quantised to uint8 with a zero point (as ONNX Runtime's DynamicQuantizeLinear) and back."""
    low = (x.amin(dim=-1, keepdim=True) if per_token else x.min()).clamp(max=0)
    high = (x.amax(dim=-1, keepdim=True) if per_token else x.max()).clamp(min=0)
    scale = (high - low).clamp(min=1e-8) / 255
    zero = torch.round(-low / scale)
    return (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale


def fake_quantised(model: torch.nn.Module, per_token: bool) -> torch.nn.Module:
    """Every linear layer with int8 per-channel weights and int8 activations, simulated in float."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            weight = module.weight.detach()
            step = weight.abs().amax(dim=1, keepdim=True) / 127
            quantised = torch.round(weight / step).clamp(-127, 127) * step

            def forward(
                x: torch.Tensor, w: torch.Tensor = quantised, b: torch.Tensor | None = module.bias
            ) -> torch.Tensor:
                return torch.nn.functional.linear(fake_int8(x, per_token), w, b)

            module.forward = forward  # type: ignore[method-assign]
    return model


def simulated_cosines(bert: torch.nn.Module, texts: list[str]) -> dict[str, np.ndarray]:
    """Cosine to fp32 of int8 activations scaled per tensor and per token, simulated in torch."""
    tokenizer = load_minilm("cpu").tokenizer
    prepared = batches(tokenizer, texts, BATCH)

    def vectors(model: torch.nn.Module) -> torch.Tensor:
        return summed(lambda f: model(**f).last_hidden_state, prepared)

    reference = vectors(bert)
    return {
        f"simulated: activations per {kind}": (
            vectors(fake_quantised(copy.deepcopy(bert), kind == "token")) * reference
        )
        .sum(dim=1)
        .numpy()
        for kind in ("tensor", "token")
    }


def smoothed_file(bert: torch.nn.Module, alpha: float, maxima: dict[str, torch.Tensor], work: Path) -> Path:
    """MiniLM smoothed with `alpha`, exported and quantised as the shipped `onnx-int8` is."""
    folder = work / f"alpha-{alpha}"
    folder.mkdir()
    export_fp32(folder / "plain.onnx", smooth(copy.deepcopy(bert), maxima, alpha))
    return optimize_and_quantize(folder / "plain.onnx", folder, VARIANTS["int8-perchannel"])


def block_int8_file(block: int, work: Path) -> Path:
    """The fused fp32 file with every weight MatMul as `MatMulNBits`: 8-bit symmetric weights in blocks of
    `block`, activations quantised to int8 per block of a row at run time (`accuracy_level` 4)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    cache = SinkSettings().model_cache_dir.expanduser()  # where the shipped ONNX files are cached
    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=True, accuracy_level=4, bits=8)
    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(ensure_model(cache, VARIANTS["fp32"]))), algo_config=config
    )
    quantizer.process()
    target = work / f"block-int8-{block}.onnx"
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
    return target


def _normalised(rows: list[list[float]] | np.ndarray) -> np.ndarray:
    array = np.asarray(rows, dtype=np.float32)
    return array / np.linalg.norm(array, axis=1, keepdims=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--alphas", default="0.5,0.65,0.8", help="SmoothQuant's migration strengths")
    parser.add_argument("--blocks", default="32,128", help="MatMulNBits block sizes ('' for none)")
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    texts = pipeline_texts()["segments"]
    bert = AutoModel.from_pretrained(str(weights_path().parent), local_files_only=True).eval()
    print(f"load before: {machine_load()}", file=sys.stderr)
    cosines = simulated_cosines(bert, texts)
    maxima = input_maxima(bert, batches(load_minilm("cpu").tokenizer, calibration_texts(), BATCH))
    runs: dict[str, Callable[[], np.ndarray]] = {}
    baseline = MiniLMEmbedder(backend="torch")
    runs["torch fp32 (baseline)"] = lambda: _normalised(baseline.embed_sums(texts))
    shipped = MiniLMEmbedder(backend="onnx-int8")
    runs["onnx-int8 (per-channel, shipped option)"] = lambda: _normalised(shipped.embed_sums(texts))
    with tempfile.TemporaryDirectory(prefix="bench_int8_") as work:
        for alpha in (float(a) for a in args.alphas.split(",")):
            started = time.perf_counter()
            runner = OnnxRunner(onnxruntime, smoothed_file(bert, alpha, maxima, Path(work)))
            print(f"smoothed a={alpha}: built in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            runs[f"onnx-int8 smoothed, a={alpha}"] = lambda r=runner: _normalised(
                r.encode(texts, BATCH, sums=True)
            )
        for block in (int(b) for b in args.blocks.split(",") if b):
            runner = OnnxRunner(onnxruntime, block_int8_file(block, Path(work)))
            runs[f"int8 MatMulNBits, blocks of {block}"] = lambda r=runner: _normalised(
                r.encode(texts, BATCH, sums=True)
            )
        for run in runs.values():  # warm: sessions built, the export cached
            run()
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        vectors: dict[str, np.ndarray] = {}
        for number in range(args.rounds):
            for name, run in runs.items():
                started = time.perf_counter()
                vectors[name] = run()
                seconds[name].append(time.perf_counter() - started)
            print(f"round {number + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items()),
                  file=sys.stderr, flush=True)  # fmt: skip
    reference = vectors["torch fp32 (baseline)"]
    print(f"\n{len(texts)} segments, model batches of {BATCH}, {args.rounds} rounds\n")
    print("| variant | seconds (median) | x torch fp32 (rounds) | cosine to fp32, mean / min |")
    print("|---|---:|---|---|")
    for name, spent in seconds.items():
        ratios = [a / b for a, b in zip(seconds["torch fp32 (baseline)"], spent, strict=True)]
        cosine = (vectors[name] * reference).sum(axis=1)
        print(f"| {name} | {statistics.median(spent):.2f} | **{statistics.median(ratios):.2f}** "
              f"({', '.join(f'{r:.2f}' for r in ratios)}) | {cosine.mean():.5f} / {cosine.min():.5f} |")  # fmt: skip
    for name, cosine in cosines.items():
        print(f"| {name} | | | {cosine.mean():.5f} / {cosine.min():.5f} |")
    print(f"\nload after: {machine_load()}")


if __name__ == "__main__":
    main()
