"""The LlamaIndex adapter with the real library: unichunk's chunks as nodes (exact offsets, unichunk chunk
IDs, through an `IngestionPipeline`) and `Pipeline.search` as a retriever over a real index."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from documents import write_files
from llama_index.core import SimpleDirectoryReader
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import BaseNode, Document, MetadataMode, TextNode
from llama_index.core.vector_stores.utils import node_to_metadata_dict

from unichunk import Pipeline
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.loaders import load_bytes
from unichunk.chunking.models import Document as UnichunkDocument
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.sources import default_source_name
from unichunk.integrations.llama_index import UnichunkNodeParser, UnichunkRetriever, unichunk_document

GUIDE = (
    "# Guide\n\nQdrant stores vectors for semantic search.\n\n"
    "## Setup\n\nInstall Prefect and run the flow.\n\n"
    "### Check\n\nRun the tests before you ship.\n"
)
PARAGRAPH = "The pump starts when the pressure drops below two bar. The valve then closes. " * 3
REPEATED = "\n\n".join([PARAGRAPH] * 12 + ["A different closing paragraph."])
CORPUS = {
    "guide.md": GUIDE,
    "notes/plain.txt": "BM25 ranks chunks by keyword overlap. Alice maintains the keyword index in Berlin.\n",
    "notes/page.html": "<html><body><h1>Graphs</h1><p>Neo4j and FalkorDB hold entities and relations.</p></body></html>",
}


def _text_nodes(nodes: list[BaseNode]) -> list[TextNode]:
    assert all(isinstance(n, TextNode) for n in nodes)
    return [n for n in nodes if isinstance(n, TextNode)]


def _assert_exact(nodes: list[TextNode], text: str) -> None:
    for node in nodes:
        assert node.start_char_idx is not None and node.end_char_idx is not None
        assert text[node.start_char_idx : node.end_char_idx] == node.text


def test_markdown_nodes_are_unichunks_chunks_with_exact_offsets_and_headings() -> None:
    document = Document(text=GUIDE, metadata={"file_path": "/docs/guide.md", "file_name": "guide.md"})
    nodes = _text_nodes(UnichunkNodeParser().get_nodes_from_documents([document]))

    same = UnichunkDocument(
        text=GUIDE, source_system="llama_index", source_id="/docs/guide.md", mime_type="text/markdown"
    )
    chunks = ChunkingService().chunk(same, ChunkStrategy())
    assert [n.node_id for n in nodes] == [c.chunk_id for c in chunks]
    assert [n.metadata["heading_chain"] for n in nodes] == [
        ["Guide"],
        ["Guide", "Setup"],
        ["Guide", "Setup", "Check"],
    ]
    _assert_exact(nodes, GUIDE)
    assert [(n.start_char_idx, n.end_char_idx) for n in nodes] == [(c.start_char, c.end_char) for c in chunks]
    first = nodes[0]
    assert first.metadata["file_name"] == "guide.md"  # the source document's metadata travels along
    assert first.metadata["document_id"] == same.document_id
    assert [n.metadata["chunk_index"] for n in nodes] == [0, 1, 2]
    assert first.ref_doc_id == document.doc_id
    assert nodes[1].prev_node is not None and nodes[1].prev_node.node_id == first.node_id
    assert nodes[1].next_node is not None and nodes[1].next_node.node_id == nodes[2].node_id
    # the heading chain reaches the embedded text; IDs do not
    embedded = nodes[1].get_content(metadata_mode=MetadataMode.EMBED)
    assert "heading_chain: ['Guide', 'Setup']" in embedded
    assert "document_id" not in embedded and "chunk_index" not in embedded
    # parsing again gives the same nodes
    again = UnichunkNodeParser().get_nodes_from_documents([document])
    assert [n.node_id for n in again] == [n.node_id for n in nodes]


def test_offsets_stay_exact_where_text_find_would_land_on_an_earlier_copy() -> None:
    document = Document(text=REPEATED, metadata={"file_name": "pump.txt"})
    parser = UnichunkNodeParser(strategy=ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=32))
    nodes = _text_nodes(parser.get_nodes_from_documents([document]))
    assert len(nodes) > 3
    _assert_exact(nodes, REPEATED)
    chunks = ChunkingService().chunk(unichunk_document(document), parser.strategy)
    assert [(n.start_char_idx, n.end_char_idx) for n in nodes] == [(c.start_char, c.end_char) for c in chunks]

    # LlamaIndex's own post-processing alone (text.find from the previous start) gets these wrong
    copies = [n.model_copy(deep=True) for n in nodes]
    NodeParser._postprocess_parsed_nodes(parser, list(copies), {document.doc_id: document})
    assert [(c.start_char_idx, c.end_char_idx) for c in copies] != [
        (n.start_char_idx, n.end_char_idx) for n in nodes
    ]


def test_a_real_ingestion_pipeline_run_and_a_directory_reader(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text(GUIDE)
    (tmp_path / "pump.txt").write_text(REPEATED)
    documents = SimpleDirectoryReader(str(tmp_path), filename_as_id=True).load_data()
    by_name = {d.metadata["file_name"]: d for d in documents}
    assert by_name["guide.md"].metadata["file_type"] == "text/markdown"

    nodes = _text_nodes(
        list(IngestionPipeline(transformations=[UnichunkNodeParser()]).run(documents=documents))
    )
    for name, document in by_name.items():
        own = [n for n in nodes if n.ref_doc_id == document.doc_id]
        assert own, name
        _assert_exact(own, document.text)
        expected = ChunkingService().chunk(unichunk_document(document), ChunkStrategy())
        assert [n.node_id for n in own] == [c.chunk_id for c in expected]
    guide = [n for n in nodes if n.metadata["file_name"] == "guide.md"]
    assert guide[-1].metadata["heading_chain"] == ["Guide", "Setup", "Check"]  # markdown by file_type


def test_nodes_of_nodes_hash_ids_and_flat_metadata() -> None:
    piece = TextNode(id_="piece-1", text=GUIDE)
    nodes = _text_nodes(UnichunkNodeParser().get_nodes_from_documents([piece]))  # type: ignore[list-item]
    assert {n.metadata["document_id"] for n in nodes} == {
        derive_document_id(source_system="llama_index", source_id="piece-1")
    }
    assert all(n.ref_doc_id == "piece-1" for n in nodes)

    hashed = _text_nodes(
        UnichunkNodeParser(source_system=None).get_nodes_from_documents([Document(text=GUIDE)])
    )
    assert hashed[0].metadata["document_id"] == UnichunkDocument(text=GUIDE).document_id  # art_<sha8>

    flat = UnichunkNodeParser(flat_metadata=True).get_nodes_from_documents([Document(text=GUIDE, id_="g.md")])
    assert flat[-1].metadata["heading_chain"] == "Guide > Setup > Check"
    node_to_metadata_dict(flat[-1], flat_metadata=True)  # what Chroma, Pinecone... require: no error
    assert UnichunkNodeParser().get_nodes_from_documents([Document(text=" \n")]) == []


def test_retriever_refuses_k_below_one_before_opening_anything() -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        UnichunkRetriever(k=0)


def test_retriever_over_a_real_index(pipeline_env: Path, tmp_path: Path) -> None:
    corpus = write_files(tmp_path / "corpus", CORPUS)
    source = default_source_name(corpus)
    with Pipeline() as p:
        assert p.ingest(corpus).failed == []
        retriever = UnichunkRetriever(pipeline=p, k=3)

        found = retriever.retrieve("who maintains the keyword index")
        top = found[0]
        assert top.node.ref_doc_id == derive_document_id(source_system=source, source_id="notes/plain.txt")
        assert top.node.metadata["document_id"] == top.node.ref_doc_id
        # what an app needs to cite the file: the source, the ID in it and the path
        assert top.node.metadata["source_system"] == source
        assert top.node.metadata["source_id"] == "notes/plain.txt"
        assert top.node.metadata["path"] == str((corpus / "notes/plain.txt").resolve())
        node = top.node
        assert isinstance(node, TextNode) and node.start_char_idx is not None
        assert CORPUS["notes/plain.txt"][node.start_char_idx : node.end_char_idx] == node.text
        search = p.search("who maintains the keyword index", k=3)
        assert [n.node.node_id for n in found] == [h.chunk_id for h in search.hits]
        assert [n.score for n in found] == [h.score for h in search.hits]
        assert set(node.metadata["ranks"]) == {"keywords", "vectors"}

        setup = retriever.retrieve("install prefect and run the flow")[0].node
        assert isinstance(setup, TextNode) and setup.start_char_idx is not None
        assert setup.metadata["heading_chain"] == ["Guide", "Setup"]
        assert setup.metadata["title"] == "Guide"
        assert GUIDE[setup.start_char_idx : setup.end_char_idx] == setup.text
        html = load_bytes(CORPUS["notes/page.html"].encode(), "page.html")  # offsets: the extracted text
        graphs = asyncio.run(retriever.aretrieve("which databases hold entities")).pop(0).node
        assert isinstance(graphs, TextNode) and graphs.start_char_idx is not None
        assert html.text[graphs.start_char_idx : graphs.end_char_idx] == graphs.text

        guide_id = derive_document_id(source_system=source, source_id="guide.md")
        only = UnichunkRetriever(pipeline=p, k=5, mode="keywords", document_ids=[guide_id])
        assert {n.node.ref_doc_id for n in only.retrieve("keyword index prefect")} == {guide_id}

        # the parser, keyed like the pipeline's scan, gives the very chunk IDs the stores hold
        parser = UnichunkNodeParser(source_system=source)
        nodes = parser.get_nodes_from_documents([Document(text=GUIDE, id_="guide.md")])
        assert [c.chunk_id for c in p.get_chunks([n.node_id for n in nodes])] == [n.node_id for n in nodes]
