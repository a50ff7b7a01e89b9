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

import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from chunking.base import BaseChunker, Span
from chunking.config import ChunkStrategy
from chunking.models import Document
from chunking.packing import _token_byte_lengths, bytes_to_char_offsets
from chunking.tokenizer import get_encoding

# Positions where cl100k's pre-tokenizer always starts a new piece, so encoding the text in segments cut
# there gives exactly the tokens of the whole text (tests/chunking/test_chunking_token_window.py checks it):
# right after a newline followed by a non-space (no piece pattern continues past "\n" into a non-space),
# and, as a fallback for texts without such newlines, before a space that follows a non-space and precedes
# an ASCII letter (the space becomes the prefix of the next letter run).
_NEWLINE_CUT = re.compile(r"\n(?=\S)")
_SPACE_CUT = re.compile(r"(?<=\S) (?=[A-Za-z])")

DEFAULT_SEGMENT_CHARS = 1 << 17
DEFAULT_WORKERS = 2  # tokenizing threads for long texts (tiktoken releases the GIL)


SEGMENTABLE_ENCODINGS = frozenset({"cl100k_base"})


def segment_bounds(
    text: str, segment_chars: int = DEFAULT_SEGMENT_CHARS, encoding_name: str = "cl100k_base"
) -> list[tuple[int, int]]:
    """Split `text` into consecutive segments of about `segment_chars` at pre-tokenizer piece boundaries.

    A text without any safe cut point (one long run without spaces or newlines), or for an encoding
    whose cut rules are not verified, stays one segment.
    """
    if encoding_name not in SEGMENTABLE_ENCODINGS:
        return [(0, len(text))] if text else []
    bounds: list[tuple[int, int]] = []
    start, n = 0, len(text)
    while start < n:
        target = start + segment_chars
        if target >= n:
            bounds.append((start, n))
            break
        cut = _find_cut(text, target, min(n, target + segment_chars)) or _find_cut(text, target, n) or n
        bounds.append((start, cut))
        start = cut
    return bounds


def _find_cut(text: str, begin: int, end: int) -> int | None:
    match = _NEWLINE_CUT.search(text, begin, end)
    if match:
        return match.end()
    match = _SPACE_CUT.search(text, begin, end)
    return match.start() if match else None


def _segment_tokens(segment: str, encoding_name: str) -> np.ndarray:
    return get_encoding(encoding_name).encode_to_numpy(segment, disallowed_special=())


def count_tokens(text: str, encoding_name: str = "cl100k_base") -> int:
    """Token count of `text` (as `encode_ordinary`), in segments so a huge text needs little memory."""
    bounds = segment_bounds(text, encoding_name=encoding_name)
    return sum(len(_segment_tokens(text[s:e], encoding_name)) for s, e in bounds)


def should_chunk(text: str, strategy: ChunkStrategy | None = None) -> tuple[bool, int]:
    """(needs splitting, token count): a text of at most `single_piece_max` tokens stays one chunk."""
    strategy = strategy or ChunkStrategy()
    tokens = count_tokens(text, strategy.tokenizer)
    return tokens > strategy.single_piece_max, tokens


def _byte_starts(segment: str, encoding_name: str) -> tuple[np.ndarray, bytes | None]:
    """UTF-8 byte offset of every token start of `segment`, then its byte length (n_tokens + 1 values),
    and the segment's UTF-8 bytes when it is not ASCII (needed to map byte offsets to characters)."""
    tokens = _segment_tokens(segment, encoding_name)
    byte_starts = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(_token_byte_lengths(encoding_name)[tokens], out=byte_starts[1:])
    return byte_starts, None if segment.isascii() else segment.encode("utf-8", "surrogatepass")


def _tokenized_segments(
    text: str, encoding_name: str, segment_chars: int, workers: int
) -> Iterator[tuple[int, tuple[np.ndarray, bytes | None]]]:
    """(segment start, `_byte_starts` of the segment) in order; tokenized by `workers` threads.

    tiktoken releases the GIL while encoding, so a second thread tokenizes the next segment meanwhile.
    At most 2 x workers segments are in flight, keeping memory bounded on huge texts.
    """
    bounds = segment_bounds(text, segment_chars, encoding_name)
    if workers <= 1 or len(bounds) <= 2 * workers:  # a short text: thread hand-offs cost more than they save
        for start, end in bounds:
            yield start, _byte_starts(text[start:end], encoding_name)
        return
    pending: deque[tuple[int, Future[tuple[np.ndarray, bytes | None]]]] = deque()
    for start, end in bounds:
        pending.append((start, _pool(workers).submit(_byte_starts, text[start:end], encoding_name)))
        if len(pending) >= 2 * workers:
            first, future = pending.popleft()
            yield first, future.result()
    while pending:
        first, future = pending.popleft()
        yield first, future.result()


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="unichunk-tokenize")
    return _POOLS[workers]


def _window_token_offsets(
    text: str, encoding_name: str, size: int, stride: int, segment_chars: int, workers: int
) -> tuple[dict[int, int], int]:
    """Character offset of every token index where a window starts or ends, and the total token count."""
    offsets: dict[int, int] = {}
    base_token = 0
    for seg_start, (byte_starts, raw) in _tokenized_segments(text, encoding_name, segment_chars, workers):
        n = len(byte_starts) - 1
        # global token indices in this segment that start a window (k*stride) or end one (k*stride+size)
        first = -(-base_token // stride) * stride
        starts = np.arange(first, base_token + n, stride, dtype=np.int64)
        end_first = max(size, base_token + ((size - base_token) % stride))
        ends = np.arange(end_first, base_token + n, stride, dtype=np.int64)
        wanted = np.unique(np.concatenate([starts, ends])) - base_token
        if len(wanted):
            selected = byte_starts[wanted]
            if raw is not None:
                selected = bytes_to_char_offsets(raw, selected)
            for index, char in zip(wanted.tolist(), selected.tolist(), strict=True):
                offsets[base_token + index] = seg_start + char
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
            text, self.strategy.tokenizer, size, stride, self.segment_chars, self.workers
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
