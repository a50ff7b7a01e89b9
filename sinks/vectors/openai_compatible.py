"""Embeddings from any server speaking the OpenAI `/embeddings` API: OpenAI, Ollama, vLLM, TEI.

Plain httpx rather than the `openai` SDK: the request is one POST, and owning the retry loop lets us
retry exactly what is transient (429, 5xx, connection errors, honouring Retry-After) and fail at once,
with the server's message, on anything else (bad key, unknown model), which no retry would fix.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import httpx

from chunking.tokenizer import TokenCounter
from sinks.metrics import EMBEDDER_SECONDS
from sinks.vectors.base import Embedder, EmbedderError

logger = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))
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
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = model
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._dimensions = dimensions
        self._probe_lock = threading.Lock()
        self._counter: TokenCounter | None = None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))

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
        self._http.close()

    @property
    def url(self) -> str:
        return f"{self.base_url}/embeddings"

    def _request(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        response = self._post_with_retries(body)
        try:
            data = sorted(response.json()["data"], key=lambda item: item.get("index", 0))
            vectors = [[float(x) for x in item["embedding"]] for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(f"{self.url} returned an unexpected body: {response.text[:300]!r}") from exc
        if len(vectors) != len(texts):
            raise EmbedderError(f"{self.url} returned {len(vectors)} embeddings for {len(texts)} inputs")
        return vectors

    def _post_with_retries(self, body: dict[str, Any]) -> httpx.Response:
        problem = ""
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                response = self._http.post(self.url, json=body)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    return response
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code not in _RETRYABLE_STATUS:
                    raise EmbedderError(
                        f"embedding request to {self.url} (model {self.model}) rejected, {problem}"
                    )
                retry_after = _parse_retry_after(response.headers.get("retry-after"))
            if attempt < self.max_retries:
                delay = retry_after if retry_after is not None else self.backoff * 2**attempt
                delay = min(self.max_backoff, delay) + random.uniform(0, self.backoff / 10)
                logger.warning(
                    "embedding request to %s failed (%s); retry %d in %.2fs",
                    self.url,
                    problem,
                    attempt + 1,
                    delay,
                )
                time.sleep(delay)
        raise EmbedderError(
            f"embedding request to {self.url} (model {self.model}) failed after {self.max_retries + 1} "
            f"attempts, last: {problem}"
        )


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header; HTTP-date forms are ignored (we fall back to backoff)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
