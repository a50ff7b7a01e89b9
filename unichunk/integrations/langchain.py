"""unichunk inside LangChain: its search as a retriever, its chunking as a document transformer.

`UnichunkRetriever` answers with `Pipeline.search` (BM25 and vectors fused, over an index unichunk built):
one `Document` per hit, `id` = the chunk ID, exact offsets and each retriever's rank in the metadata.

`UnichunkTextSplitter` cuts LangChain documents with unichunk's `ChunkingService` (heading-aware Markdown,
sentence-packed text). It is a `BaseDocumentTransformer` with the `split_text` / `create_documents` /
`split_documents` methods of LangChain's text splitters, not a subclass of theirs: that base lives in
another package (langchain-text-splitters) and re-derives `start_index` with `text.find`, which lands on an
earlier copy of a repeated passage. Here `start_index` is the chunk's own offset, always exact.

Needs langchain-core (`pip install "unichunk[langchain]"`). `Pipeline` is fetched from `unichunk` only when
a retriever builds one, so splitting never pays for importing Prefect.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentTransformer
from langchain_core.documents import Document as LangchainDocument
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, SecretStr

import unichunk
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.service import shared_service
from unichunk.retrieval.ranking import Mode
from unichunk.retrieval.results import SearchHit

DEFAULT_SOURCE_SYSTEM = "langchain"


def _new_pipeline() -> Any:
    return unichunk.Pipeline()


class UnichunkRetriever(BaseRetriever):
    """LangChain retriever over `Pipeline.search`: the `k` best chunks of a unichunk index.

    Each `Document` has `page_content` = the chunk text, `id` = its chunk ID and metadata `chunk_id`,
    `document_id`, `title`, `source_system`, `source_id` and `path` (to cite the file), `start_char`,
    `end_char` (exact: the document's text[start_char:end_char] is
    the content), `heading_chain`, `score` (fused for hybrid, else the single retriever's), `rank`,
    `ranks` and `scores` (per retriever). Without `pipeline`, one is built from the `UNICHUNK_*` settings;
    call `retriever.pipeline.close()` when done (a local-mode Qdrant folder admits one client at a time).
    """

    # Any, not Pipeline: naming the class here would import Prefect with this module (see the docstring)
    pipeline: Any = Field(default_factory=_new_pipeline, exclude=True, description="A unichunk Pipeline.")
    k: int = Field(default=5, ge=1, description="Chunks per query.")
    mode: Mode = Field(
        default="hybrid", description="hybrid (BM25 + vectors, fused), keywords, vectors or graph."
    )
    document_ids: list[str] | None = Field(default=None, description="Search only these documents.")
    principal: Any = Field(
        default=None, exclude=True, description="A `unichunk.access.Principal` to search as (see `token`)."
    )
    token: SecretStr | None = Field(
        default=None, exclude=True, description="An access token (`unichunk tokens create`) to search as."
    )

    def model_post_init(self, context: Any, /) -> None:
        """Scope the Pipeline to the caller `principal` or `token` names: it then reads only what that
        caller may read."""
        given = self.token.get_secret_value() if self.token is not None else None
        who = self.principal if given is None else unichunk.Tokens.caller(self.pipeline.settings, None, given)
        if who is not None:
            self.pipeline = self.pipeline.scoped(who)
            self.principal, self.token = who, None  # the token is not kept: its principal is what counts

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[LangchainDocument]:
        # hits only: the assembled context and graph context a search can add are not asked for
        result = self.pipeline.search(
            query, self.k, mode=self.mode, document_ids=self.document_ids, expand=False, graph=False
        )
        return [hit_document(hit) for hit in result.hits]


def hit_document(hit: SearchHit) -> LangchainDocument:
    """One search hit as a LangChain `Document` (see `UnichunkRetriever`)."""
    return LangchainDocument(
        id=hit.chunk_id,
        page_content=hit.content,
        metadata={
            "chunk_id": hit.chunk_id,
            "document_id": hit.document_id,
            "title": hit.title,
            "source_system": hit.source_system,
            "source_id": hit.source_id,
            "path": hit.path,
            "start_char": hit.start_char,
            "end_char": hit.end_char,
            "heading_chain": list(hit.heading_chain),
            "score": hit.score,
            "rank": hit.rank,
            "ranks": dict(hit.ranks),
            "scores": dict(hit.scores),
        },
    )


class UnichunkTextSplitter(BaseDocumentTransformer):
    """Splits LangChain documents into unichunk's chunks (`strategy`, default `auto`).

    Each piece keeps its document's metadata and adds `start_index` (exact offset into the document's
    text), `chunk_id` (also the piece's `id`), `document_id`, `chunk_index` and `heading_chain`. A document
    is keyed by its `id`, else its `source` metadata (with `#page=<page>` when a loader split a file into
    pages), in unichunk IDs `source_system:key`; with neither, or with `source_system=None`, IDs come from
    the text's hash. The `source` extension picks the chunking under `auto` (`.md`: by headings).
    """

    def __init__(
        self, strategy: ChunkStrategy | None = None, *, source_system: str | None = DEFAULT_SOURCE_SYSTEM
    ) -> None:
        self.strategy = strategy or ChunkStrategy()
        self.source_system = source_system

    def split_text(self, text: str) -> list[str]:
        """The chunk texts of `text` (a plain-text document without a source)."""
        return [chunk.content for chunk in self._chunks(LangchainDocument(page_content=text))]

    def create_documents(
        self, texts: Sequence[str], metadatas: Sequence[dict[str, Any]] | None = None
    ) -> list[LangchainDocument]:
        """Pieces of `texts`, each text with the metadata at the same position (if given)."""
        given = list(metadatas) if metadatas is not None else [{} for _ in texts]
        if len(given) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(given)} metadatas")
        return self.split_documents(
            LangchainDocument(page_content=text, metadata=dict(meta))
            for text, meta in zip(texts, given, strict=True)
        )

    def split_documents(self, documents: Iterable[LangchainDocument]) -> list[LangchainDocument]:
        """Pieces of every document, in order."""
        return [_piece(chunk, document) for document in documents for chunk in self._chunks(document)]

    def transform_documents(
        self, documents: Sequence[LangchainDocument], **kwargs: Any
    ) -> Sequence[LangchainDocument]:
        return self.split_documents(documents)

    def _chunks(self, document: LangchainDocument) -> list[Chunk]:
        return shared_service().chunk(unichunk_document(document, self.source_system), self.strategy)


def unichunk_document(
    document: LangchainDocument, source_system: str | None = DEFAULT_SOURCE_SYSTEM
) -> Document:
    """The unichunk `Document` a LangChain document is chunked as (see `UnichunkTextSplitter`)."""
    given = document.metadata.get("source")
    source = given if isinstance(given, str) and given else None
    page = document.metadata.get("page")
    key = document.id or (source if source is None or page is None else f"{source}#page={page}")
    return Document(
        text=document.page_content,
        source_system=source_system,
        source_id=key,
        path=source,
        mime_type=mimetypes.guess_type(PurePath(source).name)[0] if source else None,
    )


def _piece(chunk: Chunk, document: LangchainDocument) -> LangchainDocument:
    return LangchainDocument(
        id=chunk.chunk_id,
        page_content=chunk.content,
        metadata={
            **document.metadata,
            "start_index": chunk.start_char,
            "chunk_id": chunk.chunk_id,
            "document_id": chunk.document_id,
            "chunk_index": chunk.chunk_index,
            "heading_chain": list(chunk.heading_chain),
        },
    )
