"""Overlapping chunks cut into the pieces no two of them split: each text is read by a model once.

`auto` overlaps neighbouring chunks by half (the retrieval measurements chose it), so a model given whole
chunks reads every character twice. Cutting a document at every chunk boundary gives non-overlapping
*segments*; each chunk is exactly the concatenation of the segments between its own boundaries, so a
model's per-segment results (MiniLM's token states, spaCy's entities) can be summed or merged per chunk
(benchmarks/README.md, "Overlapping chunks read once, as shipped").

Only boundaries between two sentences or lines cut (`between_sentences`: where `auto` cuts); a boundary
inside a sentence, as fixed windows place them, would have spaCy miss a name cut in two and MiniLM read
half-words, so a chunk keeps that stretch whole. A batch's segments are deduplicated by text: a heading
chain many chunks share, or a passage two documents share, is one segment. Whitespace-only pieces are
left out (a model sees nothing in them). A document whose chunks do not sit at their offsets (a chunk not
equal to `document.text[start:end]`) keeps each chunk as its own segment, so the result is never built
from text the chunk does not hold.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk, Document


@dataclass(frozen=True)
class Segments:
    """A batch's distinct segment `texts`, and for each chunk (in the order given) the positions in
    `texts` of the segments it is made of, in text order (a heading chain first)."""

    texts: list[str]
    members: list[tuple[int, ...]]


def heading_text(chunk: Chunk) -> str:
    """The heading chain as `Chunk.embed_text` puts it before the content, without the content."""
    return " > ".join(chunk.heading_chain) + ":"


def segment_batch(batch: Sequence[tuple[Document, Sequence[Chunk]]], *, headings: bool) -> Segments:
    """The segments of every document's chunks; with `headings`, a chunk's heading chain is a segment of
    its own (what `Chunk.embed_text` adds for the embedder), shared by every chunk under it."""
    texts: list[str] = []
    position: dict[str, int] = {}
    members: list[tuple[int, ...]] = []

    def index(text: str) -> int:
        if text not in position:
            position[text] = len(texts)
            texts.append(text)
        return position[text]

    for document, chunks in batch:
        for chunk, pieces in zip(chunks, _pieces(document, chunks), strict=True):
            own = [index(heading_text(chunk))] if headings and chunk.heading_chain else []
            own += [index(p) for p in pieces if p.strip()]
            if not own:  # nothing but whitespace: the chunk itself, as a model would be given it
                own = [index(chunk.embed_text if headings else chunk.content)]
            members.append(tuple(own))
    return Segments(texts, members)


def segment_grouped(
    documents: Sequence[Document], chunks: Mapping[str, Sequence[Chunk]], *, headings: bool
) -> Segments:
    """`segment_batch` of a batch as `unichunk.sinks.base.group_batch` splits it (documents, and chunks by
    document ID, in the order the chunks are listed); a document listed twice is taken as last listed."""
    by_id = {d.document_id: d for d in documents}
    return segment_batch([(by_id[i], own) for i, own in chunks.items()], headings=headings)


def _pieces(document: Document, chunks: Sequence[Chunk]) -> list[list[str]]:
    """Each chunk's content cut at every boundary of the document's chunks that falls inside it between
    two sentences or lines (`between_sentences`); a boundary inside a sentence (fixed windows cut anywhere)
    is not a cut, so no model reads half a name or half a sentence it would have read whole."""
    text = document.text
    if any(text[c.start_char : c.end_char] != c.content for c in chunks):
        return [[c.content] for c in chunks]
    cuts = sorted(
        b for b in {c.start_char for c in chunks} | {c.end_char for c in chunks} if between_sentences(text, b)
    )
    out = []
    for chunk in chunks:
        inside = cuts[bisect_right(cuts, chunk.start_char) : bisect_left(cuts, chunk.end_char)]
        out.append([text[s:e] for s, e in pairwise([chunk.start_char, *inside, chunk.end_char])])
    return out


_ENDS_SENTENCE = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*$")


def between_sentences(text: str, at: int) -> bool:
    """Whether position `at` of `text` lies in the whitespace between two lines, or after a sentence's end
    (`.`, `!`, `?` or an ellipsis, closing quotes or brackets allowed): where `auto` cuts, and where a
    sentence-by-sentence reader and an embedder lose nothing by starting afresh."""
    if at <= 0 or at >= len(text):
        return True
    left, right = at, at
    while left > 0 and text[left - 1].isspace():
        left -= 1
    while right < len(text) and text[right].isspace():
        right += 1
    gap = text[left:right]
    if not gap:  # between two visible characters: inside a word
        return False
    return "\n" in gap or left == 0 or bool(_ENDS_SENTENCE.search(text[max(0, left - 4) : left]))


def first_users(members: Sequence[tuple[int, ...]], keys: Sequence[str], fresh: Collection[str]) -> int:
    """How many chunks are the first, in order, to need a text whose key is in `fresh` (computed now, for
    that chunk; a later chunk needing only such texts reuses them): a run's `embedded` / `extracted` count,
    which with one text per chunk is the number of distinct fresh texts."""
    seen: set[str] = set()
    count = 0
    for own in members:
        new = {keys[i] for i in own if keys[i] in fresh} - seen
        if new:
            count += 1
            seen |= new
    return count


def segment_chunk(text: str) -> Chunk:
    """A segment as a model's input where the model takes chunks (the graph's extractor): a chunk of its
    own text, keyed (ID and content hash) by the text's SHA-256, as a chunk of the same text is cached."""
    key = sha256_hex(text)
    return Chunk(
        chunk_id=f"segment::{key}",
        document_id="segment",
        chunk_index=0,
        content=text,
        start_char=0,
        end_char=len(text),
        token_count=0,
        content_hash=key,
    )
