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

Without `code`, the documents' code blocks (`code_spans`: Markdown fences and indented code, HTML `<pre>`)
are left out of each segment, its prose parts joined by a blank line: spaCy's English models read code as
prose and name things in it (`pub fn eat_at_restaurant`, `Compiling guessing_game v0.1.0`), a fifth of
the entity mentions on the Rust book's first 40 chapters (benchmarks/README.md). A chunk that is all code
then has no segment: nothing to extract.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.markdown import code_spans as markdown_code_spans
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


def segment_batch(
    batch: Sequence[tuple[Document, Sequence[Chunk]]], *, headings: bool, code: bool = True, cut: bool = True
) -> Segments:
    """The segments of every document's chunks; with `headings`, a chunk's heading chain is a segment of
    its own (what `Chunk.embed_text` adds for the embedder), shared by every chunk under it; without
    `code`, the prose of each segment only; without `cut`, each chunk whole is its segment (a model that
    reads whole chunks, `model_input=chunks`, is given their prose so)."""
    texts: list[str] = []
    position: dict[str, int] = {}
    members: list[tuple[int, ...]] = []

    def index(text: str) -> int:
        if text not in position:
            position[text] = len(texts)
            texts.append(text)
        return position[text]

    for document, chunks in batch:
        for chunk, pieces in zip(chunks, _pieces(document, chunks, code=code, cut=cut), strict=True):
            own = [index(heading_text(chunk))] if headings and chunk.heading_chain else []
            own += [index(p) for p in pieces if p.strip()]
            if not own and code:  # nothing but whitespace: the chunk itself, as a model would be given it
                own = [index(chunk.embed_text if headings else chunk.content)]
            members.append(tuple(own))
    return Segments(texts, members)


def segment_grouped(
    documents: Sequence[Document],
    chunks: Mapping[str, Sequence[Chunk]],
    *,
    headings: bool,
    code: bool = True,
    cut: bool = True,
) -> Segments:
    """`segment_batch` of a batch as `unichunk.sinks.base.group_batch` splits it (documents, and chunks by
    document ID, in the order the chunks are listed); a document listed twice is taken as last listed."""
    by_id = {d.document_id: d for d in documents}
    return segment_batch(
        [(by_id[i], own) for i, own in chunks.items()], headings=headings, code=code, cut=cut
    )


def _pieces(document: Document, chunks: Sequence[Chunk], *, code: bool, cut: bool) -> list[list[str]]:
    """Each chunk's content cut at every boundary of the document's chunks that falls inside it between
    two sentences or lines (`between_sentences`); a boundary inside a sentence (fixed windows cut anywhere)
    is not a cut, so no model reads half a name or half a sentence it would have read whole. Without
    `code`, each piece's prose only (`_prose`)."""
    text = document.text
    if any(text[c.start_char : c.end_char] != c.content for c in chunks):
        return [[c.content] for c in chunks]
    bounds = {c.start_char for c in chunks} | {c.end_char for c in chunks} if cut else set()
    cuts = sorted(b for b in bounds if between_sentences(text, b))
    blocks = [] if code else code_spans(document)
    out = []
    for chunk in chunks:
        inside = cuts[bisect_right(cuts, chunk.start_char) : bisect_left(cuts, chunk.end_char)]
        spans = pairwise([chunk.start_char, *inside, chunk.end_char])
        out.append([_prose(text, s, e, blocks) for s, e in spans])
    return out


def code_spans(document: Document) -> list[tuple[int, int]]:
    """Where a document's code blocks are, sorted: its `blocks` of kind `code` (HTML's loader marks them),
    or for Markdown where its chunker finds them (the loader keeps no blocks of Markdown)."""
    if document.blocks:
        return sorted((b.start, b.end) for b in document.blocks if b.kind == "code")
    if document.mime_type == "text/markdown":
        return markdown_code_spans(document.text)
    return []


def _prose(text: str, start: int, end: int, code: Sequence[tuple[int, int]]) -> str:
    """`text[start:end]` without the `code` spans (sorted, not overlapping) in it, the parts around them
    joined by a blank line (so no sentence runs across a code block); empty if it is all code; as it is
    if no code span reaches into it."""
    parts, at = [], start
    for s, e in code[max(0, bisect_right(code, (start, start)) - 1) :]:  # from the last to start before
        if s >= end:
            break
        if e > start:
            parts.append(text[at : max(at, s)])
            at = max(at, e)
    if at == start:
        return text[start:end]
    parts.append(text[at:end])
    return "\n\n".join(part.strip() for part in parts if part.strip())


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
