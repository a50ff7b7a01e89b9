"""What a request may ask, checked once for every door: the HTTP API, the MCP tools, the CLI, Python.

`Pipeline.search` applies `check_query` (and `Pipeline.entity` `check_entity_name`) before anything is opened, so a blank or oversized query is the
same `UsageError` everywhere: the API answers 422 with its text, the MCP tool an error, the CLI exit 2.
The doors may also state the limit in their own schemas (MCP, OpenAPI), from `MAX_QUERY_CHARS`.
"""

from __future__ import annotations

from unichunk.errors import UsageError

MAX_QUERY_CHARS = 2000  # a query longer than this is refused, not cut: a passage is no query
DEFAULT_LISTED, MAX_LISTED = 1000, 10_000  # documents on one page of a listing (`GET /documents`)


def check_query(query: str) -> str:
    """`query` as given, or a `UsageError` saying why it cannot be searched (blank, or too long)."""
    if not query.strip():
        raise UsageError("the query is blank: say what to look for")
    if len(query) > MAX_QUERY_CHARS:
        raise UsageError(f"the query is {len(query)} characters long; at most {MAX_QUERY_CHARS} are searched")
    return query


def check_entity_name(name: str) -> str:
    """`name` as given, or a `UsageError` (blank, or over `MAX_QUERY_CHARS`: no entity has such a name)."""
    if not name.strip():
        raise UsageError("the entity name is blank: say which entity")
    if len(name) > MAX_QUERY_CHARS:
        raise UsageError(
            f"the entity name is {len(name)} characters long; at most {MAX_QUERY_CHARS} are looked up"
        )
    return name
