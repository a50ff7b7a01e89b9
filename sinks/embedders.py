"""Text embedders for the vector sink: one interface, a local default and an OpenAI-compatible client.

The interface includes `count_tokens` with the model's own tokenizer because an embedder silently
truncates input longer than `max_tokens`; the sink measures every text first so it can report each
truncated chunk instead of quietly storing a vector of its first part only.

Implementations live in their own modules (`sinks.embedder_minilm`, `sinks.embedder_openai`) and are
imported lazily, so choosing the OpenAI embedder never imports torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sinks.config import SinkSettings
    from sinks.embedder_minilm import MiniLMEmbedder
    from sinks.embedder_openai import OpenAICompatibleEmbedder

__all__ = ["Embedder", "EmbedderError", "MiniLMEmbedder", "OpenAICompatibleEmbedder", "make_embedder"]

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


class EmbedderError(RuntimeError):
    """Embedding failed (model missing, endpoint refused or unreachable); the message says which."""


class Embedder(ABC):
    """Turns texts into fixed-size vectors; the sink's collection is sized by `dimension`."""

    name: str
    max_tokens: int

    @property
    @abstractmethod
    def dimension(self) -> int:
        """Length of every vector `embed` returns."""

    @abstractmethod
    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""

    @abstractmethod
    def count_tokens(self, texts: list[str]) -> list[int]:
        """Input length of each text as the model sees it (its own tokenizer, special tokens included)."""

    def embed_query(self, text: str) -> list[float]:
        """Vector for a search query (symmetric models embed queries like documents)."""
        return self.embed([text])[0]

    def close(self) -> None:  # noqa: B027 - optional hook for embedders holding a client
        """Release HTTP clients or other resources."""


def make_embedder(settings: SinkSettings) -> Embedder:
    """The embedder `settings.embedder` names, configured from the UNICHUNK_EMBEDDING_* settings."""
    if settings.embedder == "minilm":
        from sinks.embedder_minilm import MiniLMEmbedder

        return MiniLMEmbedder(batch_size=settings.embedding_batch_size)
    if settings.embedder == "openai":
        from sinks.embedder_openai import OpenAICompatibleEmbedder

        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        return OpenAICompatibleEmbedder(
            base_url=settings.embedding_base_url or OPENAI_DEFAULT_BASE_URL,
            model=settings.embedding_model,
            api_key=key,
            dimensions=settings.embedding_dimensions,
            batch_size=settings.embedding_batch_size,
        )
    raise ValueError(f"unknown embedder {settings.embedder!r} (expected 'minilm' or 'openai')")


def __getattr__(name: str) -> Any:
    """Lazy re-exports, so `from sinks.embedders import MiniLMEmbedder` works without importing torch early."""
    if name == "MiniLMEmbedder":
        from sinks.embedder_minilm import MiniLMEmbedder

        return MiniLMEmbedder
    if name == "OpenAICompatibleEmbedder":
        from sinks.embedder_openai import OpenAICompatibleEmbedder

        return OpenAICompatibleEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
