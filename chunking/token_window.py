"""token_window: fixed windows of N tokens advancing by N - overlap, cut at exact character offsets.

The text is tokenized once. Very long texts are tokenized in segments cut where cl100k's pre-tokenizer
splits anyway, so the token arrays stay small (bounded memory) and the concatenated segment tokens equal
the whole-text tokens. Of each segment we keep only the character offsets of the tokens where a window
starts or ends, so memory does not grow with the token count. Segments are tokenized by a small thread
pool (tiktoken releases the GIL), with a bounded number in flight.

The cut rules are proven for cl100k_base (the default). Other encodings have other pre-tokenizer rules
(o200k joins "\n/"), so their texts are tokenized whole: correct, just not memory-bounded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from unichunk.chunking.base import BaseChunker, Span
from unichunk.chunking.config import ChunkStrategy, default_strategy
from unichunk.chunking.models import Document
from unichunk.chunking.pieces import DEFAULT_SEGMENT_CHARS, char_offsets, segment_bounds, token_table
from unichunk.chunking.tokenizer import token_array

DEFAULT_WORKERS = 2  # tokenizing threads for long texts (tiktoken releases the GIL)


def _segment_tokens(segment: str, encoding_name: str) -> np.ndarray:
    return token_array(segment, encoding_name)


def count_tokens(text: str, encoding_name: str = "cl100k_base") -> int:
    """Token count of `text` (as `encode_ordinary`), in segments so a huge text needs little memory."""
    bounds = segment_bounds(text, encoding_name=encoding_name)
    return sum(len(_segment_tokens(text[s:e], encoding_name)) for s, e in bounds)


def should_chunk(text: str, strategy: ChunkStrategy | None = None) -> tuple[bool, int]:
    """(needs splitting, token count): a text of at most `single_piece_max` tokens stays one chunk."""
    strategy = strategy or default_strategy()
    tokens = count_tokens(text, strategy.tokenizer)
    return tokens > strategy.single_piece_max, tokens


def _tokenized_segments(
    text: str, encoding_name: str, segment_chars: int, workers: int
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(segment start, end, tokens of the segment) in order; tokenized by `workers` threads.

    tiktoken releases the GIL while encoding, so a second thread tokenizes the next segment meanwhile.
    At most 2 x workers segments are in flight, keeping memory bounded on huge texts.
    """
    bounds = segment_bounds(text, segment_chars, encoding_name)
    if len(bounds) == 1:
        yield 0, len(text), _segment_tokens(text, encoding_name)
        return
    if workers <= 1 or len(bounds) <= 2 * workers:  # a short text: thread hand-offs cost more than they save
        for start, end in bounds:
            yield start, end, _segment_tokens(text[start:end], encoding_name)
        return
    pending: deque[tuple[int, int, Future[np.ndarray]]] = deque()
    for start, end in bounds:
        pending.append((start, end, _pool(workers).submit(_segment_tokens, text[start:end], encoding_name)))
        if len(pending) >= 2 * workers:
            first, last, future = pending.popleft()
            yield first, last, future.result()
    while pending:
        first, last, future = pending.popleft()
        yield first, last, future.result()


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="unichunk-tokenize")
    return _POOLS[workers]


def _window_bounds(first: int, stop: int, size: int, stride: int) -> list[int]:
    """Sorted token indices in [first, stop) where a window starts (k*stride) or ends (k*stride + size)."""
    starts = range(-(-first // stride) * stride, stop, stride)
    ends = range(max(size, first + ((size - first) % stride)), stop, stride)
    return sorted({*starts, *ends})


def _window_token_offsets(
    text: str, encoding_name: str, size: int, stride: int, segment_chars: int, workers: int, whole_max: int
) -> tuple[dict[int, int], int]:
    """Character offset of every token index where a window starts or ends, and the total token count.

    A text tokenized in one segment to at most `whole_max` tokens stays whole, so its count is all that is
    needed and no offset is computed (the common case in a corpus of small documents).
    """
    offsets: dict[int, int] = {}
    base_token = 0
    table = token_table(encoding_name)
    for seg_start, seg_end, tokens in _tokenized_segments(text, encoding_name, segment_chars, workers):
        n = len(tokens)
        if seg_end == len(text) and base_token == 0 and n <= whole_max:
            return offsets, n
        wanted = _window_bounds(base_token, base_token + n, size, stride)
        if wanted:
            starts = char_offsets(tokens, table, at=np.array(wanted, dtype=np.int64) - base_token)
            for index, char in zip(wanted, starts.tolist(), strict=True):
                offsets[index] = seg_start + char
        base_token += n
    return offsets, base_token


class TokenWindowChunker(BaseChunker):
    """Whole document up to `single_piece_max` tokens; else windows [0, 900), [800, 1700), ... of tokens.

    A window whose tokens all lie in the previous window's overlap is not emitted, so the text never ends
    with a tiny tail-only copy. `token_count` of a window is its number of document tokens (the text is
    tokenized once, not per chunk).
    """

    name = "token_window"

    def __init__(
        self,
        strategy: ChunkStrategy | None = None,
        segment_chars: int = DEFAULT_SEGMENT_CHARS,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        super().__init__(strategy)
        self.segment_chars = segment_chars
        self.workers = workers

    def spans(self, text: str, document: Document) -> list[Span]:
        size, overlap = self.strategy.sizes_for(self.name)
        stride = size - overlap
        offsets, total = _window_token_offsets(
            text,
            self.strategy.tokenizer,
            size,
            stride,
            self.segment_chars,
            self.workers,
            self.strategy.single_piece_max,
        )
        if total <= self.strategy.single_piece_max:
            return [Span(0, len(text), token_count=total, metadata={"whole_document": True})]
        spans = []
        first = 0
        while first == 0 or first + overlap < total:
            last = min(first + size, total)
            end_char = len(text) if last == total else offsets[last]
            spans.append(Span(offsets[first], end_char, token_count=last - first))
            first += stride
        return spans
