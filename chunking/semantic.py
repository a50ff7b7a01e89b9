"""semantic: cut where adjacent sentences' embeddings diverge, never over the size cap.

Kamradt's semantic splitting (behind LlamaIndex's `SemanticSplitterNodeParser` and chonkie's
`SemanticChunker`): a boundary wherever the cosine distance between a sentence and the next is above the
document's `semantic_percentile`-th percentile. Sentences are embedded alone (`semantic_window` 0): it
retrieved better than Kamradt's one-sentence window, costs a third of the embedding, and puts the boundary on
the sentence where the topic changes. A stretch over `chunk_size` is cut at its most divergent gap that keeps
at least half the cap, and sentences over the cap are cut at clauses, then words (`refine_oversize`), so the
cap always holds; chunks run from a sentence's first character to a sentence's last, so offsets are exact.

The caller embeds (`ChunkingService.chunk(..., embed=...)`): `chunking` imports no model. Another embedder
gives other boundaries, so the pipeline names it in `ChunkStrategy.semantic_model`, part of the fingerprint.
Figures: benchmarks/README.md ("Retrieval quality", "Chunking speed"); design: docs/design.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from unichunk.chunking.base import BaseChunker, EmbedFunction, Span
from unichunk.chunking.errors import ChunkingError
from unichunk.chunking.models import Document
from unichunk.chunking.packing import refine_oversize
from unichunk.chunking.sentence import clause_spans
from unichunk.chunking.sentences import sentence_spans
from unichunk.chunking.span_counts import SpanCounter, span_counter

# A cut forced by the cap leaves the chunk at least this share of it, when the sentences allow.
MIN_FORCED_SHARE = 0.5
EMBED_BATCH = 256  # sentence windows per call of the embedding function


class SemanticChunkingError(ChunkingError):
    """The semantic strategy was run without an embedding function, or the function answered wrongly."""


def sentence_distances(vectors: np.ndarray) -> np.ndarray:
    """Cosine distance between each row and the next (n - 1 values); a zero vector is unlike everything."""
    norms = np.linalg.norm(vectors, axis=1)
    dots = np.einsum("ij,ij->i", vectors[:-1], vectors[1:])
    denominators = norms[:-1] * norms[1:]
    similarity = np.divide(dots, denominators, out=np.zeros_like(dots), where=denominators > 0)
    return 1.0 - similarity


class SemanticChunker(BaseChunker):
    """Boundaries at the most divergent sentence gaps (see the module docstring), `chunk_size` at most."""

    name = "semantic"

    def spans(self, text: str, document: Document) -> list[Span]:
        raise SemanticChunkingError(
            "the semantic strategy needs an embedding function: ChunkingService.chunk(document, strategy, "
            "embed=...) (the pipeline passes the configured embedder's)"
        )

    def embedded_spans(self, text: str, document: Document, embed: EmbedFunction) -> list[Span]:
        """The chunks' spans of `text`, its sentence windows embedded by `embed`."""
        size, _ = self.strategy.sizes_for(self.name)
        units = sentence_spans(text)
        if not units:
            return []
        counter = span_counter(text, self.counter)  # one tokenization of the text counts every span
        counts = counter.count_spans(units)
        units, counts = refine_oversize(text, units, counts, size, counter, clause_spans)
        if len(units) == 1:
            return [Span(units[0][0], units[0][1], token_count=counts[0])]
        distances = sentence_distances(self._vectors(text, units, embed))
        threshold = float(np.percentile(distances, self.strategy.semantic_percentile))
        return self._segment(text, units, counts, distances, threshold, size, counter)

    def _vectors(self, text: str, units: list[tuple[int, int]], embed: EmbedFunction) -> np.ndarray:
        window, last = self.strategy.semantic_window, len(units) - 1
        windows = [
            text[units[max(0, i - window)][0] : units[min(last, i + window)][1]] for i in range(len(units))
        ]
        vectors: list[Sequence[float]] = []
        for at in range(0, len(windows), EMBED_BATCH):
            batch = windows[at : at + EMBED_BATCH]
            answered = list(embed(batch))
            if len(answered) != len(batch):
                raise SemanticChunkingError(
                    f"the embedding function returned {len(answered)} vectors for {len(batch)} sentences"
                )
            vectors.extend(answered)
        return np.asarray(vectors, dtype=np.float64)

    def _segment(
        self,
        text: str,
        units: list[tuple[int, int]],
        counts: list[int],
        distances: np.ndarray,
        threshold: float,
        size: int,
        counter: SpanCounter,
    ) -> list[Span]:
        """Greedy left to right: a chunk ends at the first boundary (distance above `threshold`), or, when
        the cap comes first, at the most divergent gap that keeps it at least MIN_FORCED_SHARE of the cap."""
        out: list[Span] = []
        n, a = len(units), 0
        while a < n:
            b, estimate, ends = a, 0, []  # ends: (end unit index, estimated tokens of units[a:end])
            while b < n:
                gap = 1 if b > a and _breaks_line(text, units[b - 1][1], units[b][0]) else 0
                if b > a and estimate + gap + counts[b] > size:
                    break
                estimate += gap + counts[b]
                b += 1
                ends.append((b, estimate))
                if b < n and distances[b - 1] > threshold:
                    break
            end = b
            if b < n and not distances[b - 1] > threshold:  # the cap, not a boundary, stopped it
                allowed = [e for e, tokens in ends if tokens >= MIN_FORCED_SHARE * size] or [b]
                end = max(allowed, key=lambda e: (distances[e - 1], e))
            start_char = units[a][0]
            exact = counter.count_span(start_char, units[end - 1][1])
            while exact > size and end - 1 > a:  # the estimate missed merged tokens: drop trailing units
                end -= 1
                exact = counter.count_span(start_char, units[end - 1][1])
            out.append(Span(start_char, units[end - 1][1], token_count=exact))
            a = end
        return out


def _breaks_line(text: str, end: int, start: int) -> bool:
    """Whether the whitespace between two units is more than one space (a token of its own in cl100k)."""
    gap = text[end:start]
    return len(gap) > 1 or "\n" in gap
