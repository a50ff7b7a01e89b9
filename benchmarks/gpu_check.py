"""What a GPU machine gives MiniLM and spaCy here: what is found, which device `auto` picks, and timings.

    python -m benchmarks.gpu_check [--texts 512] [--cache-dir DIR]

Self-contained and offline: prints what torch and ONNX Runtime see (`torch.cuda.is_available()`, the
torch build, the execution providers), what `UNICHUNK_DEVICE=auto` resolves to, whether spaCy can use
the GPU (`spacy.prefer_gpu`, which needs cupy), then times the same texts (synthetic sentences of mixed
length, or the eval corpora's chunks where `benchmarks.evaldata` finds them) through every backend that
can run: torch on CPU, ONNX Runtime fp32 and int8 on CPU, and torch / ONNX Runtime on CUDA where found.
Each CUDA figure is printed beside torch-CPU's from the same run, with the cosine of its vectors to
torch-CPU's. A CPU-only torch wheel (version `+cpu`) has no CUDA: the script says so rather than fail.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def texts_for(count: int) -> tuple[list[str], str]:
    """The eval corpora's `auto` chunks if found, else synthetic sentences of mixed length."""
    try:
        from benchmarks.embedder_speed import corpus_texts

        texts = corpus_texts(count)
        if texts:
            return texts, "auto chunks of the eval corpora"
    except (SystemExit, Exception):  # no eval data on this machine: synthetic texts instead
        pass
    words = [
        "ownership",
        "borrowing",
        "lifetimes",
        "traits",
        "generics",
        "closures",
        "iterators",
        "modules",
        "crates",
        "tests",
    ]
    texts = [" ".join(words[(i + j) % len(words)] for j in range(8 + (i * 37) % 180)) for i in range(count)]
    return texts, "synthetic sentences"


def found() -> dict[str, object]:
    out: dict[str, object] = {
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "torch": _version("torch"),
        "onnxruntime": _version("onnxruntime"),
        "onnxruntime-gpu": _version("onnxruntime-gpu"),
        "spacy": _version("spacy"),
        "cupy": "installed" if importlib.util.find_spec("cupy") else "not installed",
    }
    try:
        import torch

        out["torch.cuda.is_available()"] = torch.cuda.is_available()
        out["torch.version.cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            out["cuda device"] = torch.cuda.get_device_name(0)
    except Exception as exc:
        out["torch import"] = f"failed: {exc}"
    try:
        import onnxruntime

        out["onnxruntime providers"] = onnxruntime.get_available_providers()
    except Exception as exc:
        out["onnxruntime import"] = f"failed: {exc}"
    from unichunk.sinks.device import resolve_device

    out["UNICHUNK_DEVICE=auto resolves to"] = resolve_device("auto")
    try:
        import spacy

        out["spacy.prefer_gpu()"] = spacy.prefer_gpu()
    except Exception as exc:
        out["spacy.prefer_gpu()"] = f"failed: {exc}"
    return out


def timed(label: str, make, texts: list[str], rounds: int = 2) -> tuple[float, np.ndarray] | None:
    """Best texts/s of `rounds` after one warm-up call, and the vectors; None where it cannot run."""
    try:
        embedder = make()
        embedder.embed(texts[:8])
        best, vectors = 0.0, None
        for _ in range(rounds):
            started = time.perf_counter()
            vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
            best = max(best, len(texts) / (time.perf_counter() - started))
        print(f"  {label:<28} runs as {embedder.runs:<28} {best:8.1f} texts/s", flush=True)
        return best, vectors
    except Exception as exc:
        print(f"  {label:<28} cannot run: {type(exc).__name__}: {exc}", flush=True)
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64, help="texts per forward pass on CUDA")
    parser.add_argument("--cache-dir", type=Path, default=None, help="ONNX export cache (default: temporary)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    print("== found")
    facts = found()
    for key, value in facts.items():
        print(f"  {key}: {value}")
    if str(facts["torch"]).endswith("+cpu"):
        print("  note: this torch is a CPU-only build: no CUDA figures from torch on this machine")

    from unichunk.sinks.vectors.minilm import MiniLMEmbedder

    texts, what = texts_for(args.texts)
    print(f"\n== MiniLM on {len(texts)} texts ({what}); load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        cache = args.cache_dir or Path(tmp)
        runs = {
            "torch cpu": lambda: MiniLMEmbedder(backend="torch", device="cpu"),
            "onnx fp32 cpu": lambda: MiniLMEmbedder(backend="onnx", device="cpu", cache_dir=cache),
            "onnx int8 cpu": lambda: MiniLMEmbedder(backend="onnx-int8", device="cpu", cache_dir=cache),
            "torch cuda": lambda: MiniLMEmbedder(args.texts, args.batch, backend="torch", device="cuda"),
            "onnx fp32 cuda": lambda: MiniLMEmbedder(
                args.texts, args.batch, backend="onnx", device="cuda", cache_dir=cache
            ),
        }
        results = {label: timed(label, make, texts) for label, make in runs.items()}
    base = results["torch cpu"]
    if base is None:
        return
    print("\n== against torch cpu (same run)")
    for label, result in results.items():
        if result is not None and label != "torch cpu":
            cosine = (result[1] * base[1]).sum(axis=1)
            print(
                f"  {label:<16} x{result[0] / base[0]:6.2f}   cosine mean {cosine.mean():.5f} min {cosine.min():.5f}"
            )


if __name__ == "__main__":
    main()
