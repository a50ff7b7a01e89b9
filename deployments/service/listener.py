"""The HTTP listeners' one set of rules, for the service (`unichunk serve`'s receiver) and the MCP server
over HTTP (`unichunk mcp --http`) alike: a listener beyond loopback needs UNICHUNK_API_TOKEN
(`unichunk.deployments.service.auth.listen_refusal`), and uvicorn reads request heads within the same limit.

Why 16 MiB for a head: h11's default, 16 KiB for the request line and headers, answers a longer
`/search?q=...` with 400 and closes with the rest unread, which the client sees as a connection reset, no
status; at 16 MiB even a 1 MB query of 4-byte characters, percent-encoded, reaches the app, which answers
422 with the reason (`unichunk.request_limits`); a longer head is refused by h11. Bodies are read by the
routes themselves within their own limits (`webhook_max_body`: 413; MCP: `MAX_MCP_BODY_BYTES`, enforced by
the MCP SDK's transport before it parses anything).
"""

from __future__ import annotations

from typing import Any

import uvicorn

from unichunk.deployments.service.auth import listen_refusal
from unichunk.errors import UsageError

MAX_REQUEST_HEAD_BYTES = 16 * 1024 * 1024
SERVER_LIMITS: dict[str, Any] = {"http": "h11", "h11_max_incomplete_event_size": MAX_REQUEST_HEAD_BYTES}
# A JSON-RPC message to the MCP tools carries a query (at most 2,000 characters), IDs and a path: 1 MiB is
# far beyond any of them, and a bigger body is a 413 before the SDK reads it into memory.
MAX_MCP_BODY_BYTES = 1024 * 1024


def listener(app: Any, host: str, port: int, *, log_level: str = "info") -> uvicorn.Server:
    """A uvicorn server for `app` on `host`:`port` with `SERVER_LIMITS`; `UsageError` (before anything
    listens) when `host` is beyond loopback and no UNICHUNK_API_TOKEN is set."""
    refusal = listen_refusal(host)
    if refusal:
        raise UsageError(refusal)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=True, **SERVER_LIMITS)
    return uvicorn.Server(config)
