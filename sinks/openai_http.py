"""One HTTP client, with one retry policy, for every OpenAI-compatible server we call (embeddings, chat).

The embedder and the LLM extractor both POST through `OpenAICompatibleClient`, so they cannot drift apart.
Its retries are tenacity's: what is transient (408, 409, 429, 5xx, a transport error: refused, reset, timed
out) is retried with full-jitter exponential backoff, or after the server's Retry-After when it sends one;
anything else (a bad key, an unknown model) fails at once with the server's message, since no retry would
fix it.

Why not the `openai` SDK: it reads OPENAI_API_KEY, OPENAI_BASE_URL and more from the environment on its
own (variables our configuration table could not list) and brings a second HTTP stack, for what is one
POST per call here; tenacity is the small, well-kept library for exactly the retry part.
"""

from __future__ import annotations

import email.utils
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from unichunk.chunking.errors import UnichunkError

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class OpenAIHTTPError(UnichunkError):
    """One failed call. `transient` says whether retrying could help; `retry_after` is the server's hint."""

    def __init__(
        self, problem: str, *, transient: bool, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.transient = transient
        self.status = status
        self.retry_after = retry_after
        self.attempts = 1


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure (backoff doubles per attempt, full jitter)."""

    max_retries: int = 5
    backoff: float = 1.0
    max_backoff: float = 30.0


class OpenAICompatibleClient:
    """POSTs JSON to `{base_url}{path}` and returns the decoded answer, retrying what is transient.

    Thread-safe (httpx.Client is), so the extractor's worker threads share one connection pool.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy or RetryPolicy()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """The JSON answer of a successful POST; raises `OpenAIHTTPError` (its `attempts` set) otherwise."""
        policy = self.policy
        retrying = Retrying(
            stop=stop_after_attempt(policy.max_retries + 1),
            wait=_RetryAfterOrBackoff(policy),
            retry=retry_if_exception(lambda exc: isinstance(exc, OpenAIHTTPError) and exc.transient),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            return retrying(self._post_once, path, body)
        except OpenAIHTTPError as exc:
            exc.attempts = retrying.statistics.get("attempt_number", 1)
            raise

    def close(self) -> None:
        self._http.close()

    def _post_once(self, path: str, body: dict[str, Any]) -> Any:
        try:
            response = self._http.post(self.url(path), json=body)
        except httpx.TransportError as exc:
            raise OpenAIHTTPError(f"{type(exc).__name__}: {exc}", transient=True) from exc
        if not response.is_success:
            raise OpenAIHTTPError(
                f"HTTP {response.status_code}: {response.text[:300]}",
                transient=response.status_code in RETRYABLE_STATUS,
                status=response.status_code,
                retry_after=parse_retry_after(response.headers.get("retry-after")),
            )
        try:
            return response.json()
        except ValueError:
            raise OpenAIHTTPError(
                f"HTTP {response.status_code} but not JSON: {response.text[:300]!r}", transient=False
            ) from None

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        logger.warning(
            "request to %s failed (%s); retry %d in %.2fs",
            self.base_url,
            getattr(exc, "problem", exc),
            state.attempt_number,
            delay,
        )


class _RetryAfterOrBackoff:
    """tenacity wait: the server's Retry-After (capped at max_backoff) when given, else full-jitter backoff."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._max = policy.max_backoff
        self._backoff = wait_random_exponential(multiplier=policy.backoff, max=policy.max_backoff)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, OpenAIHTTPError) and exc.retry_after is not None:
            return min(self._max, exc.retry_after)
        return self._backoff(state)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header, in either of its forms (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
