"""Choose the configured embedder: the offline MiniLM default or an OpenAI-compatible endpoint.

Both implementation modules import cheaply (MiniLM loads its runtime and weights on first use, not on
import), so choosing the OpenAI embedder never loads torch.
"""

from __future__ import annotations

from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.base import Embedder
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.openai_compatible import OPENAI_DEFAULT_BASE_URL, OpenAICompatibleEmbedder


def make_embedder(settings: SinkSettings) -> Embedder:
    """The embedder `settings.embedder` names, configured from the UNICHUNK_EMBEDDING_* settings."""
    if settings.embedder == "openai":
        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        return OpenAICompatibleEmbedder(
            base_url=settings.embedding_base_url or OPENAI_DEFAULT_BASE_URL,
            model=settings.embedding_model,
            api_key=key,
            dimensions=settings.embedding_dimensions,
            batch_size=settings.embedding_batch_size,
            max_tokens=settings.embedding_max_tokens,
        )
    return MiniLMEmbedder(
        batch_size=settings.embedding_batch_size,
        model_batch_size=settings.embedding_model_batch_size,
        backend=settings.minilm_backend(),
        device=settings.device,
        cache_dir=settings.model_cache_dir,
        compiled=settings.embedding_compiled,
    )
