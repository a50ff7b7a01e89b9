"""What the MCP tools take and return: argument types with the bounds an agent's call is checked against,
and the pydantic models the SDK publishes as each tool's output schema (`unichunk.deployments.mcp.server` serves
them)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from unichunk.interface import DocumentState, Mode
from unichunk.request_limits import MAX_QUERY_CHARS
from unichunk.settings import SOURCE_NAME_PATTERN

_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$"

ChunkId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        pattern=_ID_PATTERN,
        description="A chunk ID exactly as `search` returned it, e.g. 'doc_0123456789abcdef::chunk::000::...'.",
    ),
]
DocumentId = Annotated[
    str,
    Field(
        min_length=1, max_length=128, pattern=_ID_PATTERN, description="A document ID, e.g. 'doc_0123...'."
    ),
]
Query = Annotated[
    str,
    Field(
        min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for, in plain words (not blank)."
    ),
]
StateFilter = Annotated[
    DocumentState | None,
    Field(description="Only documents in this state: pending, processing, processed or failed."),
]
SourceFilter = Annotated[
    str | None,
    Field(min_length=1, max_length=256, description="Only this source's documents (a hit's source_system)."),
]
ListOffset = Annotated[
    int, Field(ge=0, description="Documents to skip: the next page starts at offset + limit.")
]
ListLimit = Annotated[
    int, Field(ge=1, le=1000, description="Documents on this page (1-1000); `total` counts all.")
]
TopK = Annotated[int, Field(ge=1, le=50, description="How many chunks to return (1-50).")]
DocumentFilter = Annotated[
    list[DocumentId] | None,
    Field(max_length=100, description="Search only these documents (IDs from earlier results or status)."),
]
Budget = Annotated[
    int,
    Field(
        ge=100,
        le=32000,
        description="Tokens of context text to return in all (the hits' surrounding passages), 100-32000.",
    ),
]
SearchMode = Annotated[
    Mode,
    Field(
        description="hybrid (default): keywords and meaning fused; keywords: exact terms, names, codes; "
        "vectors: meaning only, for paraphrases; graph: the passages the knowledge graph learnt the people, "
        "organisations and places the query names from."
    ),
]
FailedOnly = Annotated[
    bool, Field(description="Also list every failed document with its error (default: counts only).")
]
Radius = Annotated[int, Field(ge=0, le=5, description="Chunks to add on each side (0-5).")]
EntityName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description="An entity's name, any spelling ('IBM', 'Dr. Okafor', 'International Business Machines').",
    ),
]
Hops = Annotated[int, Field(ge=1, le=3, description="Relation steps out from the entity (1-3).")]
RelationLimit = Annotated[
    int, Field(ge=1, le=200, description="How many of its strongest relations (1-200).")
]
IngestPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="A folder or a file inside one of the allowed roots: absolute, or relative to a root.",
    ),
]
SourceName = Annotated[
    str,
    Field(
        pattern=SOURCE_NAME_PATTERN,
        description="Names the source, part of every document ID (letters, digits, '.', '_', '-'); default: "
        "derived from the folder, so the same folder keeps its IDs.",
    ),
]


# --- what the tools return ---------------------------------------------------------------------------------


class ChunkRef(BaseModel):
    """Where a chunk sits in its document."""

    chunk_id: str
    chunk_index: int = Field(description="0-based position of the chunk in its document.")
    start_char: int
    end_char: int
    heading_chain: list[str] = Field(default_factory=list, description="Section headings above the chunk.")


class ChunkOut(ChunkRef):
    """One stored chunk: `content` is exactly the document's text[start_char:end_char]."""

    document_id: str
    source_system: str | None = Field(None, description="The source (folder) the document came from.")
    source_id: str | None = Field(None, description="The document's path within its source.")
    title: str | None = None
    content: str


class SearchHitOut(BaseModel):
    """One ranked chunk with the passage around it."""

    rank: int = Field(description="1-based position in the results.")
    chunk_id: str
    document_id: str
    source_system: str | None = Field(None, description="The source (folder) the document came from.")
    source_id: str | None = Field(None, description="The document's path within its source.")
    title: str | None = None
    start_char: int
    end_char: int
    heading_chain: list[str] = Field(default_factory=list)
    score: float = Field(description="Fused score (hybrid) or the one retriever's score; higher is better.")
    ranks: dict[str, int] = Field(default_factory=dict, description="Retriever -> 1-based rank.")
    content: str = Field(description="The chunk's text, exactly text[start_char:end_char] of the document.")
    context: str | None = Field(
        None,
        description="The passage around the chunk (its neighbours merged in, '[CHUNK BOUNDARY]' between "
        "pieces). None when `context_in` names an earlier hit whose passage already holds this chunk, or "
        "when the token budget left it out.",
    )
    context_start: int | None = Field(None, description="Where `context` starts in the document.")
    context_end: int | None = Field(None, description="Where `context` ends in the document.")
    context_in: str | None = Field(None, description="The earlier hit whose `context` holds this chunk.")


class PassageOut(BaseModel):
    """A stretch of one of the top hits (a half of an overlapping window, say), ranked among the others."""

    chunk_id: str = Field(description="The hit it is part of.")
    document_id: str
    start_char: int
    end_char: int
    score: float = Field(description="The hit's rank and the passage's own keyword score, combined.")
    text: str = Field(description="Exactly text[start_char:end_char] of the document.")


class SearchOut(BaseModel):
    """The best chunks for a query, best first."""

    query: str
    mode: str
    route: str = Field(description="Which retrievers answered (keywords-routed: BM25 alone, by threshold).")
    hits: list[SearchHitOut] = Field(default_factory=list)
    passages: list[PassageOut] = Field(
        default_factory=list,
        description="The top three hits cut where their neighbouring chunks begin and end, best first: with "
        "room for little text, read these before the hits.",
    )
    context_tokens: int = Field(0, description="Tokens of all `context` texts together.")


class ContextOut(BaseModel):
    """A chunk and its neighbours, in document order, merged into one passage."""

    chunk_id: str = Field(description="The chunk asked for.")
    document_id: str
    source_system: str | None = None
    source_id: str | None = None
    start_char: int = Field(description="Where `text` starts in the document.")
    end_char: int = Field(description="Where `text` ends in the document.")
    text: str = Field(description="The merged passage; '[CHUNK BOUNDARY]' marks where stored chunks meet.")
    chunks: list[ChunkRef] = Field(description="The chunks merged, in document order.")
