"""Embeddings from any server speaking the OpenAI `/embeddings` API: OpenAI, Ollama, vLLM, TEI.

The POST and its retries are `unichunk.sinks.openai_http`'s, shared with the LLM extractor: transient failures
(429, 5xx, connection errors) are retried with jitter, honouring Retry-After; anything else (bad key,
unknown model) fails at once with the server's message, which no retry would fix.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from unichunk.chunking.tokenizer import TokenCounter
from unichunk.sinks.metrics import EMBEDDER_SECONDS
from unichunk.sinks.openai_http import OpenAICompatibleClient, OpenAIHTTPError, RetryPolicy
from unichunk.sinks.vectors.base import Embedder, EmbedderError

_PROBE_TEXT = "dimension probe"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAICompatibleEmbedder(Embedder):
    """POSTs batches to `{base_url}/embeddings`; tokens counted with tiktoken cl100k (OpenAI's limit: 8191)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        *,
        max_tokens: int = 8191,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
    ) -> None:
        self.model = model
        self.name = model
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self._dimensions = dimensions
        self._probe_lock = threading.Lock()
        self._counter: TokenCounter | None = None
        self._client = OpenAICompatibleClient(
            base_url, api_key, timeout=timeout, policy=RetryPolicy(max_retries, backoff, max_backoff)
        )

    backend = "http"

    @property
    def fingerprint(self) -> str:
        """The endpoint, the model and the requested size (not probed: the model's own size is fixed), so
        the same model name served elsewhere (Ollama, vLLM) shares no cached vector with OpenAI's."""
        return f"openai|{self.url}|{self.model}|{self._dimensions or 'native'}"

    @property
    def dimension(self) -> int:
        """The configured size, else probed once with a one-text request."""
        with self._probe_lock:
            if self._dimensions is None:
                self._dimensions = len(self._request([_PROBE_TEXT])[0])
            return self._dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            started = time.perf_counter()
            vectors.extend(self._request(batch))
            EMBEDDER_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        if vectors and self._dimensions is not None and len(vectors[0]) != self._dimensions:
            raise EmbedderError(
                f"{self.url} returned {len(vectors[0])}-d vectors for {self.model}, expected {self._dimensions}"
            )
        return vectors

    def count_tokens(self, texts: list[str]) -> list[int]:
        if self._counter is None:
            self._counter = TokenCounter("cl100k_base")
        return self._counter.count_many(list(texts))

    def close(self) -> None:
        self._client.close()

    @property
    def url(self) -> str:
        return self._client.url("embeddings")

    def _request(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        try:
            answer = self._client.post("embeddings", body)
        except OpenAIHTTPError as exc:
            if exc.transient:
                raise EmbedderError(
                    f"embedding request to {self.url} (model {self.model}) failed after {exc.attempts} "
                    f"attempts, last: {exc.problem}"
                ) from exc
            raise EmbedderError(
                f"embedding request to {self.url} (model {self.model}) rejected, {exc.problem}"
            ) from exc
        try:
            data = sorted(answer["data"], key=lambda item: item.get("index", 0))
            vectors = [[float(x) for x in item["embedding"]] for item in data]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EmbedderError(f"{self.url} returned an unexpected body: {str(answer)[:300]!r}") from exc
        if len(vectors) != len(texts):
            raise EmbedderError(f"{self.url} returned {len(vectors)} embeddings for {len(texts)} inputs")
        return vectors
