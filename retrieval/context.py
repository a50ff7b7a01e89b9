"""Context assembly: retrieved chunks -> the text a generator reads, within a token budget.

Steps, each for a reason:
- neighbour expansion (±`radius` chunks, fetched by `chunk_index` from the BM25 store, which keeps every
  chunk's text and offsets): an answer often straddles a chunk boundary;
- merge by offsets, not IDs: overlapping windows of one document (and a hit that is another hit's
  neighbour) become one span, so no text reaches the prompt twice; within a span each chunk contributes
  only the text the previous ones did not cover, pieces separated by `[CHUNK BOUNDARY]`;
- spans ordered by document (most relevant document first) then position, so text reads in order;
- each span headed by `[Source: "<title>", Section: "<heading chain>"]` for attribution;
- a token budget (tiktoken): spans are admitted best hit first; one that does not fit loses its leading
  neighbour and is cut at the last whole sentence that fits, never mid-sentence.

Neighbours come from any store of the read side (`ChunkSearch.chunks_at`); titles from what the store keeps
beside each chunk (`StoredChunk.title`, found by `document_records`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chunking.sentences import sentence_spans
from chunking.tokenizer import TokenCounter
from retrieval.fusion import Hit
from sinks.base import ChunkSearch, StoredChunk

DEFAULT_BUDGET = 8000  # tokens of assembled context, when the caller names no budget
SEPARATOR = "\n\n"
# Between the pieces of one merged span: the text on either side comes from two stored chunks.
CHUNK_BOUNDARY = "\n[CHUNK BOUNDARY]\n"


@dataclass(frozen=True)
class Piece(StoredChunk):
    """A stored chunk placed in a context; `rank` is its 1-based retrieval rank, None for a neighbour."""

    rank: int | None = None
    score: float = 0.0


@dataclass
class ContextSpan:
    """Merged text of one document region; `hit_offset` is where the first retrieved chunk starts in `text`."""

    document_id: str
    start_char: int
    end_char: int
    text: str
    chunk_ids: list[str]
    hit_chunk_ids: list[str]
    rank: int
    score: float
    heading_chain: tuple[str, ...]
    title: str = ""
    hit_offset: int = 0
    truncated: bool = False
    segments: list[tuple[int, int, int]] = field(
        default_factory=list, repr=False
    )  # (text pos, doc start, end)

    def text_offset(self, doc_offset: int) -> int:
        """Position in `text` of a document offset inside the span (the segment holding it)."""
        for at, start, end in reversed(self.segments):
            if start <= doc_offset <= end:
                return at + doc_offset - start
        return 0

    def doc_offset(self, text_offset: int) -> int:
        """Document offset of a position in `text` (a position inside a marker maps to the next segment)."""
        for at, start, end in self.segments:
            if text_offset <= at + (end - start):
                return start + max(0, text_offset - at)
        return self.end_char

    def header(self) -> str:
        section = " > ".join(self.heading_chain) or "-"
        return f'[Source: "{self.title or self.document_id}", Section: "{section}"]'

    def render(self) -> str:
        return f"{self.header()}\n{self.text}"


@dataclass
class AssembledContext:
    spans: list[ContextSpan]
    text: str
    tokens: int
    budget: int
    dropped: list[str] = field(default_factory=list)  # hit chunk IDs left out by the budget


def pieces_for_hits(hits: Sequence[Hit], store: ChunkSearch | None = None, radius: int = 1) -> list[Piece]:
    """Hits as pieces, plus their ±`radius` neighbours from `store` (any read-side store: `chunks_at`)."""
    pieces: dict[str, Piece] = {}
    for rank, hit in enumerate(hits, start=1):
        pieces[hit.chunk_id] = Piece(
            hit.chunk_id, hit.document_id, hit.chunk_index, hit.start_char, hit.end_char, hit.content,
            tuple(hit.heading_chain), rank=rank, score=hit.score,
        )  # fmt: skip
    if store is not None and radius > 0:
        wanted: dict[str, set[int]] = {}
        for p in list(pieces.values()):
            wanted.setdefault(p.document_id, set()).update(
                range(p.chunk_index - radius, p.chunk_index + radius + 1)
            )
        for document_id, indexes in wanted.items():
            for c in store.chunks_at(document_id, indexes):
                if c.chunk_id not in pieces:
                    pieces[c.chunk_id] = Piece(
                        c.chunk_id, c.document_id, c.chunk_index, c.start_char, c.end_char, c.content,
                        tuple(c.heading_chain),
                    )  # fmt: skip
    return list(pieces.values())


def merge_pieces(pieces: Sequence[Piece]) -> list[ContextSpan]:
    """Merge each document's pieces that overlap, touch or are consecutive chunks into spans.

    Returned ordered by document (best-ranked document first), then by position.
    """
    spans: list[ContextSpan] = []
    current: ContextSpan | None = None
    last_index = -2
    for p in sorted(pieces, key=lambda p: (p.document_id, p.start_char, p.end_char, p.chunk_index)):
        joins = (
            current is not None
            and current.document_id == p.document_id
            and (p.start_char <= current.end_char or p.chunk_index == last_index + 1)
        )
        if current is None or not joins:
            current = ContextSpan(
                p.document_id, p.start_char, p.end_char, p.content, [p.chunk_id], [], 10**9, 0.0,
                p.heading_chain, segments=[(0, p.start_char, p.end_char)],
            )  # fmt: skip
            spans.append(current)
            last_index = p.chunk_index
        else:
            current.chunk_ids.append(p.chunk_id)
            last_index = max(last_index, p.chunk_index)
            if p.end_char > current.end_char:
                doc_from = max(p.start_char, current.end_char)
                current.text += CHUNK_BOUNDARY
                current.segments.append((len(current.text), doc_from, p.end_char))
                current.text += p.content[doc_from - p.start_char :]
                current.end_char = p.end_char
        if p.rank is not None:
            if not current.hit_chunk_ids:
                current.hit_offset = current.text_offset(p.start_char)
            current.hit_chunk_ids.append(p.chunk_id)
            if p.rank < current.rank:
                current.rank, current.score, current.heading_chain = p.rank, p.score, p.heading_chain
    return merge_order([s for s in spans if s.hit_chunk_ids])


def _fit_sentences(span: ContextSpan, room: int, counter: TokenCounter) -> ContextSpan | None:
    """The span from its first hit on, cut after the last whole sentence that fits in `room` tokens."""
    body = span.text[span.hit_offset :]
    ends = [e for _, e in sentence_spans(body)]
    best: int | None = None
    lo, hi = 0, len(ends) - 1
    while lo <= hi:  # token counts grow with the prefix, so binary search the sentence ends
        mid = (lo + hi) // 2
        trial = ContextSpan(**{**span.__dict__, "text": body[: ends[mid]]})
        if counter.count(trial.render()) <= room:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best is None:
        return None
    h, cut = span.hit_offset, ends[best]
    segments = []
    for at, start, end in span.segments:
        lo, hi = max(at, h), min(at + end - start, h + cut)
        if lo < hi:
            segments.append((lo - h, start + lo - at, start + hi - at))
    return ContextSpan(
        **{**span.__dict__, "text": body[:cut], "hit_offset": 0, "truncated": True, "segments": segments,
           "start_char": segments[0][1], "end_char": segments[-1][2]}
    )  # fmt: skip


def assemble_context(
    hits: Sequence[Hit],
    store: ChunkSearch | None = None,
    *,
    titles: Mapping[str, str] | None = None,
    radius: int = 1,
    budget: int = DEFAULT_BUDGET,
    counter: TokenCounter | None = None,
) -> AssembledContext:
    """Expand, merge, attribute and fit `hits` (best first) into at most `budget` tokens."""
    counter = counter or TokenCounter()
    spans = merge_pieces(pieces_for_hits(hits, store, radius))
    for s in spans:
        s.title = (titles or {}).get(s.document_id, "") or s.document_id
    kept: list[ContextSpan] = []
    dropped: list[str] = []
    used = 0
    for span in sorted(spans, key=lambda s: s.rank):  # best hit first gets the budget
        room = budget - used - (counter.count(SEPARATOR) if kept else 0)
        cost = counter.count(span.render())
        if cost > room:
            fitted = _fit_sentences(span, room, counter)
            if fitted is None:
                dropped += span.hit_chunk_ids
                continue
            span, cost = fitted, counter.count(fitted.render())
        kept.append(span)
        used += cost + (counter.count(SEPARATOR) if len(kept) > 1 else 0)
    order = {id(s): i for i, s in enumerate(merge_order(kept))}
    kept.sort(key=lambda s: order[id(s)])
    text = SEPARATOR.join(s.render() for s in kept)
    tokens = counter.count(text)
    while tokens > budget and kept:  # BPE merges across a join can add a token or two; never exceed
        worst = max(kept, key=lambda s: s.rank)
        kept.remove(worst)
        dropped += worst.hit_chunk_ids
        text = SEPARATOR.join(s.render() for s in kept)
        tokens = counter.count(text)
    return AssembledContext(kept, text, tokens, budget, dropped)


def merge_order(spans: Sequence[ContextSpan]) -> list[ContextSpan]:
    """Document (best-ranked first), then position."""
    doc_rank: dict[str, int] = {}
    for s in spans:
        doc_rank[s.document_id] = min(doc_rank.get(s.document_id, s.rank), s.rank)
    return sorted(spans, key=lambda s: (doc_rank[s.document_id], s.document_id, s.start_char))


def document_records(hits: Sequence[Hit], stores: Sequence[ChunkSearch] = ()) -> dict[str, StoredChunk]:
    """For each hit's document, a stored chunk of it that carries what the store keeps beside the chunks
    (`StoredChunk.extra`: Qdrant's title, source ID and path; `.title` reads them), by document.

    A hit's own record is used first; a document whose hit came from a store that keeps no such fields
    (BM25) is looked up, by one of its chunks, in the other `stores`. A document no store describes is
    absent."""
    records: dict[str, StoredChunk] = {}
    first: dict[str, str] = {}
    for hit in hits:
        first.setdefault(hit.document_id, hit.chunk_id)
        if hit.document_id not in records and hit.chunk.title:
            records[hit.document_id] = hit.chunk
    for store in stores:
        missing = [chunk_id for document_id, chunk_id in first.items() if document_id not in records]
        if not missing:
            break
        for chunk in store.get_chunks(missing).values():
            if chunk.title:
                records.setdefault(chunk.document_id, chunk)
    return records
