"""The knowledge graph: its sink, its Cypher, the two servers it runs on, and the entity extractors.

The names load on first use (`lazy_loader`): `unichunk.sinks.graph.falkordb_server` (starting the embedded server)
must not import both graph clients.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "backends": ["FalkorDBBackend", "GraphBackend", "Neo4jBackend", "open_backend"],
        "extraction": ["EntityExtractor", "ExtractionError", "SpacyExtractor"],
        "llm_extraction": ["LLMExtractor"],
        "sink": ["KnowledgeGraphSink"],
    },
)
