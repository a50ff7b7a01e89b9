"""MiniLM through ONNX Runtime: the exported graph (`onnx_export`) and the model's own tokenizer.json.

Its input comes in model batches sorted by word pieces (`word_pieces`), as every MiniLM backend's does, and
the vectors are put back in the callers' order.

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

from unichunk.sinks.vectors.onnx_export import OUTPUT_NAME, SUM_NAME
from unichunk.sinks.vectors.word_pieces import model_batches

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
        out = np.empty((len(texts), 384), dtype=np.float32)
        for picked, feed in model_batches(texts, batch_size):
            (vectors,) = session.run([SUM_NAME if sums else OUTPUT_NAME], feed)
            out[picked] = vectors
        return out
