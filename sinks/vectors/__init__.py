"""The vector store (Qdrant, local mode or a server) and the embedders that feed it."""

from sinks.vectors.base import Embedder, EmbedderError
from sinks.vectors.embedders import make_embedder
from sinks.vectors.minilm import MiniLMEmbedder
from sinks.vectors.openai_compatible import OpenAICompatibleEmbedder
from sinks.vectors.qdrant import QdrantSink, point_id

__all__ = [
    "Embedder",
    "EmbedderError",
    "MiniLMEmbedder",
    "OpenAICompatibleEmbedder",
    "QdrantSink",
    "make_embedder",
    "point_id",
]
