"""Choose the configured embedder: the offline MiniLM default or an OpenAI-compatible endpoint.

Both implementation modules import cheaply (MiniLM loads torch and its weights on first use, not on
import), so choosing the OpenAI embedder never loads torch.
"""

from __future__ import annotations

from chunking.config import MINILM_MAX_TOKENS, MINILM_TOKENIZER, EmbeddingBudget
from sinks.config import SinkSettings
from sinks.vectors.base import Embedder
from sinks.vectors.minilm import MODEL_NAME as MINILM_MODEL_NAME
from sinks.vectors.minilm import MiniLMEmbedder
from sinks.vectors.openai_compatible import OPENAI_DEFAULT_BASE_URL, OpenAICompatibleEmbedder


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
        batch_size=settings.embedding_batch_size, model_batch_size=settings.embedding_model_batch_size
    )


def embedding_budget(settings: SinkSettings) -> EmbeddingBudget:
    """The input limit of the configured embedder, counted as it counts (`OpenAICompatibleEmbedder` and
    `MiniLMEmbedder.count_tokens`): what `auto` fits its chunks to. Known without opening the embedder."""
    if settings.embedder == "openai":
        return EmbeddingBudget(max_tokens=settings.embedding_max_tokens, tokenizer="cl100k_base")
    return EmbeddingBudget(max_tokens=MINILM_MAX_TOKENS, tokenizer=MINILM_TOKENIZER)


def embedder_identity(settings: SinkSettings) -> str:
    """Which model the configured embedder is, as the `semantic` strategy records it
    (`ChunkStrategy.semantic_model`): boundaries measured by another model are other chunks."""
    if settings.embedder == "openai":
        return f"openai:{settings.embedding_model}:{settings.embedding_dimensions or ''}"
    return MINILM_MODEL_NAME
