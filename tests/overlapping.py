"""Overlapping chunks for the tests of segments read once: a four-sentence text, chunks of two sentences
overlapping by one under a heading (every boundary between two sentences, where `auto` cuts), and the real
MiniLM remembering every text it was given."""

from __future__ import annotations

from unichunk.chunking.models import Chunk, Document
from unichunk.sinks.vectors.minilm import MiniLMEmbedder

TEXT = (
    "Ownership is a set of rules that govern how a Rust program manages memory. "
    "Some languages have garbage collection that regularly looks for no-longer-used memory. "
    "Rust uses a third approach: memory is managed through a system of ownership. "
    "None of the features of ownership will slow down your program while it is running."
)
HEADING = ("The Rust Book", "Ownership")


class CountingMiniLM(MiniLMEmbedder):
    """The real embedder, remembering every text the model was given."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.seen: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.seen += texts
        return super().embed(texts)

    def embed_sums(self, texts: list[str]) -> list[list[float]]:
        self.seen += texts
        return super().embed_sums(texts)


def overlapping_chunks(document: Document, *, whole: bool = False) -> list[Chunk]:
    """Three chunks of two sentences, overlapping by one, under `HEADING`; with `whole`, a fourth holding
    all the text, without a heading."""
    text = document.text
    starts = [0, *(i + 2 for i, c in enumerate(text) if c == "." and i + 2 < len(text))]
    ends = [*(s - 1 for s in starts[1:]), len(text)]
    spans = [(starts[0], ends[1]), (starts[1], ends[2]), (starts[2], ends[3])]
    if whole:
        spans.append((0, len(text)))
    return [
        Chunk(
            chunk_id=f"c{i}",
            document_id=document.document_id,
            chunk_index=i,
            content=text[s:e],
            start_char=s,
            end_char=e,
            token_count=0,
            content_hash=f"h{i}",
            heading_chain=HEADING if i < 3 else (),
        )
        for i, (s, e) in enumerate(spans)
    ]
