"""The embedder interface the vector sink depends on, and the error every embedder raises.

The interface includes `count_tokens` with the model's own tokenizer because an embedder silently
truncates input longer than `max_tokens`; the sink measures every text first so it can report each
truncated chunk instead of quietly storing a vector of its first part only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from unichunk.chunking.errors import UnichunkError


class EmbedderError(UnichunkError):
    """Embedding failed (model missing, endpoint refused or unreachable); the message says which. The vector
    sink reports it as its own `SinkError`."""


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

    @property
    def fingerprint(self) -> str:
        """Which vectors `embed` returns, stable across processes and runs: equal fingerprints give the
        same vectors for the same text (what an embedding cache may key by). By default the model name
        and dimension; `MiniLMEmbedder` adds its weights' hash and the int8 recipe where it runs one."""
        return f"{self.name}:{self.dimension}"

    def embed_query(self, text: str) -> list[float]:
        """Vector for a search query (symmetric models embed queries like documents)."""
        return self.embed([text])[0]

    def close(self) -> None:  # noqa: B027 - optional hook for embedders holding a client
        """Release HTTP clients or other resources."""
