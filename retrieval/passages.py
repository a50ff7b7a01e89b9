"""Passages: the best stretches of the top hits, ranked, for a reader whose budget holds a chunk or two.

A half-overlapping window (`auto`'s chunks) is two pieces, each the text between one chunk boundary and
the next, and an answer usually sits in one of them. So the top `PASSAGE_HITS` hits are cut where their
neighbours begin and end, where that is between two sentences or lines (as the models' segments are cut),
the keyword store scores every piece as if it were a chunk of its own (its document frequencies and
average length: `TextScorer`), and the pieces are ranked by their hit's rank and that score together
(`passage_score`). A reader filling a small budget takes the passages first and then the hits; `unichunk
eval` scores it so (benchmarks/README.md, "Passages"). Windows whose edges fall inside sentences stay
whole, so their passages are the top hits reordered by their own words, and overlap as the hits do.
Nothing here writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from unichunk.chunking.segments import between_sentences
from unichunk.retrieval.fusion import Hit
from unichunk.sinks.base import ChunkSearch, SearchFilter, TextScorer

# The hits cut into passages, and the weight of a passage's own BM25 (scaled to the best passage's) against
# its hit's rank (1 for the first hit, falling by 1/PASSAGE_HITS a rank). Chosen on the tune half of
# ../shared/eval (`benchmarks.passage_tuning`, benchmarks/README.md "Passages").
PASSAGE_HITS = 3
LEXICAL_WEIGHT = 1.0


@dataclass(frozen=True)
class Passage:
    """A stretch of one hit: exact offsets into its document, its text, and its passage score."""

    chunk_id: str
    document_id: str
    start_char: int
    end_char: int
    text: str
    score: float


def rank_passages(
    query: str,
    hits: Sequence[Hit],
    store: ChunkSearch | None,
    scorer: TextScorer | None,
    filter: SearchFilter | None = None,
    *,
    hits_used: int = PASSAGE_HITS,
    weight: float = LEXICAL_WEIGHT,
) -> list[Passage]:
    """The pieces of the first `hits_used` hits, best first (a piece two hits share counted once, for the
    better one); [] without hits or a scorer. `store` gives the neighbours whose boundaries cut the hits
    (read under `filter`, as every read of a search is); without one, each hit is one piece."""
    top = list(hits[:hits_used])
    if not top or scorer is None:
        return []
    cuts = _boundaries(top, store, filter)
    pieces: dict[tuple[str, int, int], tuple[int, Hit]] = {}
    for rank, hit in enumerate(top):
        for start, end in _pieces(hit, cuts[hit.document_id]):
            pieces.setdefault((hit.document_id, start, end), (rank, hit))
    texts = [hit.content[start - hit.chunk.start_char : end - hit.chunk.start_char] for (_, start, end), (_, hit) in pieces.items()]  # fmt: skip
    lexical = scorer.score_texts(query, texts)
    best = max(lexical, default=0.0) or 1.0
    found = [
        Passage(
            hit.chunk_id, document, start, end, text, passage_score(rank, hits_used, score / best, weight)
        )
        for ((document, start, end), (rank, hit)), text, score in zip(
            pieces.items(), texts, lexical, strict=True
        )
    ]
    order = {key: rank for key, (rank, _) in pieces.items()}
    return sorted(
        found, key=lambda p: (-p.score, order[p.document_id, p.start_char, p.end_char], p.start_char)
    )


def passage_score(rank: int, hits_used: int, lexical: float, weight: float) -> float:
    """A piece's score: its hit's rank as 1 - rank / hits_used (0-based rank), plus `weight` times its BM25
    scaled to the best piece's (`lexical`, 0 to 1)."""
    return 1.0 - rank / hits_used + weight * lexical


def _boundaries(
    hits: Sequence[Hit], store: ChunkSearch | None, filter: SearchFilter | None
) -> dict[str, set[int]]:
    """Per document, where the hits and their neighbours (one chunk either side) begin and end."""
    cuts: dict[str, set[int]] = defaultdict(set)
    wanted: dict[str, set[int]] = defaultdict(set)
    for hit in hits:
        cuts[hit.document_id] |= {hit.chunk.start_char, hit.chunk.end_char}
        wanted[hit.document_id] |= {hit.chunk.chunk_index - 1, hit.chunk.chunk_index + 1}
    if store is not None:
        for document, indexes in wanted.items():
            for chunk in store.chunks_at(document, sorted(i for i in indexes if i >= 0), filter=filter):
                cuts[document] |= {chunk.start_char, chunk.end_char}
    return cuts


def _pieces(hit: Hit, cuts: set[int]) -> list[tuple[int, int]]:
    """The hit cut at every boundary strictly inside it that lies between two sentences or lines, as the
    models' segments are (`between_sentences`): a fixed window's edge inside a word or a sentence does not
    cut a passage, so no name is shown or scored in halves."""
    start, end = hit.chunk.start_char, hit.chunk.end_char
    inside = sorted(c for c in cuts if start < c < end and between_sentences(hit.content, c - start))
    edges = [start, *inside, end]
    return list(pairwise(edges))
