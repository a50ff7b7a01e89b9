"""Pipeline fixtures: each test gets its own data dir and graph, against the session's real servers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import default_source_name

CORPUS = {
    "guide.md": "# Guide\n\nQdrant stores vectors for semantic search.\n\n## Setup\n\nInstall Prefect and run the flow.\n",
    "notes/plain.txt": "BM25 ranks chunks by keyword overlap. Alice maintains the keyword index in Berlin.\n",
    "notes/page.html": "<html><body><h1>Graphs</h1><p>Neo4j and FalkorDB hold entities and relations.</p></body></html>",
}


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "corpus"
    for rel, text in CORPUS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def doc_id(corpus) -> Callable[[str], str]:
    """The document ID of a file of `corpus` (source: the corpus folder's default name, path: `rel`)."""
    source = default_source_name(corpus)
    return lambda rel: derive_document_id(source_system=source, source_id=rel)


@pytest.fixture
def chunk_calls(monkeypatch) -> Counter:
    """Counts ChunkingService.chunk calls per document ID; the real service still does the work."""
    from unichunk.chunking.service import ChunkingService

    calls: Counter = Counter()
    real = ChunkingService.chunk

    def counting(self, document, strategy=None, embed=None):
        calls[document.document_id] += 1
        return real(self, document, strategy, embed)

    monkeypatch.setattr(ChunkingService, "chunk", counting)
    return calls
