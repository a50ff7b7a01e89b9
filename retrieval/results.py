"""What a search returns, as pydantic models: the CLI prints them, the HTTP API serves them as JSON.

One shape for every caller, so the CLI, `GET /search` and the benchmark can never disagree on what a hit
is. Offsets are exact: `document.text[start_char:end_char] == content` for every hit.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from unichunk.retrieval.ranking import Route
from unichunk.sinks.base import GraphEntity, GraphRelation


class SearchHit(BaseModel):
    """One ranked chunk: identity, exact offsets, fused score and each retriever's rank and raw score."""

    rank: int = Field(description="1-based position in the results.")
    chunk_id: str
    document_id: str
    title: str | None = Field(None, description="The document's title as the stores know it.")
    source_system: str | None = Field(None, description="The name of the document's source.")
    source_id: str | None = Field(
        None, description="The document's ID in its source (its path there), as the stores know it."
    )
    path: str | None = Field(
        None, description="The document's file, when it was read from one; shown to admins only."
    )
    start_char: int
    end_char: int
    score: float = Field(description="Fused RRF score (hybrid) or the single retriever's own score.")
    ranks: dict[str, int] = Field(default_factory=dict, description="Retriever -> 1-based rank.")
    scores: dict[str, float] = Field(default_factory=dict, description="Retriever -> raw score.")
    heading_chain: list[str] = Field(default_factory=list)
    content: str


class PassageResult(BaseModel):
    """A stretch of one of the top hits, ranked among the others (`unichunk.retrieval.passages`): a reader
    with room for a chunk or two takes these first. `document.text[start_char:end_char] == text`."""

    chunk_id: str = Field(description="The hit it is part of.")
    document_id: str
    start_char: int
    end_char: int
    score: float = Field(description="The hit's rank and the passage's own BM25, combined.")
    text: str


class ContextSpanResult(BaseModel):
    """One merged region of a document in the assembled context."""

    document_id: str
    title: str
    start_char: int
    end_char: int
    heading_chain: list[str]
    chunk_ids: list[str] = Field(description="Every chunk the span was merged from, hits and neighbours.")
    hit_chunk_ids: list[str] = Field(description="The retrieved chunks among them.")
    truncated: bool = Field(
        description="Holds only part of one of its chunks, to fit the token budget: cut at a sentence end, or "
        "only a hit's best passage."
    )
    text: str


class ContextResult(BaseModel):
    """The text a generator reads: hits with their neighbours, merged by offsets, within a token budget."""

    text: str
    tokens: int
    budget: int
    dropped_chunk_ids: list[str] = Field(default_factory=list, description="Hits the budget left out.")
    spans: list[ContextSpanResult] = Field(default_factory=list)


class GraphEntityResult(BaseModel):
    name: str = Field(description="Display name.")
    key: str = Field(description="Normalised name, the graph's key.")
    type: str
    description: str

    @classmethod
    def of(cls, entity: GraphEntity) -> GraphEntityResult:
        return cls(
            name=entity.display_name, key=entity.name, type=entity.type, description=entity.description
        )


class GraphRelationResult(BaseModel):
    source: str
    target: str
    keywords: str
    description: str
    weight: float
    source_chunk_ids: list[str]

    @classmethod
    def of(cls, relation: GraphRelation) -> GraphRelationResult:
        return cls(
            source=relation.source,
            target=relation.target,
            keywords=relation.keywords,
            description=relation.description,
            weight=relation.weight,
            source_chunk_ids=list(relation.source_chunk_ids),
        )


class GraphResult(BaseModel):
    entities: list[GraphEntityResult] = Field(default_factory=list)
    relations: list[GraphRelationResult] = Field(default_factory=list)


class SearchResult(BaseModel):
    """Everything one search found: ranked hits, how they were found, the context and the graph context."""

    query: str
    k: int
    route: Route = Field(description="Which retrievers answered (keywords-routed: BM25 alone, by threshold).")
    keyword_top_score: float | None = None
    hits: list[SearchHit] = Field(default_factory=list)
    passages: list[PassageResult] = Field(
        default_factory=list, description="The top hits' best stretches, best first (for a tight budget)."
    )
    context: ContextResult | None = None
    graph: GraphResult | None = None

    def preview(self, hit: SearchHit) -> str:
        """What to show of `hit`: its best passage without the blank lines around it (an ellipsis first
        when that is not the chunk's head), else its whole text. The CLI and the web UI show hits so."""
        passage = next((p for p in self.passages if p.chunk_id == hit.chunk_id), None)
        if passage is None or not passage.text.strip():
            return hit.content
        return ("… " if passage.start_char > hit.start_char else "") + passage.text.strip()


# --- one entity, explored (`unichunk entity`, `GET /entities/{name}`, the MCP tool `entity`) -------------


class EntitySourceResult(BaseModel):
    """One chunk an entity was learnt from."""

    chunk_id: str
    document_id: str
    title: str = Field("", description="The document's title as the graph knows it.")
    source_id: str | None = Field(None, description="The document's ID in its source, from its record.")
    written: str = Field(
        "", description="The name as this chunk wrote it ('' where it wrote only a form merged into it)."
    )


class EntityMergeResult(BaseModel):
    """Why, in one chunk, other spellings are this entity: resolution inside that chunk's document merged
    them (a surname after the full name, an acronym after its expansion, a title or possessive form)."""

    chunk_id: str
    document_id: str
    merged_from: list[str] = Field(
        description="The keys of the chunk's names that resolution took for this entity: a surname for the "
        "full name, an acronym for its expansion (with any title or possessive they were written with)."
    )
    variants: list[str] = Field(
        default_factory=list,
        description="The keys of the chunk's names that are this entity's name written another way (a "
        "leading article, a possessive, a title, dots): merged by normalisation, no decision taken.",
    )
    into: str = Field(description="The entity's key they were merged into.")


class EntityAliasResult(BaseModel):
    """Another entity the same name reaches across documents through the indexed alias, never merged
    with this one: a look-up link, not an identity."""

    name: str = Field(description="Display name.")
    key: str
    type: str
    via: str = Field(
        description="acronym, expansion, surname or full name: what the other one is to this one."
    )
    ambiguous: bool = Field(
        description="Several entities claim this link (two people of one surname, two expansions of one "
        "acronym): it may stand for any of them."
    )
    document_ids: list[str] = Field(default_factory=list)
    source_ids: list[str] = Field(
        default_factory=list, description="Those documents' IDs in their sources, from their records."
    )


class EntityDetailResult(BaseModel):
    """An entity as the graph holds it, with every chunk it was learnt from."""

    name: str = Field(description="Display name.")
    key: str = Field(description="Normalised name, the graph's key.")
    type: str
    description: str
    sources: list[EntitySourceResult] = Field(default_factory=list)


class EntityResult(BaseModel):
    """One entity looked up by name: what it is, where it was learnt, what else its name reaches, which
    spellings were merged into it and where, and its strongest relations. When the name reaches several
    entities only through their alias (a bare surname of two people), `entity` is None and `candidates`
    lists them: the graph cannot tell which is meant, and says so."""

    query: str
    matched_by: str = Field(description="name (the entity's key) or alias (its surname or acronym).")
    entity: EntityDetailResult | None = None
    candidates: list[EntityDetailResult] = Field(
        default_factory=list, description="The entities an ambiguous name reaches (then `entity` is None)."
    )
    also_known_as: list[EntityAliasResult] = Field(default_factory=list)
    merges: list[EntityMergeResult] = Field(default_factory=list)
    neighbours: list[GraphEntityResult] = Field(default_factory=list)
    relations: list[GraphRelationResult] = Field(default_factory=list)
