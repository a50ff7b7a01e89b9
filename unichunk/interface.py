"""The operations a caller may ask of an index, whoever carries them out: `unichunk.Pipeline` in this
process, or a running `unichunk serve` over HTTP (`unichunk.deployments.cli.service_client.ServiceClient`).

Both return the same types (`unichunk.results`), so an interface decides once which implementation to use
and then follows one code path: the CLI asks a running service for this data dir when there is one, else
works in-process, and renders what either returns the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack

from unichunk.index.document_states import State as DocumentState
from unichunk.retrieval.ranking import Mode

if TYPE_CHECKING:
    from unichunk.results import DocumentInfo, EntityResult, Generations, IndexStatus, SearchResult


class SearchArgs(TypedDict, total=False):
    """A search's options beside the query and `k`, as every implementation takes them."""

    mode: Mode  # hybrid (BM25 and vectors fused), keywords, vectors or graph (entities the query names)
    document_ids: Sequence[str] | None  # only these documents
    source: str | None  # only this source's documents
    expand: bool  # add each hit's neighbours to the assembled context
    graph: bool  # add what the knowledge graph knows of the hits


class IndexService(Protocol):
    """What both a `Pipeline` and a running service answer."""

    def search(self, query: str, k: int = 5, **options: Unpack[SearchArgs]) -> SearchResult:
        """The `k` best chunks for `query`, with the context assembled around them."""
        ...

    def entity(self, name: str, hops: int = 1, limit: int = 20) -> EntityResult:
        """What the knowledge graph holds of the entity `name` names. `NotFound` if it names none."""
        ...

    def status(self, *, failed_only: bool = False) -> IndexStatus:
        """The index generations and the live one's documents (only the failed ones if asked)."""
        ...

    def generations(self) -> Generations:
        """The index generations, the live one first."""
        ...

    def documents(
        self, *, state: DocumentState | None = None, source: str | None = None
    ) -> dict[str, DocumentInfo]:
        """The records of the documents the caller may read, by source and ID there (in `state`, of
        `source`, when given)."""
        ...

    def delete(self, document_id: str) -> dict[str, int]:
        """Remove one document from every store; chunks removed per store. `NotFound` if unknown."""
        ...

    def close(self) -> None:
        """Let go of what the implementation holds open."""
        ...
