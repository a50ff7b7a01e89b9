"""The one interface every chunking strategy implements.

A strategy only decides *where* to cut: it returns character spans of the document text. Turning spans
into `Chunk`s (content by slicing, exact token counts, deterministic IDs, dropping whitespace-only
pieces, checking order) happens here, once, so no strategy can break the offset invariant
`document.text[chunk.start_char:chunk.end_char] == chunk.content`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from unichunk.chunking.config import ChunkStrategy, default_strategy
from unichunk.chunking.ids import chunk_id_for_hash, sha256_hex
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.span_counts import span_counter
from unichunk.chunking.tokenizer import TokenCounter

# Texts -> one vector each: how a strategy that measures meaning (`semantic`) is handed the configured
# embedder without `chunking` importing it.
EmbedFunction = Callable[[list[str]], Sequence[Sequence[float]]]


@dataclass(frozen=True, slots=True)
class Span:
    """Where a strategy wants a chunk: `[start, end)` of the text, plus what it knows about it."""

    start: int
    end: int
    token_count: int | None = None  # exact count if the strategy measured it; else counted here
    heading_chain: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


class BaseChunker(ABC):
    """Subclasses set `name` and implement `spans`; `chunk` builds validated `Chunk`s from them."""

    name: ClassVar[str]

    def __init__(self, strategy: ChunkStrategy | None = None) -> None:
        self.strategy = strategy or default_strategy(self.name)  # type: ignore[arg-type]
        self.counter = TokenCounter(self.strategy.tokenizer)

    @abstractmethod
    def spans(self, text: str, document: Document) -> list[Span]:
        """Ordered spans of `text` to become chunks (they may overlap; they must not go backwards)."""

    def embedded_spans(self, text: str, document: Document, embed: EmbedFunction) -> list[Span]:
        """`spans`, for a strategy that measures text with `embed`; the others have no use for it."""
        return self.spans(text, document)

    def chunk(self, document: Document) -> list[Chunk]:
        return chunks_from_spans(
            document, self.spans(document.text, document), strategy=self.name, counter=self.counter
        )


def chunks_from_spans(
    document: Document,
    spans: Sequence[Span],
    *,
    strategy: str | None = None,
    counter: TokenCounter | None = None,
) -> list[Chunk]:
    """The one place spans become `Chunk`s: content sliced from the text, IDs, exact token counts.

    Whitespace-only spans are dropped and order is checked. Token counts missing from a span are measured
    with `counter` (cl100k_base by default). `strategy`, when given, is recorded in each chunk's metadata.
    Strategies reach it through `BaseChunker.chunk`; tests and benchmarks call it to cut chunks by hand.
    """
    text = document.text
    kept: list[Span] = []
    contents: list[str] = []  # each span's text, sliced once (a slice is a copy)
    for span in spans:
        content = text[span.start : span.end]
        if content and not content.isspace():
            kept.append(span)
            contents.append(content)
    _check_order(kept, len(text), strategy or "explicit spans")
    missing = [i for i, s in enumerate(kept) if s.token_count is None]
    if missing:
        counter = counter or TokenCounter()
        if sum(len(contents[i]) for i in missing) > len(text) // 2:  # tokenizing the text once is cheaper
            counts = span_counter(text, counter).count_spans([(kept[i].start, kept[i].end) for i in missing])
        else:
            counts = counter.count_many([contents[i] for i in missing])
        counted = dict(zip(missing, counts, strict=True))
    chunks = []
    for index, (span, content) in enumerate(zip(kept, contents, strict=True)):
        digest = sha256_hex(content)
        metadata = {"strategy": strategy, **span.metadata} if strategy else dict(span.metadata)
        chunks.append(
            Chunk(
                chunk_id=chunk_id_for_hash(document.document_id, index, digest),
                document_id=document.document_id,
                chunk_index=index,
                content=content,
                start_char=span.start,
                end_char=span.end,
                token_count=span.token_count if span.token_count is not None else counted[index],
                content_hash=digest,
                heading_chain=span.heading_chain,
                metadata=metadata,
            )
        )
    return chunks


def _check_order(spans: list[Span], length: int, strategy: str) -> None:
    previous_start = previous_end = 0
    for span in spans:
        if span.start < previous_start or span.end < previous_end or span.end > length:
            raise AssertionError(
                f"strategy {strategy!r} produced out-of-order span [{span.start}, {span.end}) "
                f"after [{previous_start}, {previous_end}) in a text of {length} characters"
            )
        previous_start, previous_end = span.start, span.end
