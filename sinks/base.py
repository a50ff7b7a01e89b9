"""The interface every store implements, so the pipeline fans one set of chunks out to all of them.

Writes are two-phase: `prepare` computes everything a store needs (embeddings, BM25 terms, extracted
entities) and touches no store; `write` only stores what was prepared. The pipeline prepares for every
sink before writing to any, so a failure while computing writes nothing anywhere.

`write` replaces: for each document in the batch, the stored chunks become exactly the given ones (new
ones upserted first, then the document's other chunks removed, so readers never see it absent). Writing
the same batch twice leaves one copy. `delete` removes every trace of a document. Both are safe to re-run
after a crash half-way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from chunking.models import Chunk, Document

DocumentChunks = tuple[Document, Sequence[Chunk]]


class SinkError(Exception):
    """A store failed; `sink` names which one, so the pipeline can report and retry it."""

    def __init__(self, sink: str, message: str) -> None:
        super().__init__(f"[{sink}] {message}")
        self.sink = sink


@dataclass
class Prepared:
    """What one sink computed for a batch, ready to write. `payload` is private to that sink."""

    sink: str
    documents: list[Document]
    chunks: dict[str, list[Chunk]]  # document_id -> its chunks, in order
    payload: Any = None
    stats: dict[str, float] = field(default_factory=dict)  # e.g. {"truncated_chunks": 2}

    @property
    def chunk_count(self) -> int:
        return sum(len(c) for c in self.chunks.values())


@dataclass(frozen=True)
class ScoredChunk:
    """One search hit from any sink: identity, exact offsets, text, the sink's own score, extra payload."""

    chunk_id: str
    document_id: str
    score: float
    content: str
    start_char: int
    end_char: int
    heading_chain: tuple[str, ...]
    payload: dict[str, Any] = field(default_factory=dict)


class Sink(ABC):
    """A store of chunks keyed by the shared chunk IDs."""

    name: ClassVar[str]

    @abstractmethod
    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        """Compute everything needed to store `batch`; must not write to the store."""

    @abstractmethod
    def write(self, prepared: Prepared) -> int:
        """Store a prepared batch, replacing each document's previous chunks; returns chunks written."""

    @abstractmethod
    def delete(self, document_id: str) -> int:
        """Remove every trace of the document; returns how many chunks were removed (0 if absent)."""

    @abstractmethod
    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        """All stored chunk IDs, or those of one document."""

    @abstractmethod
    def drop(self) -> None:
        """Delete the whole store (collection, index file, graph): a retired index generation going away."""

    def upsert(self, document: Document, chunks: Sequence[Chunk]) -> int:
        """Prepare and write one document (the two phases in one call)."""
        return self.write(self.prepare([(document, chunks)]))

    def close(self) -> None:  # noqa: B027 - optional hook, most sinks hold a client to release
        """Release clients, files and locks."""

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def group_batch(batch: Sequence[DocumentChunks]) -> tuple[list[Document], dict[str, list[Chunk]]]:
    """Split a batch into its documents and a document_id -> chunks map, checking chunks belong to it."""
    documents: list[Document] = []
    chunks: dict[str, list[Chunk]] = {}
    for document, doc_chunks in batch:
        for chunk in doc_chunks:
            if chunk.document_id != document.document_id:
                raise ValueError(f"chunk {chunk.chunk_id} does not belong to document {document.document_id}")
        documents.append(document)
        chunks[document.document_id] = list(doc_chunks)
    return documents, chunks
