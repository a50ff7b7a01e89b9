"""Context assembly: retrieved chunks -> the text a generator reads, within a token budget (small-to-big).

Retrieval ranks small chunks (precise); the reader gets the text around them, since an answer often
straddles a chunk boundary. So the best hit is admitted first, then its ±`radius` neighbours (fetched by
`chunk_index` through `ChunkSearch.chunks_at`, the following one first), then the next hit, while the rendered
context fits the budget; the piece that would overflow is cut at a sentence boundary on its hit's side and
admission stops there. Given the search's passages (`unichunk.retrieval.passages`), those are admitted
first, best first: a budget that holds a chunk or two then gets the top hits' best stretches rather than the
first hit's weaker half and its neighbour (benchmarks/README.md, "Passages"); a budget that holds the hits
gets the same text either way. Windows merge by offsets, not IDs, so no text reaches the prompt twice; spans are
ordered by document then position under a `[Source: ..., Section: ...]` header counted in the budget.
docs/design.md ("The query side") has each step. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from unichunk.chunking.sentences import sentence_spans
from unichunk.chunking.tokenizer import TokenCounter
from unichunk.retrieval.fusion import Hit
from unichunk.retrieval.passages import Passage
from unichunk.sinks.base import ChunkSearch, SearchFilter, StoredChunk

DEFAULT_BUDGET = 8000  # tokens of assembled context, when the caller names no budget
SEPARATOR = "\n\n"
# Between the pieces of one merged span: the text on either side comes from two stored chunks.
CHUNK_BOUNDARY = "\n[CHUNK BOUNDARY]\n"


@dataclass(frozen=True)
class Piece(StoredChunk):
    """A stored chunk placed in a context; `rank` is its 1-based retrieval rank, None for a neighbour."""

    rank: int | None = None
    score: float = 0.0
    before_hit: bool = False  # a neighbour preceding the hit it was fetched for (cut keeps its tail)


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


def pieces_for_hits(
    hits: Sequence[Hit],
    store: ChunkSearch | None = None,
    radius: int = 1,
    filter: SearchFilter | None = None,
) -> list[Piece]:
    """Hits as pieces, plus their ±`radius` neighbours from `store`, in small-to-big admission order
    (`small_to_big`). Neighbours are fetched under the search's `filter`, inside the store's query: a
    neighbour the reader may not read is as absent as one past the document's end."""
    ranked: list[Piece] = []
    seen: set[str] = set()
    for rank, hit in enumerate(hits, start=1):
        if hit.chunk_id in seen:
            continue
        seen.add(hit.chunk_id)
        ranked.append(
            Piece(
                hit.chunk_id, hit.document_id, hit.chunk_index, hit.start_char, hit.end_char, hit.content,
                tuple(hit.heading_chain), rank=rank, score=hit.score,
            )
        )  # fmt: skip
    around: dict[tuple[str, int], Piece] = {}
    if store is not None and radius > 0:
        wanted: dict[str, set[int]] = {}
        for p in ranked:
            wanted.setdefault(p.document_id, set()).update(
                range(p.chunk_index - radius, p.chunk_index + radius + 1)
            )
        for document_id, indexes in wanted.items():
            for c in store.chunks_at(document_id, indexes, filter=filter):
                around[(c.document_id, c.chunk_index)] = Piece(
                    c.chunk_id, c.document_id, c.chunk_index, c.start_char, c.end_char, c.content,
                    tuple(c.heading_chain),
                )  # fmt: skip
    return small_to_big(ranked, around, radius)


def passage_pieces(passages: Sequence[Passage], hits: Sequence[Hit]) -> list[Piece]:
    """`passages` as pieces of the hits they are stretches of, each with its hit's rank and score (so spans
    order and drop as their hits would); a passage of no given hit is left out."""
    ranked: dict[str, tuple[int, Hit]] = {}
    for rank, hit in enumerate(hits, start=1):
        ranked.setdefault(hit.chunk_id, (rank, hit))
    pieces = []
    for p in passages:
        if p.chunk_id not in ranked:
            continue
        rank, hit = ranked[p.chunk_id]
        piece = Piece(
            p.chunk_id, p.document_id, hit.chunk_index, p.start_char, p.end_char, p.text,
            tuple(hit.heading_chain), rank=rank, score=hit.score,
        )  # fmt: skip
        pieces.append(piece)
    return pieces


def small_to_big(
    ranked: Sequence[Piece], around: Mapping[tuple[str, int], Piece], radius: int
) -> list[Piece]:
    """Admission order: each hit (best first) followed by its neighbours from `around` (keyed by
    (document, chunk_index)), nearest first and the following one before the preceding one; a chunk
    listed once, at its first place (a hit ranked lower that is already a neighbour keeps its rank)."""
    hit_ids = {p.chunk_id: p for p in ranked}
    order: list[Piece] = []
    placed: set[str] = set()
    for hit in ranked:  # a hit placed already as a better hit's neighbour still brings its own
        neighbours = [(around.get((hit.document_id, hit.chunk_index + step * side)), side < 0)
                      for step in range(1, radius + 1) for side in (1, -1)]  # fmt: skip
        for piece, before in ((hit, False), *neighbours):
            if piece is None or piece.chunk_id in placed:
                continue
            placed.add(piece.chunk_id)
            if piece.chunk_id in hit_ids:  # a neighbour that is a hit keeps its rank
                order.append(hit_ids[piece.chunk_id])
            else:
                order.append(replace(piece, before_hit=before))
    return order


def merge_pieces(pieces: Sequence[Piece]) -> list[ContextSpan]:
    """Merge each document's pieces that overlap, touch or are consecutive chunks into spans, with a
    `CHUNK_BOUNDARY` where the text passes from one stored chunk to another (two stretches of one chunk, a
    passage and the rest of its hit, join without one).

    Returned ordered by document (best-ranked document first), then by position; a span holding no hit
    is left out.
    """
    spans: list[ContextSpan] = []
    current: ContextSpan | None = None
    last_index = -2
    ends_with = ""  # the chunk the current span's text ends in
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
            last_index, ends_with = p.chunk_index, p.chunk_id
        else:
            if p.chunk_id not in current.chunk_ids:
                current.chunk_ids.append(p.chunk_id)
            last_index = max(last_index, p.chunk_index)
            if p.end_char > current.end_char:
                doc_from = max(p.start_char, current.end_char)
                if p.chunk_id == ends_with:  # the same chunk goes on: its last segment grows
                    at, start, _ = current.segments[-1]
                    current.segments[-1] = (at, start, p.end_char)
                else:
                    current.text += CHUNK_BOUNDARY
                    current.segments.append((len(current.text), doc_from, p.end_char))
                current.text += p.content[doc_from - p.start_char :]
                current.end_char, ends_with = p.end_char, p.chunk_id
        if p.rank is not None:
            if not current.hit_chunk_ids:
                current.hit_offset = current.text_offset(p.start_char)
            if p.chunk_id not in current.hit_chunk_ids:
                current.hit_chunk_ids.append(p.chunk_id)
            if p.rank < current.rank:
                current.rank, current.score, current.heading_chain = p.rank, p.score, p.heading_chain
    return merge_order([s for s in spans if s.hit_chunk_ids])


class _Admitted:
    """The pieces admitted so far and what their rendered context costs, re-rendering only the spans a
    new piece changes (span token counts are cached by the span's extent and pieces)."""

    def __init__(self, titles: Mapping[str, str], counter: TokenCounter) -> None:
        self.pieces: list[Piece] = []
        self.titles, self.counter = titles, counter
        self._span_tokens: dict[tuple, int] = {}
        self._separator = counter.count(SEPARATOR)

    def spans(self, pieces: Sequence[Piece]) -> list[ContextSpan]:
        spans = merge_pieces(pieces)
        for s in spans:
            s.title = self.titles.get(s.document_id, "") or s.document_id
        return spans

    def cost(self, pieces: Sequence[Piece]) -> int:
        """Tokens of the context these pieces render to: each span counted apart, plus the separators
        (a BPE merge across a join can add a token; `assemble_context` checks the joined text last)."""
        spans = self.spans(pieces)
        total = 0
        for s in spans:
            key = (s.document_id, s.start_char, s.end_char, s.title, s.heading_chain, s.text)
            if key not in self._span_tokens:
                self._span_tokens[key] = self.counter.count(s.render())
            total += self._span_tokens[key]
        return total + self._separator * max(0, len(spans) - 1)

    def covers(self, piece: Piece) -> bool:
        """Whether the admitted pieces already hold all of `piece`'s text."""
        return any(
            p.document_id == piece.document_id
            and p.start_char <= piece.start_char
            and piece.end_char <= p.end_char
            for p in self.pieces
        )


def _cut(piece: Piece, keep: Literal["head", "tail"], admitted: _Admitted, budget: int) -> Piece | None:
    """The longest part of `piece` that ends (head) or starts (tail) at a sentence boundary and still fits
    `budget` beside the admitted pieces; None if not even one sentence does."""
    sentences = sentence_spans(piece.content)
    bounds = [e for _, e in sentences] if keep == "head" else [s for s, _ in reversed(sentences)]
    best: Piece | None = None
    lo, hi = 0, len(bounds) - 1
    while lo <= hi:  # longer cuts cost more tokens: binary search the sentence boundaries
        mid = (lo + hi) // 2
        start, end = (0, bounds[mid]) if keep == "head" else (bounds[mid], len(piece.content))
        trial = replace(piece, start_char=piece.start_char + start, end_char=piece.start_char + end,
                        content=piece.content[start:end])  # fmt: skip
        if admitted.cost([*admitted.pieces, trial]) <= budget:
            best, lo = trial, mid + 1
        else:
            hi = mid - 1
    return best


def assemble_context(
    hits: Sequence[Hit],
    store: ChunkSearch | None = None,
    *,
    passages: Sequence[Passage] = (),
    titles: Mapping[str, str] | None = None,
    radius: int = 1,
    budget: int = DEFAULT_BUDGET,
    counter: TokenCounter | None = None,
    filter: SearchFilter | None = None,
) -> AssembledContext:
    """Admit `passages` (best first; stretches of `hits`), then `hits` (best first) and their ±`radius`
    neighbours small-to-big, into at most `budget` tokens; neighbours only those `filter` admits
    (`pieces_for_hits`). A span holding only part of one of its chunks is marked `truncated`."""
    counter = counter or TokenCounter()
    admitted = _Admitted(titles or {}, counter)
    whole = pieces_for_hits(hits, store, radius, filter)
    for piece in [*passage_pieces(passages, hits), *whole]:
        if admitted.covers(piece):  # costs nothing; a hit still counts as found (and not dropped)
            if piece.rank is not None:
                admitted.pieces.append(piece)
            continue
        if admitted.cost([*admitted.pieces, piece]) <= budget:
            admitted.pieces.append(piece)
            continue
        fitted = _cut(piece, "tail" if piece.before_hit else "head", admitted, budget)
        if fitted is not None:
            admitted.pieces.append(fitted)
        break
    extent = {p.chunk_id: (p.start_char, p.end_char) for p in whole}
    spans = admitted.spans(admitted.pieces)
    for s in spans:
        s.truncated = any(extent[c][0] < s.start_char or s.end_char < extent[c][1] for c in s.chunk_ids)
    text = SEPARATOR.join(s.render() for s in spans)
    tokens = counter.count(text)
    while tokens > budget and spans:  # BPE merges across a join can add a token or two; never exceed
        worst = max(spans, key=lambda s: s.rank)
        spans.remove(worst)
        text = SEPARATOR.join(s.render() for s in spans)
        tokens = counter.count(text)
    kept = {chunk_id for s in spans for chunk_id in s.hit_chunk_ids}
    dropped = list(dict.fromkeys(h.chunk_id for h in hits if h.chunk_id not in kept))
    return AssembledContext(spans, text, tokens, budget, dropped)


def merge_order(spans: Sequence[ContextSpan]) -> list[ContextSpan]:
    """Document (best-ranked first), then position."""
    doc_rank: dict[str, int] = {}
    for s in spans:
        doc_rank[s.document_id] = min(doc_rank.get(s.document_id, s.rank), s.rank)
    return sorted(spans, key=lambda s: (doc_rank[s.document_id], s.document_id, s.start_char))


def document_records(
    hits: Sequence[Hit], stores: Sequence[ChunkSearch] = (), filter: SearchFilter | None = None
) -> dict[str, StoredChunk]:
    """For each hit's document, a stored chunk of it that carries what the store keeps beside the chunks
    (`StoredChunk.extra`: Qdrant's title, source ID and path; `.title` reads them), by document.

    A hit's own record is used first; a document whose hit came from a store that keeps no such fields
    (BM25) is looked up, by one of its chunks, in the other `stores` (under the search's `filter`). A
    document no store describes is absent."""
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
        for chunk in store.get_chunks(missing, filter=filter).values():
            if chunk.title:
                records.setdefault(chunk.document_id, chunk)
    return records
