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
    # How the vectors are computed ("torch", an ONNX variant, "http"): part of `fingerprint`, because two
    # backends of one model need not give the same vectors (a quantised one does not).
    backend: str = "python"

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
        """What makes a vector: model, size and backend. The embedding cache (`unichunk.sinks.result_cache`)
        keys vectors by it and the exact text, so another model, size or backend reuses nothing."""
        return f"{type(self).__qualname__}|{self.name}|{self.dimension}|{self.backend}"

    # Whether `embed_sums` works: the sink then composes each chunk's vector from its segments'
    # (`unichunk.chunking.segments`) instead of embedding overlapping chunks whole.
    composes: bool = False

    def embed_sums(self, texts: list[str]) -> list[list[float]]:
        """Per text, the sum of the model's token states over its word pieces, before pooling: for a
        mean-pooling model the normalised sum over a chunk's segments is the chunk's vector with each word
        piece read in its segment. Only where `composes`."""
        raise NotImplementedError(f"{type(self).__name__} returns pooled vectors only")

    def embed_query(self, text: str) -> list[float]:
        """Vector for a search query (symmetric models embed queries like documents)."""
        return self.embed([text])[0]

    def close(self) -> None:  # noqa: B027 - optional hook for embedders holding a client
        """Release HTTP clients or other resources."""
