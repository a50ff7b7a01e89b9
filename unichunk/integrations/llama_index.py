"""unichunk inside LlamaIndex: its chunks as nodes, its search as a retriever.

`UnichunkNodeParser` is a `NodeParser`: put it in an `IngestionPipeline` (or call it on documents) and each
document is cut by unichunk's `ChunkingService`, the same code and settings the pipeline's stores use. So a
node's ID is the unichunk chunk ID (deterministic: the same document parsed twice gives the same nodes) and
its `start_char_idx`/`end_char_idx` are exact: `document.text[start:end] == node.text`, always.

`UnichunkRetriever` answers with `Pipeline.search` (BM25 and vectors fused, over an index unichunk built):
one `NodeWithScore` per hit, the node carrying the chunk ID, exact offsets, heading chain and each
retriever's rank and score.

Needs llama-index-core (`pip install "unichunk[llama-index]"`; unichunk already depends on it for its
tokenizer files). `Pipeline` is fetched from `unichunk` only when a retriever builds one, so parsing never
pays for importing Prefect.
"""

from __future__ import annotations

import asyncio
import mimetypes
from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks import CallbackManager
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import (
    DEFAULT_TEXT_NODE_TMPL,
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    ObjectType,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.schema import Document as LlamaDocument
from llama_index.core.utils import get_tqdm_iterable

import unichunk
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.service import shared_service
from unichunk.retrieval.ranking import Mode
from unichunk.retrieval.results import SearchHit

if TYPE_CHECKING:
    from unichunk.access import Principal
    from unichunk.pipeline import Pipeline

DEFAULT_SOURCE_SYSTEM = "llama_index"
# Identifiers, not content: kept out of the text LlamaIndex embeds and shows the LLM.
_ID_KEYS = ("document_id", "chunk_index")
_HIT_ID_KEYS = ("document_id", "source_system", "path", "rank", "ranks", "scores")


class UnichunkNodeParser(NodeParser):
    """Cuts each node's text with unichunk's chunking (`strategy`, default `auto`: heading-aware for
    Markdown, sentence-packed for text) into `TextNode`s whose IDs are unichunk chunk IDs.

    Offsets are into the text of the node given to the parser. Each node's metadata holds the source
    node's metadata (when `include_metadata`) plus `heading_chain`, `document_id` (unichunk's) and
    `chunk_index`; the two IDs are excluded from the embedded and LLM text, the heading chain is not (it
    is the context unichunk itself embeds with a chunk). The base class's `id_func` is not used: a node's
    ID is its chunk ID, so re-parsing a document gives the same IDs. Sizes are unichunk's token sizes;
    metadata text is not subtracted from them as LlamaIndex's metadata-aware splitters do.

    Caveat: LlamaIndex vector stores overwrite a top-level `document_id` in the payload they store with the
    node's `ref_doc_id` (the node itself, restored from that payload, keeps ours).
    """

    strategy: ChunkStrategy = Field(
        default_factory=ChunkStrategy,
        description="unichunk chunking settings (default: UNICHUNK_CHUNK_* variables, else `auto`).",
    )
    source_system: str | None = Field(
        default=DEFAULT_SOURCE_SYSTEM,
        description=(
            "Source name in unichunk document IDs (`source_system:source_id`, source_id from file_path, "
            "file_name or the node ID); None: IDs from the text's hash instead."
        ),
    )
    flat_metadata: bool = Field(
        default=False,
        description="Store heading_chain as one ' > '-joined string, for vector stores that accept only "
        "str/int/float metadata values (Chroma, Pinecone, ...).",
    )

    @classmethod
    def class_name(cls) -> str:
        return "UnichunkNodeParser"

    def _parse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> list[BaseNode]:
        parsed: list[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Chunking with unichunk"):
            parsed.extend(self._nodes_of(node))
        return parsed

    def _postprocess_parsed_nodes(
        self, nodes: list[BaseNode], parent_doc_map: dict[str, LlamaDocument]
    ) -> list[BaseNode]:
        """The base class's relationships and metadata merge, then our offsets back: it re-derives them
        with `text.find(node_text)`, which lands on an earlier copy of a repeated passage."""
        exact = {
            node.node_id: (node.start_char_idx, node.end_char_idx)
            for node in nodes
            if isinstance(node, TextNode)
        }
        nodes = super()._postprocess_parsed_nodes(nodes, parent_doc_map)
        for node in nodes:
            if isinstance(node, TextNode) and node.node_id in exact:
                node.start_char_idx, node.end_char_idx = exact[node.node_id]
        return nodes

    def _nodes_of(self, source: BaseNode) -> list[TextNode]:
        document = unichunk_document(source, self.source_system)
        chunks = shared_service().chunk(document, self.strategy)
        if not chunks:
            return []
        relation = source.as_related_node_info()  # hashes the whole text: once per source, not per chunk
        inherited = dict(source.metadata) if self.include_metadata else {}
        return [self._node(chunk, source, relation, inherited) for chunk in chunks]

    def _node(
        self, chunk: Chunk, source: BaseNode, relation: RelatedNodeInfo, inherited: dict[str, Any]
    ) -> TextNode:
        headings = " > ".join(chunk.heading_chain) if self.flat_metadata else list(chunk.heading_chain)
        return TextNode(
            id_=chunk.chunk_id,
            text=chunk.content,
            start_char_idx=chunk.start_char,
            end_char_idx=chunk.end_char,
            metadata={
                **inherited,
                "heading_chain": headings,
                "document_id": chunk.document_id,
                "chunk_index": chunk.chunk_index,
            },
            excluded_embed_metadata_keys=_with(source.excluded_embed_metadata_keys, _ID_KEYS),
            excluded_llm_metadata_keys=_with(source.excluded_llm_metadata_keys, _ID_KEYS),
            metadata_template=source.metadata_template,
            metadata_separator=source.metadata_separator,
            text_template=getattr(source, "text_template", DEFAULT_TEXT_NODE_TMPL),
            relationships={NodeRelationship.SOURCE: relation},
        )


def unichunk_document(node: BaseNode, source_system: str | None = DEFAULT_SOURCE_SYSTEM) -> Document:
    """The unichunk `Document` a LlamaIndex node is chunked as (public, so callers can compare IDs).

    A LlamaIndex `Document` read from a file is keyed by its `file_path` (else `file_name`), with
    `#page=<page_label>` when a reader split the file into pages, so each page gets its own ID; any other
    node by its node ID (LlamaIndex makes random ones unless told otherwise, e.g. `filename_as_id`: pass
    `source_system=None` for IDs from the text's hash). The mime type comes from `file_type`, else the file
    extension, so Markdown gets heading-aware chunking under `auto`.
    """
    metadata = node.metadata
    file = _text(metadata, "file_path") or _text(metadata, "file_name")
    source_id = node.node_id
    if isinstance(node, LlamaDocument) and file:
        page = metadata.get("page_label")
        source_id = file if page is None else f"{file}#page={page}"
    return Document(
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        source_system=source_system,
        source_id=source_id,
        title=_text(metadata, "title"),
        path=file,
        mime_type=_text(metadata, "file_type") or _guess_mime(file),
    )


class UnichunkRetriever(BaseRetriever):
    """LlamaIndex retriever over `Pipeline.search`: the `k` best chunks of a unichunk index.

    Each `NodeWithScore` holds a `TextNode` with the chunk ID as `id_`, the chunk text, its exact
    offsets in its document, a SOURCE relationship to the unichunk document ID, and metadata
    `document_id`, `title`, `source_system`, `source_id` and `path` (to cite the file), `heading_chain`,
    `rank`, `ranks` and `scores` (per retriever); the score is the
    fused score (hybrid) or the single retriever's. Without `pipeline`, one is built from the
    `UNICHUNK_*` settings; call `retriever.pipeline.close()` when done (a local-mode Qdrant folder admits
    one client at a time). `principal`, or `token` (from `unichunk tokens create`): whom it searches as,
    seeing only what that caller may read (default: the Pipeline's own principal, the owner).
    """

    def __init__(
        self,
        pipeline: Pipeline | None = None,
        *,
        k: int = 5,
        mode: Mode = "hybrid",
        document_ids: Sequence[str] | None = None,
        principal: Principal | None = None,
        token: str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        opened: Pipeline = pipeline if pipeline is not None else unichunk.Pipeline()
        who = principal if token is None else unichunk.Tokens.caller(opened.settings, principal, token)
        self.pipeline: Pipeline = opened.scoped(who) if who is not None else opened
        self.k = k
        self.mode: Mode = mode
        self.document_ids = list(document_ids) if document_ids else None

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # hits only: the assembled context and graph context a search can add are not asked for
        result = self.pipeline.search(
            query_bundle.query_str,
            self.k,
            mode=self.mode,
            document_ids=self.document_ids,
            expand=False,
            graph=False,
        )
        return [NodeWithScore(node=hit_node(hit), score=hit.score) for hit in result.hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """In a worker thread: a search embeds the query and reads the stores, blocking calls."""
        return await asyncio.to_thread(self._retrieve, query_bundle)


def hit_node(hit: SearchHit) -> TextNode:
    """One search hit as a `TextNode` (see `UnichunkRetriever`)."""
    hidden = _with([], _HIT_ID_KEYS if hit.title is not None else (*_HIT_ID_KEYS, "title"))
    return TextNode(
        id_=hit.chunk_id,
        text=hit.content,
        start_char_idx=hit.start_char,
        end_char_idx=hit.end_char,
        metadata={
            "document_id": hit.document_id,
            "title": hit.title,
            "source_system": hit.source_system,
            "source_id": hit.source_id,
            "path": hit.path,
            "heading_chain": list(hit.heading_chain),
            "rank": hit.rank,
            "ranks": dict(hit.ranks),
            "scores": dict(hit.scores),
        },
        excluded_embed_metadata_keys=hidden,
        excluded_llm_metadata_keys=list(hidden),
        relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id=hit.document_id, node_type=ObjectType.DOCUMENT)
        },
    )


def _with(keys: Sequence[str], extra: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*keys, *extra]))


def _guess_mime(file: str | None) -> str | None:
    return mimetypes.guess_type(PurePath(file).name)[0] if file else None


def _text(metadata: dict[str, Any], key: str) -> str | None:
    value = metadata.get(key)
    return value if isinstance(value, str) and value else None
