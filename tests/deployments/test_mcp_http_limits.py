"""The MCP server over HTTP keeps the service's listener rules (`unichunk.deployments.service.listener`), on a
real uvicorn listener built exactly as `unichunk mcp --http` builds it: a body over `MAX_MCP_BODY_BYTES` is
a 413 whatever its size past the limit, one within it reaches the protocol; a long request head (1 MB,
far over h11's 16 KiB default) is answered, never a reset; listening beyond loopback without
UNICHUNK_API_TOKEN is refused before anything listens, by the CLI (exit 2) and by the Python function."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from unichunk.deployments.mcp.server import create_server, http_app
from unichunk.deployments.service.listener import MAX_MCP_BODY_BYTES, listener
from unichunk.deployments.settings import ServiceSettings
from unichunk.errors import UsageError
from unichunk.pipeline import Pipeline
from unichunk.sinks.config import SinkSettings

UNICHUNK = str(Path(sys.executable).parent / "unichunk")
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with pytest.MonkeyPatch.context() as patch:
        for name in ("UNICHUNK_TOKEN", "UNICHUNK_API_TOKEN", "UNICHUNK_DATABASE_URL"):
            patch.delenv(name, raising=False)
        pipeline = Pipeline(SinkSettings(data_dir=tmp_path_factory.mktemp("mcp-limits")))
        server = create_server(pipeline, roots=[], http=True)
        chosen = _free_port()
        served = listener(http_app(server, "127.0.0.1"), "127.0.0.1", chosen, log_level="warning")
        thread = threading.Thread(target=served.run, daemon=True)
        thread.start()
        while not served.started:
            assert thread.is_alive(), "the MCP listener did not start"
            time.sleep(0.05)
        yield chosen
        served.should_exit = True
        thread.join(30)
        pipeline.close()


def _post(port: int, body: bytes, headers: dict[str, str] | None = None) -> int:
    """POST /mcp over a fresh connection; the status (a reset, or no status line, raises)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", "/mcp", body=body, headers={**ACCEPT, **(headers or {})})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(size=st.integers(min_value=0, max_value=2 * MAX_MCP_BODY_BYTES))
@example(size=MAX_MCP_BODY_BYTES)
@example(size=MAX_MCP_BODY_BYTES + 1)
def test_a_body_over_the_limit_is_a_413_and_one_within_it_reaches_the_protocol(port: int, size: int) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}'
    body += b" " * max(0, size - len(body))  # JSON with trailing spaces: valid at any size
    status = _post(port, body)
    if len(body) > MAX_MCP_BODY_BYTES:
        assert status == 413
    else:
        assert status != 413 and status < 500  # the protocol's own answer (no session yet: a 4xx)


def test_a_one_megabyte_head_is_answered_not_reset(port: int) -> None:
    status = _post(port, b"{}", {"X-Padding": "p" * 1_000_000})
    assert 200 <= status < 500


def test_an_open_listener_without_the_api_token_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("UNICHUNK_API_TOKEN", raising=False)
    with pytest.raises(UsageError, match=r"refusing to listen on 0\.0\.0\.0 without UNICHUNK_API_TOKEN"):
        listener(object(), "0.0.0.0", _free_port())
    monkeypatch.setenv("UNICHUNK_API_TOKEN", "s3cret-token")
    assert ServiceSettings().api_token is not None
    assert listener(object(), "0.0.0.0", _free_port()) is not None  # built, not started

    monkeypatch.delenv("UNICHUNK_API_TOKEN")
    port = _free_port()
    done = subprocess.run(
        [UNICHUNK, "mcp", "--http", "--host", "0.0.0.0", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "UNICHUNK_DATA_DIR": str(tmp_path / "data")},
    )
    assert done.returncode == 2, done.stderr
    assert "refusing to listen on 0.0.0.0 without UNICHUNK_API_TOKEN" in done.stderr
    assert done.stdout == ""  # nothing on stdout, the protocol's channel
