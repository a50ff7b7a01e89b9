"""The service's edges over a real HTTP listener (uvicorn with the service's own limits, `SERVER_LIMITS`):
an oversize query is a 4xx with its reason, never a reset; any query string is results or a 4xx, never a
5xx; with a token the public routes are exactly `/health` and `/metrics` (the OpenAPI routes too need it);
`/health` says nothing internal. Over a real BM25 store (no models: these tests are about the HTTP layer).
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.servers import serving
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.request_limits import MAX_QUERY_CHARS
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PREFECT = "http://127.0.0.1:9/internal-prefect/api"  # nobody listens: /health is 503, and must not say this


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    data = tmp_path_factory.mktemp("edges")
    store = BM25Sink(SinkSettings(data_dir=data), path=data / "bm25.sqlite")
    document = Document(
        text="The harbour crane lifts containers. " * 40, source_system="t", source_id="a.txt"
    )
    store.upsert(document, ChunkingService().chunk(document, ChunkStrategy(name="sentence", chunk_size=128)))
    app = create_app(
        ServiceSettings(webhook_secret="w", api_token=TOKEN),
        PrefectEventSink(PREFECT, timeout=2),
        search_sinks=lambda: {"keywords": store},
        data_dir=data,
    )
    with serving(app) as chosen:
        yield chosen
    store.close()


def _get(port: int, target: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One GET over a fresh connection (http.client sends any target as given; httpx refuses long URLs).
    A reset, or no status line, raises."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("GET", target, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _search(port: int, query: str) -> tuple[int, bytes]:
    return _get(port, f"/search?q={quote(query, safe='')}&mode=keywords", AUTH)


def test_a_one_megabyte_query_is_a_422_with_the_reason_not_a_reset(port: int) -> None:
    for query in ("crane " * 200_000, "\U0001f600" * 300_000):  # 1.2 MB ASCII; 1.2 MB of emoji, 3.6 MB sent
        status, body = _search(port, query)
        assert status == 422, body[:300]
        assert b"at most 2000" in body and len(body) < 1000  # the reason, not the query echoed back
    status, body = _search(port, "x" * (MAX_QUERY_CHARS + 1))
    assert status == 422 and b"at most 2000" in body
    assert _search(port, "crane")[0] == 200


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(query=st.text(max_size=MAX_QUERY_CHARS + 300) | st.text(min_size=MAX_QUERY_CHARS - 5, max_size=5000))
@example(query="")
@example(query="   \t\n")
@example(query="\x00")
@example(query="a" * MAX_QUERY_CHARS)
@example(query="a" * 100_000)
def test_any_query_string_is_results_or_a_4xx(port: int, query: str) -> None:
    status, body = _search(port, query)  # a reset or a missing status line raises here
    if query.strip() and len(query) <= MAX_QUERY_CHARS:
        assert status == 200, body[:300]
    else:
        assert status == 422, body[:300]


def test_with_a_token_only_health_and_metrics_are_open(port: int) -> None:
    for path in (
        "/openapi.json",
        "/docs/assets/swagger-ui-bundle.js",
        "/search?q=crane",
        "/status",
        "/documents/x",
    ):
        assert _get(port, path)[0] == 401, path
        assert _get(port, path, {"Authorization": "Bearer wrong"})[0] == 401, path
    for page in ("/docs", "/ui", "/ui/evaluation", "/ui/documents/x"):  # a browser is sent to the login form
        assert _get(port, page)[0] == 303, page
        assert _get(port, page, {"Authorization": "Bearer wrong"})[0] == 303, page
        assert _get(port, page, {"Cookie": "unichunk_token=wrong"})[0] == 303, page
    assert _get(port, "/docs", AUTH)[0] == 200
    assert _get(port, "/ui", AUTH)[0] == 200
    assert _get(port, "/docs", {"Cookie": f"unichunk_token={TOKEN}"})[0] == 200
    assert _get(port, "/redoc", AUTH)[0] == 404  # no ReDoc: it has no packaged build to serve offline
    status, schema = _get(port, "/openapi.json", AUTH)
    assert status == 200 and b'"/search"' in schema and b'"/health"' in schema
    assert _get(port, "/metrics")[0] == 200
    assert _get(port, "/health")[0] in (200, 503)


def test_health_tells_nothing_internal(port: int) -> None:
    status, body = _get(port, "/health")
    assert status == 503  # no Prefect listens at PREFECT
    assert body == b'{"status":"unavailable"}'
    assert b"://" not in body and b"internal-prefect" not in body and b"127.0.0.1" not in body


def test_without_a_token_the_docs_stay_open(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    app = create_app(
        ServiceSettings(webhook_secret="w"), PrefectEventSink(PREFECT, timeout=2), data_dir=tmp_path
    )
    with TestClient(app) as client:
        assert client.get("/docs").status_code == 200
        assert "/search" in client.get("/openapi.json").json()["paths"]
