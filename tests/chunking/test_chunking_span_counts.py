"""Counting spans from one tokenization of the whole text gives exactly what encoding each span gives."""

from __future__ import annotations

import re
from itertools import accumulate, pairwise

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.pieces import char_offsets, safe_cut_tokens, segment_bounds, token_starts, token_table
from unichunk.chunking.sentences import _BOUNDARY, sentence_spans
from unichunk.chunking.span_counts import IndexedCounter, SliceCounter, span_counter
from unichunk.chunking.tokenizer import TokenCounter, get_encoding, token_array

ENC = get_encoding("cl100k_base")
COUNTER = TokenCounter("cl100k_base")

# Pieces that stress cl100k's pre-tokenizer around the cut rules: spaces before letters and digits,
# newlines before printable and non-ASCII characters, contractions, punctuation runs, multi-byte and
# multi-token characters, whitespace runs, CRLF.
PIECES = [
    "word",
    " Word",
    " a",
    "a",
    " ",
    "  ",
    "\n",
    "\r\n",
    "\n\n",
    " \n",
    "\t",
    "'s",
    "'",
    "don't",
    "1",
    "12345",
    " 42",
    ".",
    ". ",
    "!\n",
    "...",
    "(",
    ")",
    "😀",
    "漢字",
    "e\u0301",
    "\u200b",
    "\u00a0",
    "\u3000",
    "é",
    "-",
    "_x",
    "<|endoftext|>",
]

texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=200).map("".join),
    st.text(max_size=400),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=120).map("".join),
)


@st.composite
def text_and_spans(draw: st.DrawFn) -> tuple[str, list[tuple[int, int]]]:
    text = draw(texts)
    position = st.integers(0, len(text))
    pairs = draw(st.lists(st.tuples(position, position), max_size=40))
    return text, [(min(a, b), max(a, b)) for a, b in pairs] + sentence_spans(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=text_and_spans())
def test_indexed_counts_equal_encoding_each_span(case: tuple[str, list[tuple[int, int]]]) -> None:
    text, spans = case
    counter = IndexedCounter(text, COUNTER)
    expected = [len(ENC.encode_ordinary(text[a:b])) for a, b in spans]
    assert counter.count_spans(spans) == expected
    assert [counter.count_span(a, b) for a, b in spans] == expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=text_and_spans())
def test_a_text_indexed_in_many_segments_counts_the_same(case: tuple[str, list[tuple[int, int]]]) -> None:
    text, spans = case  # 16-character segments: segment joins fall inside the spans
    assert IndexedCounter(text, COUNTER, segment_chars=16).count_spans(spans) == [
        len(ENC.encode_ordinary(text[a:b])) for a, b in spans
    ]


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_safe_cuts_split_the_tokens_exactly(text: str) -> None:
    tokens = token_array(text)
    table = token_table("cl100k_base")
    offsets = char_offsets(tokens, table)
    cuts = [0, *offsets[safe_cut_tokens(tokens, table)].tolist(), len(text)]
    pieces = [t for a, b in pairwise(cuts) for t in ENC.encode_ordinary(text[a:b])]
    assert pieces == ENC.encode_ordinary(text)


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_token_starts_are_the_characters_where_each_token_begins(text: str) -> None:
    tokens = ENC.encode_ordinary(text)
    starts = token_starts(text)
    raw = text.encode("utf-8")
    byte_offsets = list(accumulate((len(ENC.decode_single_token_bytes(t)) for t in tokens), initial=0))
    # reference: the characters complete before each token's first byte (a token starting inside a
    # character maps to that character's start: its leading bytes are an incomplete, ignored sequence)
    expected = [len(raw[:b].decode("utf-8", errors="ignore")) for b in byte_offsets]
    assert starts.tolist() == expected and starts[-1] == len(text)
    at = np.arange(len(tokens) + 1)[::3]  # only some offsets, as token_window asks for its window bounds
    assert char_offsets(token_array(text), token_table("cl100k_base"), at=at).tolist() == starts[at].tolist()


def test_a_text_with_a_lone_surrogate_is_counted_by_slices() -> None:
    text = "Some words \ud800 and more words after it. " * 20
    counter = span_counter(text, COUNTER)
    assert isinstance(counter, SliceCounter)
    spans = [(0, len(text)), (5, 40), *sentence_spans(text)]
    assert counter.count_spans(spans) == [COUNTER.count(text[a:b]) for a, b in spans]


def test_other_encodings_are_counted_by_slices() -> None:
    o200k = TokenCounter("o200k_base")
    text = "x.\n/path/1 and more words here\n" * 10
    counter = span_counter(text, o200k)
    assert isinstance(counter, SliceCounter)
    assert counter.count_span(0, len(text)) == o200k.count(text)


def test_real_prose_uses_the_index_and_finds_cuts_at_most_words() -> None:
    text = " ".join(f"Sentence number {i} says something about the river." for i in range(300))
    counter = span_counter(text, COUNTER)
    assert isinstance(counter, IndexedCounter)
    tokens = token_array(text)
    cuts = safe_cut_tokens(tokens, token_table("cl100k_base"))
    assert len(cuts) > 0.6 * len(tokens)
    spans = sentence_spans(text)
    assert counter.count_spans(spans) == [COUNTER.count(text[a:b]) for a, b in spans]
    assert len(segment_bounds(text, 64)) > 1


# The sentence boundary pattern before it was rewritten as one character class plus three cases: the
# rewrite must find the same boundaries.
_THREE_ALTERNATIVES = re.compile(
    r"""(?P<latin>[.!?…]+[\"'”’»)\]]*)(?P<ws>\s+)(?=[^\s])"""
    r"""|(?P<cjk>[。！？]+[」』”’)）]*)(?P<cjkws>\s*)"""
    r"""|(?P<blank>\n[ \t]*\n\s*)"""
)
_SENTENCE_PIECES = [
    "Word",
    "word",
    " ",
    ". ",
    ".",
    "..",
    "! ",
    "?",
    "…",
    '." ',
    ".) ",
    "\n",
    "\n\n",
    " \n \n",
    "\t",
    "。",
    "！",
    "」",
    "e.g. ",
    "Dr. ",
    "A. ",
    "U.S. ",
    "x",
]


def _old_cuts(text: str) -> list[tuple[int, int, int]]:
    """(match start, match end, where the sentence ends) by the three-alternative pattern."""
    cuts = []
    for m in _THREE_ALTERNATIVES.finditer(text):
        cut = m.end("latin") if m["latin"] else m.end("cjk") if m["cjk"] else m.start()
        cuts.append((m.start(), m.end(), cut))
    return cuts


def _new_cuts(text: str) -> list[tuple[int, int, int]]:
    cases = {"ws": "latin", "cjkws": "cjk"}
    return [
        (m.start(), m.end(), m.end(cases[m.lastgroup]) if m.lastgroup in cases else m.start())
        for m in _BOUNDARY.finditer(text)
    ]


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.lists(st.sampled_from(_SENTENCE_PIECES), max_size=120).map("".join), st.text(max_size=300)
    )
)
def test_sentence_boundaries_match_the_three_alternative_pattern(text: str) -> None:
    assert _new_cuts(text) == _old_cuts(text)
