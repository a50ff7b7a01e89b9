"""fixed_chars: 900-character windows advancing by 780, whitespace-only windows dropped, sentence option."""

from __future__ import annotations

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.fixed_chars import FixedCharsChunker
from unichunk.chunking.models import Document


def chunk(text: str, **settings: object):
    return FixedCharsChunker(ChunkStrategy(name="fixed_chars", **settings)).chunk(Document(text=text))


def test_windows_of_900_with_120_overlap() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(2500))
    chunks = chunk(text)
    assert [(c.start_char, c.end_char) for c in chunks] == [(0, 900), (780, 1680), (1560, 2460), (2340, 2500)]
    assert chunks[0].content[-120:] == chunks[1].content[:120]
    assert chunks[0].token_count > 0


def test_text_of_exactly_one_window_is_one_chunk() -> None:
    assert [(c.start_char, c.end_char) for c in chunk("x" * 900)] == [(0, 900)]
    # 901 characters: the second window [780, 901) brings one new character
    assert [(c.start_char, c.end_char) for c in chunk("x" * 901)] == [(0, 900), (780, 901)]


def test_whitespace_only_windows_are_skipped() -> None:
    text = "start" + " " * 3000 + "end"
    chunks = chunk(text)
    assert all(c.content.strip() for c in chunks)
    assert chunks[0].start_char == 0 and chunks[-1].end_char == len(text)
    assert len(chunks) == 2


def test_prefer_sentence_end_moves_the_cut_back_to_a_sentence_end() -> None:
    sentence = "This sentence has exactly fifty characters in it. "  # 50 chars
    text = sentence * 40
    plain = chunk(text)
    preferring = chunk(text, prefer_sentence_end=True)
    assert plain[0].end_char == 900 and not plain[0].content.endswith(".")
    # last sentence end within [720, 900): the "." at offset 898 (50 * 18 - 2), cut right after it
    assert preferring[0].end_char == 899 and preferring[0].content.endswith(".")
    assert preferring[1].start_char == 899 - 120
    assert all(c.content.endswith(".") for c in preferring[:-1])
    assert preferring[-1].end_char == len(text)


def test_prefer_sentence_end_ignores_sentence_ends_before_the_last_fifth() -> None:
    text = "Short one. " + "x" * 2000
    chunks = chunk(text, prefer_sentence_end=True)
    assert chunks[0].end_char == 900  # the only "." is at offset 9, far outside [720, 900)
