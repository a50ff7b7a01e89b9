"""A store that is down, told apart from a document a store refused.

A write that fails because the store's server does not answer (connection refused, reset or timed out)
after the write task's retries will fail the same way for every later batch: the run stops at once
(`unichunk.engine.run_stop`) instead of embedding and retrying the rest of its list document by
document. A document the store refused (bad data, a constraint) fails alone as before.

The client libraries raise their own types, none derived from the builtin `ConnectionError`: redis-py
(FalkorDB), the Neo4j driver, httpx (under qdrant-client, which wraps it). They are looked up only when
already imported, never imported here; the cause chain is walked, since the sinks wrap the client's error
in a `SinkError` naming the store.
"""

from __future__ import annotations

import re
import sys

from unichunk.sinks.base import SinkError

# module -> the names of its exception types that mean "the server did not answer"
_CLIENT_ERRORS: dict[str, tuple[str, ...]] = {
    "redis.exceptions": ("ConnectionError", "TimeoutError"),
    "neo4j.exceptions": ("ServiceUnavailable", "SessionExpired"),
    "httpx": ("NetworkError", "TimeoutException"),
}
# `scheme://user:password@` in a client's message: the password is hidden before it is shown anywhere
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@", re.IGNORECASE)


def _client_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module_name, names in _CLIENT_ERRORS.items():
        module = sys.modules.get(module_name)
        found.extend(getattr(module, name) for name in names if module is not None and hasattr(module, name))
    return tuple(found)


def unreachable(exc: BaseException) -> BaseException | None:
    """The error in `exc`'s cause chain (`exc` itself included) that says the store's server did not
    answer; None when none does (the store refused what it was given)."""
    kinds = _client_errors()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return current
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


def hide_passwords(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it shown as `***`."""
    return _URL_PASSWORD.sub(r"\1***@", text)


class StoreUnreachable(SinkError):
    """A store's server stopped answering during a run: the run stopped taking batches (what it stored is
    consistent, the failed batch undone), and the next run retries the documents it did not store."""

    def __init__(self, sink: str, message: str) -> None:
        super().__init__(sink, message)
        self.message = message

    @classmethod
    def of(cls, sink: str, location: str | None, cause: BaseException) -> StoreUnreachable:
        """The error for `sink` at `location` (`Sink.location`), `cause` the client's own error."""
        lines = str(cause).strip().splitlines()
        said = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
        where = f" at {location}" if location else ""
        return cls(
            sink,
            hide_passwords(
                f"store unreachable{where} ({said}); the run stopped, the next run retries the documents "
                "it did not store"
            ),
        )

    def __reduce__(self) -> tuple[object, ...]:  # picklable (a served run's result)
        return (type(self), (self.sink, self.message))
