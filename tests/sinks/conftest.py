"""Graph-sink fixtures: one graph per test on the session's FalkorDB server, or on Neo4j when NEO4J_URI is set.

The graph tests run once per backend; the Neo4j run is skipped unless a server is given, because none can
run on this machine. Its database is wiped of Chunk/Entity/Document nodes around every test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest

from chunking.base import Span, chunks_from_spans
from chunking.models import Chunk, Document
from sinks.graph_backends import FalkorDBBackend, GraphBackend, Neo4jBackend

MakeDoc = Callable[..., tuple[Document, list[Chunk]]]


@pytest.fixture(params=["falkordb", "neo4j"])
def graph_backend(request: pytest.FixtureRequest) -> Iterator[GraphBackend]:
    if request.param == "falkordb":
        url = request.getfixturevalue("falkordb_url")
        backend: GraphBackend = FalkorDBBackend(url, f"test_{uuid.uuid4().hex[:12]}")
    else:
        uri = os.environ.get("NEO4J_URI")
        if not uri:
            pytest.skip(
                "NEO4J_URI is not set (no Neo4j server can run here); set it to run the suite on Neo4j"
            )
        backend = Neo4jBackend(
            uri,
            os.environ.get("NEO4J_USER", "neo4j"),
            os.environ.get("NEO4J_PASSWORD"),
            os.environ.get("NEO4J_DATABASE"),
        )
    backend.clear()
    yield backend
    backend.clear()
    backend.close()


def _make_doc(
    document_id: str, pieces: Sequence[str], title: str | None = None
) -> tuple[Document, list[Chunk]]:
    """A document whose chunks are exactly `pieces`, joined by one space, with real IDs and offsets."""
    document = Document(document_id=document_id, text=" ".join(pieces), title=title)
    spans, start = [], 0
    for piece in pieces:
        spans.append(Span(start, start + len(piece), token_count=len(piece.split())))
        start += len(piece) + 1
    return document, chunks_from_spans(document, spans)


@pytest.fixture
def make_doc() -> MakeDoc:
    return _make_doc
