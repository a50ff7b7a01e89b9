"""token_window: whole-document threshold, window layout and overlap, multi-byte cuts, segmentation."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unichunk.chunking import should_chunk as reexported_should_chunk
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.packing import token_starts
from unichunk.chunking.token_window import TokenWindowChunker, count_tokens, segment_bounds, should_chunk
from unichunk.chunking.tokenizer import get_encoding

ENC = get_encoding("cl100k_base")


def text_of_tokens(n: int) -> str:
    """ASCII prose of exactly n cl100k tokens: "alpha" then n-1 " word"-like tokens (checked with encode)."""
    words = [
        "alpha",
        *(f" {w}" for w in ["river", "stone", "cloud", "table", "green", "night"] * (n // 6 + 1)),
    ]
    text = "".join(words[:n])
    assert len(ENC.encode_ordinary(text)) == n
    return text


def windows(text: str, **settings_: object):
    return TokenWindowChunker(ChunkStrategy(name="token_window", **settings_)).chunk(
        Document(text=text, source_system="t", source_id="x")
    )


@pytest.mark.parametrize(("tokens", "whole"), [(1199, True), (1200, True), (1201, False)])
def test_single_piece_boundary(tokens: int, whole: bool) -> None:
    text = text_of_tokens(tokens)
    chunks = windows(text)
    assert should_chunk(text) == (not whole, tokens)
    if whole:
        assert len(chunks) == 1
        assert chunks[0].is_whole_document and chunks[0].content == text and chunks[0].token_count == tokens
    else:
        # 1201 tokens: [0, 900) and [800, 1201); no whole-document flag
        assert [c.token_count for c in chunks] == [900, 401]
        assert not any(c.is_whole_document for c in chunks)
        assert chunks[-1].end_char == len(text)


def test_windows_start_every_800_tokens_and_overlap_100() -> None:
    text = text_of_tokens(3000)
    starts = token_starts(text)
    chunks = windows(text)
    # windows [0,900) [800,1700) [1600,2500) [2400,3000): the fourth brings 500 new tokens
    assert [(c.start_char, c.end_char) for c in chunks] == [
        (int(starts[a]), int(starts[b])) for a, b in [(0, 900), (800, 1700), (1600, 2500), (2400, 3000)]
    ]
    assert [c.token_count for c in chunks] == [900, 900, 900, 600]
    for previous, following in itertools.pairwise(chunks):
        shared = text[following.start_char : previous.end_char]
        # the overlap is exactly 100 document tokens, and they are the last 100 of chunk N
        assert len(ENC.encode_ordinary(shared)) == 100
        assert ENC.encode_ordinary(previous.content)[-100:] == ENC.encode_ordinary(shared)
        assert ENC.encode_ordinary(following.content)[:100] == ENC.encode_ordinary(shared)


@pytest.mark.parametrize(("tokens", "expected"), [(1700, 2), (1701, 3), (2500, 3), (2501, 4)])
def test_a_window_of_overlap_tokens_only_is_not_emitted(tokens: int, expected: int) -> None:
    chunks = windows(text_of_tokens(tokens))
    assert len(chunks) == expected
    assert chunks[-1].end_char == len(text_of_tokens(tokens))
    assert chunks[-1].token_count > 100  # the last window always brings new tokens


def test_custom_sizes_are_honoured() -> None:
    text = text_of_tokens(1000)
    chunks = windows(text, chunk_size=300, chunk_overlap=50, single_piece_max=200)
    assert [c.token_count for c in chunks] == [300, 300, 300, 250]


def test_multibyte_token_boundaries_are_floored_to_character_starts() -> None:
    # emoji are several tokens each, so window starts fall inside characters
    text = "".join(random.Random(3).choice(["😀", "漢", "é", "a", "👩\u200d👧", " "]) for _ in range(4000))
    chunks = windows(text)
    assert len(chunks) > 2
    tokens = ENC.encode_ordinary(text)
    byte_starts = np.concatenate([[0], np.cumsum([len(ENC.decode_single_token_bytes(t)) for t in tokens])])
    for index, chunk in enumerate(chunks):
        token_byte = byte_starts[800 * index]
        # the chunk starts at the character containing the window's first byte
        assert (
            len(text[: chunk.start_char].encode()) <= token_byte < len(text[: chunk.start_char + 1].encode())
        )
        assert "\ufffd" not in chunk.content
        assert text[chunk.start_char : chunk.end_char] == chunk.content


segment_text = st.lists(
    st.sampled_from(
        [
            "a",
            "Word",
            " ",
            "  ",
            "\n",
            "\r\n",
            "\n\n",
            " \n",
            "\t",
            "'s",
            "1",
            "12345",
            ".",
            "!\n",
            "😀",
            "漢字",
            "e\u0301",
            "\u200b",
            "\u00a0",
            "\x1c",
            "-",
            "'",
            " x",
            "\u3000",
        ]
    ),
    max_size=300,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(segment_text, st.text(max_size=600)))
def test_segmented_encoding_equals_whole_text_encoding(text: str) -> None:
    bounds = segment_bounds(text, segment_chars=4)
    assert [s for s, _ in bounds[1:]] == [e for _, e in bounds[:-1]]
    assert not text or (bounds[0][0] == 0 and bounds[-1][1] == len(text))
    pieces = [t for s, e in bounds for t in ENC.encode_ordinary(text[s:e])]
    assert pieces == ENC.encode_ordinary(text)


def test_segmented_chunking_equals_unsegmented_on_real_text() -> None:
    text = "\n".join(
        f"Line {i}: the {i % 7} quick brown foxes, jumping {i * 3} times. 漢字 😀" for i in range(2000)
    )
    strategy = ChunkStrategy(name="token_window")
    document = Document(text=text)
    small = TokenWindowChunker(strategy, segment_chars=500).chunk(document)  # tokenized by 2 threads
    sequential = TokenWindowChunker(strategy, segment_chars=500, workers=1).chunk(document)
    whole = TokenWindowChunker(strategy, segment_chars=10**9).chunk(document)
    assert len(segment_bounds(text, 500)) > 50
    assert [c.model_dump() for c in small] == [c.model_dump() for c in whole]
    assert [c.model_dump() for c in sequential] == [c.model_dump() for c in whole]
    assert count_tokens(text) == len(ENC.encode_ordinary(text))


def test_five_megabyte_line_without_spaces() -> None:
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789漢字😀é.-_"
    text = "".join(rng.choices(alphabet, k=5_000_000))
    assert len(segment_bounds(text)) == 1  # no safe cut point: tokenized as one segment
    chunks = windows(text)
    starts = token_starts(text)
    total = len(starts) - 1
    assert sum(c.token_count for c in chunks) == total + 100 * (len(chunks) - 1)
    for index, chunk in enumerate(chunks):
        assert chunk.start_char == starts[800 * index]
        last = min(800 * index + 900, total)
        assert chunk.token_count == last - 800 * index
        assert chunk.end_char == (len(text) if last == total else starts[last])
        assert len(chunk.content) == chunk.end_char - chunk.start_char
    assert chunks[-1].end_char == len(text)


def test_should_chunk_is_reexported_and_uses_the_strategy_threshold() -> None:
    text = text_of_tokens(300)
    assert reexported_should_chunk is should_chunk
    assert should_chunk(text) == (False, 300)
    assert should_chunk(text, ChunkStrategy(single_piece_max=299)) == (True, 300)


def test_other_encodings_are_tokenized_whole_and_windowed_exactly() -> None:
    o200k = get_encoding("o200k_base")
    text = "\n".join(f"x.\n/path/{i} and more words here" for i in range(1500))
    assert segment_bounds(text, 100, "o200k_base") == [(0, len(text))]
    strategy = ChunkStrategy(name="token_window", tokenizer="o200k_base")
    chunks = TokenWindowChunker(strategy, segment_chars=100).chunk(Document(text=text))
    total = len(o200k.encode_ordinary(text))
    assert sum(c.token_count for c in chunks) == total + 100 * (len(chunks) - 1)
    assert chunks[0].token_count == 900 and chunks[-1].end_char == len(text)
    assert should_chunk(text, strategy) == (True, total)


def test_lone_surrogates_are_windowed_with_exact_offsets() -> None:
    # a str may hold lone surrogates (UTF-8 cannot); they are read as U+FFFD, one character like them
    text = "".join(f"word{i} \ud800 more text here \udfff\n" for i in range(600))
    chunks = windows(text)
    assert len(chunks) > 2 and chunks[-1].end_char == len(text)
    replaced = text.replace("\ud800", "\ufffd").replace("\udfff", "\ufffd")
    starts = token_starts(replaced)
    total = len(starts) - 1
    assert count_tokens(text) == total
    for index, chunk in enumerate(chunks):
        assert text[chunk.start_char : chunk.end_char] == chunk.content
        assert chunk.start_char == starts[800 * index]
        assert chunk.token_count == min(800 * index + 900, total) - 800 * index
