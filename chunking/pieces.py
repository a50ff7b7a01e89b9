"""Where cl100k's pre-tokenizer always starts a piece, and token offsets in bytes and characters.

tiktoken splits a text into pieces with a regular expression, then encodes each piece on its own, so a
position where every text starts a new piece is a *safe cut*: the tokens of the text are the tokens of
the part before it followed by the tokens of the part after it. `token_window` tokenizes long texts in
segments cut there (bounded memory), and `span_counts` counts any span of a text from one tokenization
of the whole text. Token offsets come from the byte lengths of token IDs, never from decoding slices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from unichunk.chunking.tokenizer import get_encoding, token_array

# Positions where cl100k's pre-tokenizer always starts a new piece, so encoding the text in segments cut
# there gives exactly the tokens of the whole text (tests/chunking/test_chunking_token_window.py checks it):
# right after a newline followed by a non-space (no piece pattern continues past "\n" into a non-space),
# and, as a fallback for texts without such newlines, before a space that follows a non-space and precedes
# an ASCII letter (the space becomes the prefix of the next letter run).
_NEWLINE_CUT = re.compile(r"\n(?=\S)")
_SPACE_CUT = re.compile(r"(?<=\S) (?=[A-Za-z])")

DEFAULT_SEGMENT_CHARS = 1 << 17


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


# Bits of `TokenTable.bits`, per token ID.
_INSIDE = 1  # its first byte is a UTF-8 continuation byte: the token starts inside a character
_SPACE_LETTER = 2  # it starts with a space followed by an ASCII letter
_PRINTABLE_FIRST = 4  # its first byte is printable ASCII other than the space
_PRINTABLE_LAST = 8  # its last byte is printable ASCII other than the space
_NEWLINE_LAST = 16  # its last byte is "\n"


@dataclass(frozen=True, slots=True)
class TokenTable:
    """What offsets and safe cuts are computed from, per token ID of one encoding (built once).

    Character offsets come from counting, per token, the bytes that start a character (every byte but
    UTF-8 continuation bytes): no text is re-encoded or decoded to map tokens to characters.
    """

    char_starts: np.ndarray  # int64: characters that start within the token
    bits: np.ndarray  # uint8: the flags above


_TABLES: dict[str, TokenTable] = {}


def token_table(encoding_name: str) -> TokenTable:
    """The `TokenTable` of the named encoding (a token ID the encoding lacks has no characters)."""
    table = _TABLES.get(encoding_name)
    if table is None:
        encoding = get_encoding(encoding_name)
        char_starts = np.zeros(encoding.n_vocab, dtype=np.int64)
        bits = np.zeros(encoding.n_vocab, dtype=np.uint8)
        for token_id in range(encoding.n_vocab):
            try:
                data = encoding.decode_single_token_bytes(token_id)
            except KeyError:
                continue
            char_starts[token_id] = sum(1 for byte in data if byte & 0xC0 != 0x80)
            bits[token_id] = (
                (_INSIDE if data[0] & 0xC0 == 0x80 else 0)
                | (_SPACE_LETTER if data[:1] == b" " and data[1:2].isalpha() else 0)
                | (_PRINTABLE_FIRST if 0x21 <= data[0] <= 0x7E else 0)
                | (_PRINTABLE_LAST if 0x21 <= data[-1] <= 0x7E else 0)
                | (_NEWLINE_LAST if data[-1] == 0x0A else 0)
            )
        table = _TABLES[encoding_name] = TokenTable(char_starts, bits)
    return table


def char_offsets(tokens: np.ndarray, table: TokenTable, at: np.ndarray | None = None) -> np.ndarray:
    """Character offset where each of `tokens` starts, then the characters of all of them (n + 1 values);
    with `at`, only those of the token indices in `at` (0..n).

    A token that starts inside a multi-byte character (BPE may split one) is mapped to the start of that
    character, so a cut at any returned offset is a valid `str` slice. (`take`, not fancy indexing: numpy
    converts uint32 token IDs for indexing at several times the cost of the lookup.)
    """
    started = np.add.accumulate(table.char_starts.take(tokens))  # characters started up to token k
    if at is not None and len(tokens) == 0:
        return np.zeros(len(at), dtype=np.int64)
    if at is None:
        offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
        offsets[1:] = started
        offsets[:-1] -= table.bits.take(tokens) & _INSIDE  # inside a character: back to its start
        return offsets
    offsets = np.where(at > 0, started.take(np.maximum(at - 1, 0), mode="clip"), 0)
    inner = at < len(tokens)
    offsets[inner] -= table.bits.take(tokens.take(at[inner])) & _INSIDE
    return offsets


def safe_cut_tokens(tokens: np.ndarray, table: TokenTable) -> np.ndarray:
    """Indices k (from 1) of the tokens that start at a safe cut, ascending.

    The rules of `_NEWLINE_CUT` and `_SPACE_CUT` checked on ASCII bytes only (a newline, then a printable
    ASCII character; or a printable ASCII character, then a space and an ASCII letter, the space and letter
    in one token), so they find a subset of the positions those patterns find. An ASCII byte is always a
    whole character in UTF-8, so the rules read the same on bytes as on characters.
    """
    bits = table.bits.take(tokens)
    before, at = bits[:-1], bits[1:]
    space = (at & _SPACE_LETTER).astype(bool) & (before & _PRINTABLE_LAST).astype(bool)
    newline = (before & _NEWLINE_LAST).astype(bool) & (at & _PRINTABLE_FIRST).astype(bool)
    return np.flatnonzero(space | newline) + 1


def token_starts(text: str, encoding_name: str = "cl100k_base") -> np.ndarray:
    """Character offset where each token of `text` starts, then `len(text)`: n_tokens + 1 sorted values."""
    return char_offsets(token_array(text, encoding_name), token_table(encoding_name))
