"""Which device the models (MiniLM, spaCy) run on: `UNICHUNK_DEVICE` = auto (a CUDA GPU when one is usable), cpu or cuda.

`auto` looks without cost first: a torch wheel built for CPU only (its version ends in `+cpu`) has no CUDA,
so torch is not imported just to learn that; otherwise torch answers (`torch.cuda.is_available()`), or
ONNX Runtime's providers where torch is missing. `cuda` asked for on a machine without it is an error with
the reason, not a silent CPU run.
"""

from __future__ import annotations

import importlib.util
import logging
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

from unichunk.chunking.errors import UnichunkError

logger = logging.getLogger(__name__)

Device = Literal["cpu", "cuda"]


class DeviceError(UnichunkError):
    """`UNICHUNK_DEVICE=cuda` where no CUDA device is usable; the message says what was found."""


DeviceSetting = Literal["auto", "cpu", "cuda"]


def torch_cuda_available() -> bool:
    """Whether torch sees a CUDA device (False, without importing torch, for a CPU-only wheel)."""
    try:
        if version("torch").endswith("+cpu"):
            return False
    except PackageNotFoundError:
        return False
    import torch

    return bool(torch.cuda.is_available())


def onnx_cuda_available() -> bool:
    """Whether the installed ONNX Runtime has the CUDA execution provider (onnxruntime-gpu)."""
    if importlib.util.find_spec("onnxruntime") is None:
        return False
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


@cache
def resolve_device(setting: DeviceSetting = "auto") -> Device:
    """`cpu` or `cuda` for the setting (once per process and setting: the answer does not change)."""
    if setting == "cpu":
        return "cpu"
    found = torch_cuda_available() or onnx_cuda_available()
    if setting == "cuda" and not found:
        raise DeviceError(
            "UNICHUNK_DEVICE=cuda, but neither torch nor onnxruntime sees a CUDA device "
            f"(torch {_installed('torch')}, onnxruntime {_installed('onnxruntime')}): install CUDA builds "
            "or set UNICHUNK_DEVICE=auto"
        )
    chosen: Device = "cuda" if found else "cpu"
    logger.info("models run on %s (UNICHUNK_DEVICE=%s)", chosen, setting)
    return chosen


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (`/proc/cpuinfo`: `flags` on x86, `Features` on Arm);
    empty elsewhere, where nothing below relies on them."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cuda_possible() -> bool:
    """False where no CUDA device can be present, known without importing anything: Linux without the
    NVIDIA driver (`/proc/driver/nvidia`, `/dev/nvidia0`). True elsewhere (then only torch can tell): so
    deciding a run's embedder, which every run's fingerprint does, costs no torch import on a machine
    without a GPU, whichever torch wheel it has."""
    if not Path("/proc/cpuinfo").exists():  # not Linux: no cheap answer
        return True
    return Path("/proc/driver/nvidia").exists() or Path("/dev/nvidia0").exists()


def cpu_has_bf16() -> bool:
    """Whether the CPU computes in bfloat16 natively (AVX-512 BF16, AMX, or Arm's BF16): where it does not,
    torch emulates bfloat16 and it is slower than fp32."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def _installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"
