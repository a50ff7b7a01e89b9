"""Invariants every strategy must keep on any text, checked with hypothesis over hostile Unicode."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from texts import hashed_words

from unichunk.chunking.base import Span
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.semantic import SemanticChunker
from unichunk.chunking.service import REGISTRY, chunker_class

# Pieces that break naive chunkers: multi-byte and multi-token characters, ZWJ sequences, combining marks,
# CRLF, zero-width characters, CJK without spaces, sentence punctuation, blank lines, long unbroken runs.
PIECES = [
    "word",
    "Word",
    " ",
    "  ",
    "\n",
    "\r\n",
    "\n\n",
    "\r\n\r\n",
    "\t",
    ". ",
    "! ",
    "? ",
    ", ",
    "; ",
    "😀",
    "👩\u200d👩\u200d👧",
    "🇫🇷",
    "漢字テスト",
    "。",
    "e\u0301",
    "\u200b",
    "\u200d",
    "\ufeff",
    "# Heading\n",
    "- item\n",
    "<p>",
    "</p>",
    "x" * 300,
    "ab" * 120,
    "😀" * 60,
    "数据" * 80,
    "1234567",
]

text_strategy = st.one_of(
    st.lists(st.sampled_from(PIECES), min_size=0, max_size=260).map("".join),
    st.text(max_size=1500),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=20)), max_size=200).map("".join),
)

# Small sizes so modest texts produce many chunks (and token_window leaves its whole-document mode).
SMALL = {"chunk_size": 128, "chunk_overlap": 32, "single_piece_max": 128}


def _available(name: str) -> bool:
    module = REGISTRY[name].partition(":")[0]
    return importlib.util.find_spec(module) is not None


STRATEGIES = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(not _available(name), reason=f"{REGISTRY[name]} is not written yet"),
    )
    for name in REGISTRY
]


class _HashedSemantic(SemanticChunker):
    """`semantic` measuring sentences with a real, simple embedding (tests/texts.hashed_words), so the
    properties every strategy owes apply to it as they are."""

    def spans(self, text: str, document: Document) -> list[Span]:
        return self.embedded_spans(text, document, hashed_words)


def _chunker(name: str, **overrides: object):
    cls = _HashedSemantic if name == "semantic" else chunker_class(name)
    strategy = ChunkStrategy(name=name, **(SMALL | overrides))
    if name == "token_window":
        return cls(strategy, segment_chars=64)  # tiny segments: exercise segmented tokenization
    return cls(strategy)


def check_invariants(chunker, text: str) -> None:
    document = Document(text=text, source_system="test", source_id="doc")
    chunks = chunker.chunk(document)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert text[chunk.start_char : chunk.end_char] == chunk.content
        assert chunk.content.strip(), "whitespace-only chunk"
        assert chunk.document_id == document.document_id
    starts = [c.start_char for c in chunks]
    assert starts == sorted(starts)
    # coverage: every non-whitespace character lies in a chunk, so the gaps between chunks are whitespace
    covered_to = 0
    for chunk in chunks:
        assert text[covered_to : chunk.start_char].isspace() or covered_to >= chunk.start_char
        covered_to = max(covered_to, chunk.end_char)
    assert not text[covered_to:].strip()
    # determinism: a second run (fresh chunker) gives identical chunks and IDs
    again = type(chunker)(chunker.strategy).chunk(document)
    assert [c.model_dump() for c in again] == [c.model_dump() for c in chunks]


@pytest.mark.parametrize("name", STRATEGIES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=text_strategy)
def test_every_strategy_keeps_offsets_order_coverage_and_determinism(name: str, text: str) -> None:
    check_invariants(_chunker(name), text)


@pytest.mark.parametrize("name", ["sentence", "paragraph"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=text_strategy)
def test_packing_strategies_never_exceed_chunk_size(name: str, text: str) -> None:
    chunks = _chunker(name).chunk(Document(text=text))
    counter = _chunker(name).counter
    for chunk in chunks:
        assert chunk.token_count == counter.count(chunk.content)
        assert chunk.token_count <= 128


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=text_strategy)
def test_fixed_chars_with_sentence_preference_keeps_invariants(text: str) -> None:
    chunker = chunker_class("fixed_chars")(
        ChunkStrategy(name="fixed_chars", chunk_size=200, chunk_overlap=30, prefer_sentence_end=True)
    )
    check_invariants(chunker, text)
    for chunk in chunker.chunk(Document(text=text)):
        assert len(chunk.content) <= 200
