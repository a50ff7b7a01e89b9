"""The service's API surface: bearer auth, /docs, the document filter, and the loopback-only rule for an
API without a token. Over a real BM25 store (no models: these tests are about the HTTP layer)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.deployments.service.auth import listen_refusal
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink

TOKEN = "s3cret-token"
DOCS = [
    Document(text="The harbour crane lifts containers. " * 80, source_system="t", source_id="port.txt"),
    Document(
        text="Cranes fly south over the harbour in winter. " * 80, source_system="t", source_id="birds.txt"
    ),
]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    store = BM25Sink(SinkSettings(data_dir=tmp_path), path=tmp_path / "bm25.sqlite")
    strategy = ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=0)
    for document in DOCS:
        store.upsert(document, ChunkingService().chunk(document, strategy))
    app = create_app(
        ServiceSettings(webhook_secret="w", api_token=TOKEN),
        PrefectEventSink("http://127.0.0.1:9/api", timeout=2),
        search_sinks=lambda: {"keywords": store},
        data_dir=tmp_path,
    )
    with TestClient(app) as test_client:
        yield test_client
    store.close()


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_api_routes_need_the_bearer_token(client: TestClient) -> None:
    for method, path in (
        ("GET", "/search?q=crane"),
        ("GET", "/status"),
        ("GET", "/documents/x"),
        ("DELETE", "/documents/x"),
    ):
        missing = client.request(method, path)
        assert missing.status_code == 401, (path, missing.text)
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert client.request(method, path, headers=_auth("wrong")).status_code == 401
        assert client.request(method, path, headers={"Authorization": TOKEN}).status_code == 401  # no scheme
    found = client.get("/search", params={"q": "crane harbour"}, headers=_auth())
    assert found.status_code == 200 and found.json()["hits"]
    assert client.get("/health").status_code != 401  # probes stay open (503 here: no Prefect listens)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(header=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80))
def test_any_wrong_authorization_header_is_a_401(client: TestClient, header: str) -> None:
    if header.strip() in (f"Bearer {TOKEN}", f"bearer {TOKEN}") or header.partition(" ")[2].strip() == TOKEN:
        return
    response = client.get("/search", params={"q": "crane"}, headers={"Authorization": header})
    assert response.status_code == 401


def test_openapi_docs_are_served_with_the_token(client: TestClient) -> None:
    refused = client.get("/docs", follow_redirects=False)  # a browser: to the login form, and back
    assert refused.status_code == 303 and refused.headers["location"] == "/ui/login?next=%2Fdocs"
    assert client.get("/openapi.json").status_code == 401
    page = client.get("/docs", headers=_auth())
    assert page.status_code == 200
    assert "https://" not in page.text and "http://" not in page.text  # Swagger UI from the service
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/docs/assets/{asset}" in page.text
        assert client.get(f"/docs/assets/{asset}", headers=_auth()).status_code == 200
    assert client.get("/docs/assets/index.html", headers=_auth()).status_code == 404
    schema = client.get("/openapi.json", headers=_auth()).json()
    paths = schema["paths"]
    assert {"/search", "/documents/{document_id}", "/entities/{name}", "/status", "/health"} <= set(paths)
    # the bearer scheme is declared, and required by the data routes, not by the probes
    assert schema["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "UNICHUNK_API_TOKEN, when the service has one.",
    }
    assert paths["/search"]["get"]["security"] == [{"HTTPBearer": []}]
    assert paths["/entities/{name}"]["get"]["security"] == [{"HTTPBearer": []}]
    assert {"200", "404", "422"} <= set(paths["/entities/{name}"]["get"]["responses"])
    assert paths["/documents/{document_id}"]["delete"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in paths["/health"]["get"]


def test_document_filter_narrows_every_retriever(client: TestClient) -> None:
    port, birds = (d.document_id for d in DOCS)
    both = client.get("/search", params={"q": "harbour crane", "k": 10}, headers=_auth()).json()
    assert {h["document_id"] for h in both["hits"]} == {port, birds}
    # filtered in the store, not after ranking: k hits of that document, though the other ranks higher
    only = client.get(
        "/search", params={"q": "harbour crane containers", "k": 3, "document": birds}, headers=_auth()
    )
    assert [h["document_id"] for h in only.json()["hits"]] == [birds] * 3
    none = client.get("/search", params={"q": "crane", "source": "no-such-source"}, headers=_auth())
    assert none.status_code == 200 and none.json()["hits"] == []


def test_non_loopback_listener_needs_a_token() -> None:
    assert listen_refusal("127.0.0.1", ServiceSettings()) is None
    assert listen_refusal("::1", ServiceSettings()) is None
    assert listen_refusal("localhost", ServiceSettings()) is None
    assert "UNICHUNK_API_TOKEN" in (listen_refusal("0.0.0.0", ServiceSettings()) or "")
    assert "UNICHUNK_API_TOKEN" in (listen_refusal("my-host.example", ServiceSettings()) or "")
    assert listen_refusal("0.0.0.0", ServiceSettings(api_token=TOKEN)) is None


@pytest.mark.parametrize("command", ["serve", "up"])
def test_cli_refuses_to_listen_beyond_loopback_without_a_token(command: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "UNICHUNK_API_TOKEN"} | {
        "UNICHUNK_DATA_DIR": str(tmp_path)
    }
    done = subprocess.run(
        [sys.executable, "-m", "unichunk.deployments.cli.main", command, "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "UNICHUNK_API_TOKEN" in lines[0]
