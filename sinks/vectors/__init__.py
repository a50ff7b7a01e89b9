"""The vector store (qdrant-edge embedded, or qdrant-client: local mode or a server) and the embedders that
feed it.

The names load on first use (`lazy_loader`): `unichunk.sinks.vectors.embedders` (what a run's fingerprint needs)
must not import qdrant_client, and neither must the qdrant-edge engine.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "base": ["Embedder", "EmbedderError"],
        "embedders": ["make_embedder"],
        "minilm": ["MiniLMEmbedder"],
        "openai_compatible": ["OpenAICompatibleEmbedder"],
        "qdrant": ["QdrantSink"],
        "qdrant_edge": ["EdgeQdrantSink"],
        "sink": ["VectorSink", "open_vector_sink", "point_id"],
    },
)
