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
from chunking.packing import _token_byte_lengths
from chunking.tokenizer import token_array

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
    return token_array(segment, encoding_name)


def count_tokens(text: str, encoding_name: str = "cl100k_base") -> int:
    """Token count of `text` (as `encode_ordinary`), in segments so a huge text needs little memory."""
    bounds = segment_bounds(text, encoding_name=encoding_name)
    return sum(len(_segment_tokens(text[s:e], encoding_name)) for s, e in bounds)


def should_chunk(text: str, strategy: ChunkStrategy | None = None) -> tuple[bool, int]:
    """(needs splitting, token count): a text of at most `single_piece_max` tokens stays one chunk."""
    strategy = strategy or ChunkStrategy()
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


def _chars_at(raw: bytes, byte_offsets: list[int]) -> list[int]:
    """Character offsets of sorted UTF-8 byte offsets into `raw`, each floored to its character's start.

    Decodes only between consecutive offsets: a document needs a handful of window bounds, and mapping
    every byte (as `bytes_to_char_offsets` does for dense offsets) cost more than that on short texts.
    """
    chars: list[int] = []
    previous_byte = previous_char = 0
    for offset in byte_offsets:
        while offset < len(raw) and raw[offset] & 0xC0 == 0x80:  # inside a character: back to its start
            offset -= 1
        previous_char += len(raw[previous_byte:offset].decode("utf-8", "surrogatepass"))
        previous_byte = offset
        chars.append(previous_char)
    return chars


def _window_token_offsets(
    text: str, encoding_name: str, size: int, stride: int, segment_chars: int, workers: int, whole_max: int
) -> tuple[dict[int, int], int]:
    """Character offset of every token index where a window starts or ends, and the total token count.

    A text tokenized in one segment to at most `whole_max` tokens stays whole, so its count is all that is
    needed and no offset is computed (the common case in a corpus of small documents).
    """
    offsets: dict[int, int] = {}
    base_token = 0
    byte_lengths = _token_byte_lengths(encoding_name)
    for seg_start, seg_end, tokens in _tokenized_segments(text, encoding_name, segment_chars, workers):
        n = len(tokens)
        if seg_end == len(text) and base_token == 0 and n <= whole_max:
            return offsets, n
        wanted = _window_bounds(base_token, base_token + n, size, stride)
        if wanted:
            byte_starts = np.zeros(n + 1, dtype=np.int64)  # byte offset of token k = bytes of tokens [0, k)
            np.cumsum(byte_lengths[tokens], out=byte_starts[1:])
            selected = byte_starts[np.array(wanted, dtype=np.int64) - base_token].tolist()
            segment = text[seg_start:seg_end] if seg_end - seg_start < len(text) else text
            if not segment.isascii():
                selected = _chars_at(segment.encode("utf-8", "surrogatepass"), selected)
            for index, char in zip(wanted, selected, strict=True):
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
