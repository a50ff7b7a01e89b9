"""The LangChain adapter with the real library: `Pipeline.search` as a retriever over a real index, and
unichunk's chunks as LangChain documents with exact `start_index`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from documents import write_files
from langchain_core.documents import Document
from pydantic import ValidationError

from unichunk import Pipeline
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.models import Document as UnichunkDocument
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.sources import default_source_name
from unichunk.integrations.langchain import UnichunkRetriever, UnichunkTextSplitter, unichunk_document

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
}


def _assert_exact(pieces: list[Document], text: str) -> None:
    for piece in pieces:
        start = piece.metadata["start_index"]
        assert text[start : start + len(piece.page_content)] == piece.page_content


def test_splitter_pieces_are_unichunks_chunks_with_exact_start_index() -> None:
    source = Document(page_content=GUIDE, metadata={"source": "docs/guide.md", "author": "ann"})
    pieces = UnichunkTextSplitter().split_documents([source])

    same = UnichunkDocument(text=GUIDE, source_system="langchain", source_id="docs/guide.md")
    chunks = ChunkingService().chunk(same, ChunkStrategy())
    assert [p.id for p in pieces] == [c.chunk_id for c in chunks]
    assert [p.metadata["chunk_id"] for p in pieces] == [c.chunk_id for c in chunks]
    assert [p.metadata["heading_chain"] for p in pieces] == [
        ["Guide"],
        ["Guide", "Setup"],
        ["Guide", "Setup", "Check"],
    ]
    _assert_exact(pieces, GUIDE)
    assert all(p.metadata["author"] == "ann" for p in pieces)
    assert {p.metadata["document_id"] for p in pieces} == {same.document_id}

    # repeated paragraphs: start_index is the chunk's own offset, not the first copy text.find meets
    splitter = UnichunkTextSplitter(ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=32))
    repeated = splitter.create_documents([REPEATED], [{"source": "pump.txt"}])
    assert len(repeated) > 3
    _assert_exact(repeated, REPEATED)
    found = [REPEATED.find(p.page_content) for p in repeated]
    assert found != [p.metadata["start_index"] for p in repeated]
    assert splitter.split_text(REPEATED) == [p.page_content for p in repeated]
    assert list(
        splitter.transform_documents([Document(page_content=REPEATED, metadata={"source": "pump.txt"})])
    ) == (repeated)

    # pages of one file get their own IDs; no key at all: IDs from the text's hash
    pages = [Document(page_content=GUIDE, metadata={"source": "a.pdf", "page": n}) for n in (0, 1)]
    assert len({unichunk_document(p).document_id for p in pages}) == 2
    assert (
        unichunk_document(Document(page_content=GUIDE)).document_id
        == UnichunkDocument(text=GUIDE).document_id
    )


def test_retriever_refuses_k_below_one() -> None:
    with pytest.raises(ValidationError):
        UnichunkRetriever(pipeline=object(), k=0)


def test_retriever_over_a_real_index(pipeline_env: Path, tmp_path: Path) -> None:
    corpus = write_files(tmp_path / "corpus", CORPUS)
    source = default_source_name(corpus)
    with Pipeline() as p:
        assert p.ingest(corpus).failed == []
        retriever = UnichunkRetriever(pipeline=p, k=3)

        found = retriever.invoke("who maintains the keyword index")
        top = found[0]
        assert top.metadata["document_id"] == derive_document_id(
            source_system=source, source_id="notes/plain.txt"
        )
        # what an app needs to cite the file: the source, the ID in it and the path
        assert top.metadata["source_system"] == source and top.metadata["source_id"] == "notes/plain.txt"
        assert top.metadata["path"] == str((corpus / "notes/plain.txt").resolve())
        start, end = top.metadata["start_char"], top.metadata["end_char"]
        assert CORPUS["notes/plain.txt"][start:end] == top.page_content
        search = p.search("who maintains the keyword index", k=3)
        assert [d.id for d in found] == [h.chunk_id for h in search.hits]
        assert [d.metadata["chunk_id"] for d in found] == [h.chunk_id for h in search.hits]
        assert [d.metadata["score"] for d in found] == [h.score for h in search.hits]
        assert set(top.metadata["ranks"]) == {"keywords", "vectors"}

        setup = asyncio.run(retriever.ainvoke("install prefect and run the flow"))[0]
        assert setup.metadata["heading_chain"] == ["Guide", "Setup"]
        assert setup.metadata["title"] == "Guide"
        assert GUIDE[setup.metadata["start_char"] : setup.metadata["end_char"]] == setup.page_content

        guide_id = derive_document_id(source_system=source, source_id="guide.md")
        only = UnichunkRetriever(pipeline=p, k=5, mode="keywords", document_ids=[guide_id])
        assert {d.metadata["document_id"] for d in only.invoke("keyword index prefect")} == {guide_id}

        # the splitter, keyed like the pipeline's scan, gives the very chunk IDs the stores hold
        pieces = UnichunkTextSplitter(source_system=source).split_documents(
            [Document(page_content=GUIDE, metadata={"source": "guide.md"})]
        )
        ids = [d.id for d in pieces]
        assert [c.chunk_id for c in p.get_chunks(ids)] == ids  # type: ignore[arg-type]
