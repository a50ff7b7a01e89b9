"""tiktoken, offline, and token counting shared by every token-aware strategy.

tiktoken downloads its BPE files on first use, which fails without internet. `llama-index-core` ships
cl100k_base and o200k_base in its package data; we point `TIKTOKEN_CACHE_DIR` there (unless the user set
it) before the first encoding is loaded. We locate the directory without importing LlamaIndex, so the
chunking library stays light.
"""

from __future__ import annotations

import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import tiktoken

_SURROGATE = re.compile("[\ud800-\udfff]")


def _bundled_cache_dir() -> Path | None:
    spec = importlib.util.find_spec("llama_index")
    for root in spec.submodule_search_locations or [] if spec else []:
        candidate = Path(root) / "core" / "_static" / "tiktoken_cache"
        if candidate.is_dir():
            return candidate
    return None


def ensure_offline_cache() -> None:
    """Set TIKTOKEN_CACHE_DIR to the BPE files LlamaIndex ships, unless the user chose a directory."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    bundled = _bundled_cache_dir()
    if bundled is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)


@lru_cache(maxsize=8)
def get_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """The named tiktoken encoding, loaded once per process."""
    ensure_offline_cache()
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises bare requests/OS errors when the file is missing
        raise RuntimeError(
            f"tiktoken encoding {name!r} is not available offline; set TIKTOKEN_CACHE_DIR to a directory "
            "holding its BPE file (llama-index-core ships cl100k_base and o200k_base)"
        ) from exc


def token_array(text: str, encoding_name: str = "cl100k_base", *, surrogates: bool = True) -> np.ndarray:
    """Tokens of `text` as a numpy array (as `encode_ordinary`: special tokens are text).

    A lone surrogate (a `str` may hold one; UTF-8 cannot) is read as U+FFFD: one character and three
    UTF-8 bytes, like the surrogate under "surrogatepass", so byte and character offsets computed from
    these tokens still line up with the text. (tiktoken's own fallback re-decodes through UTF-16, which
    joins a split surrogate pair into one character and would shift every offset after it.) With
    `surrogates=False` a text holding one raises `UnicodeEncodeError` instead.
    """
    encoding = get_encoding(encoding_name)
    try:
        return encoding.encode_to_numpy(text, disallowed_special=())
    except UnicodeEncodeError:
        if not surrogates:
            raise
        return encoding.encode_to_numpy(_SURROGATE.sub("\ufffd", text), disallowed_special=())


class TokenCounter:
    """Counts tokens the way chunk sizes are measured: `encode_ordinary` (special tokens are text)."""

    def __init__(self, encoding_name: str = "cl100k_base") -> None:
        self.encoding_name = encoding_name
        self.encoding = get_encoding(encoding_name)

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text)) if text else 0

    def count_many(self, texts: list[str]) -> list[int]:
        """Count each text. A plain loop: `encode_ordinary_batch` submits one thread-pool task per text,
        which costs more than encoding a sentence."""
        encode = self.encoding.encode_ordinary
        return [len(encode(t)) if t else 0 for t in texts]
