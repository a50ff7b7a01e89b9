"""The once-per-character benchmarks' pure parts: the segments overlapping chunks cut, and a chunk's vector
composed from its segments' token states (the mean over all its word pieces, normalised)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from benchmarks.composed_vectors import composed, segments
from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk

TEXT = "alpha beta gamma delta epsilon zeta eta theta"


def _chunk(index: int, start: int, end: int) -> Chunk:
    return Chunk(
        chunk_id=f"c{index}",
        document_id="d",
        chunk_index=index,
        content=TEXT[start:end],
        start_char=start,
        end_char=end,
        token_count=0,
        content_hash=sha256_hex(TEXT[start:end]),
    )


def test_segments_are_the_pieces_between_boundaries_that_a_chunk_covers() -> None:
    chunks = [_chunk(0, 0, 16), _chunk(1, 6, 28), _chunk(2, 17, 28), _chunk(3, 35, 45)]
    assert segments(chunks) == [(0, 6), (6, 16), (16, 17), (17, 28), (35, 45)]
    # every chunk is exactly the union of the segments inside it
    for c in chunks:
        inside = [(s, e) for s, e in segments(chunks) if c.start_char <= s and e <= c.end_char]
        assert inside[0][0] == c.start_char and inside[-1][1] == c.end_char
        assert all(a[1] == b[0] for a, b in pairwise(inside))


def test_a_composed_vector_is_the_normalised_mean_over_all_its_segments_word_pieces() -> None:
    rng = np.random.default_rng(0)
    chunks = [_chunk(0, 0, 16), _chunk(1, 6, 28)]
    pieces = segments(chunks)  # (0, 6), (6, 16), (16, 28)
    states = [rng.standard_normal((n, 4)) for n in (3, 5, 2)]
    made = composed(chunks, pieces, states)
    mean = np.concatenate(states[:2]).mean(axis=0)
    assert made["c0"][0] == pytest.approx(mean / np.linalg.norm(mean))
    mean = np.concatenate(states[1:]).mean(axis=0)
    assert made["c1"][0] == pytest.approx(mean / np.linalg.norm(mean))
    # the other way: the normalised mean of the segments' own normalised vectors
    units = [s.mean(axis=0) / np.linalg.norm(s.mean(axis=0)) for s in states[:2]]
    assert made["c0"][1] == pytest.approx(sum(units) / np.linalg.norm(sum(units)))
