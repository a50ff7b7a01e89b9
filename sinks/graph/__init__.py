"""The knowledge graph: its sink, its Cypher, the two servers it runs on, and the entity extractors."""

from sinks.graph.backends import FalkorDBBackend, GraphBackend, Neo4jBackend, open_backend
from sinks.graph.extraction import EntityExtractor, ExtractionError, SpacyExtractor
from sinks.graph.llm_extraction import LLMExtractor
from sinks.graph.sink import KnowledgeGraphSink

__all__ = [
    "EntityExtractor",
    "ExtractionError",
    "FalkorDBBackend",
    "GraphBackend",
    "KnowledgeGraphSink",
    "LLMExtractor",
    "Neo4jBackend",
    "SpacyExtractor",
    "open_backend",
]
