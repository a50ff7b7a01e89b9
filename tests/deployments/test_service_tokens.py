"""Tokens at the service's door, over a real HTTP listener (uvicorn with the service's limits), a real
Prefect server for the webhooks, the real CLI in its own processes and the data dir's real token store:
a stored token is its principal, a revoked one is refused by the next request, a token that may not
write gets 403 (the CLI exits 4), no string a caller sends authenticates, each refusal is counted by
route and reason and logged without the token; each webhook source signs for itself only."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import serving
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.service.webhook_security import sign
from unichunk.deployments.settings import ServiceSettings
from unichunk.index.status import StatusStore
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink

ADMIN = "the-admin-token-of-this-service"
SECRETS = {"notes": "secret-of-notes", "crm": "secret-of-crm"}
SHARED = "the-old-shared-secret"


class Service:
    def __init__(self, url: str, data: Path, root: Path) -> None:
        self.url, self.data, self.root = url, data, root
        self.http = httpx.Client(base_url=url, timeout=60, trust_env=False)

    def cli(self, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        """The real CLI, in its own process, on this data dir and talking to this service."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"UNICHUNK_API_TOKEN", "UNICHUNK_TOKEN", "UNICHUNK_DATABASE_URL"}
        }
        env |= {"UNICHUNK_DATA_DIR": str(self.data), "UNICHUNK_SERVICE_URL": self.url}
        if token is not None:
            env["UNICHUNK_TOKEN"] = token
        return subprocess.run(
            [sys.executable, "-m", "unichunk.deployments.cli.main", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def create_token(self, *args: str) -> dict[str, Any]:
        made = self.cli("tokens", "create", "--json", *args)
        assert made.returncode == 0, made.stderr
        return json.loads(made.stdout)

    def get(self, path: str, token: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.http.get(path, headers=headers, **kwargs)

    def denied(self, route: str, reason: str) -> float:
        """`unichunk_access_denied_total{route,reason}` as the service's /metrics shows it."""
        page = self.http.get("/metrics").text
        return sum(
            sample.value
            for family in text_string_to_metric_families(page)
            for sample in family.samples
            if sample.name == "unichunk_access_denied_total"
            and sample.labels == {"route": route, "reason": reason}
        )


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, prefect_api_url: str) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("tokens") / "data"
    root = tmp_path_factory.mktemp("notes")
    store = BM25Sink(SinkSettings(data_dir=data), path=data / "bm25.sqlite")
    document = Document(
        text="The harbour crane lifts containers. " * 40, source_system="t", source_id="a.txt"
    )
    store.upsert(document, ChunkingService().chunk(document, ChunkStrategy(name="sentence", chunk_size=128)))
    app = create_app(
        ServiceSettings(
            api_token=ADMIN,
            webhook_secret=SHARED,
            webhook_secrets=SECRETS,
            source_root=root,
            source_name="notes",
            webhook_batching=False,
        ),
        PrefectEventSink(prefect_api_url),
        search_sinks=lambda: {"keywords": store},
        data_dir=data,
    )
    with serving(app) as port:
        running = Service(f"http://127.0.0.1:{port}", data, root)
        yield running
        running.http.close()
    store.close()


def test_a_token_revoked_through_the_cli_is_refused_by_the_next_request(service: Service) -> None:
    made = service.create_token("--label", "eng", "--name", "revoke-me")
    token = made["token"]
    assert service.get("/search", token, params={"q": "crane", "mode": "keywords"}).status_code == 200
    listed = service.cli("tokens", "list", "--json")
    assert listed.returncode == 0 and token not in listed.stdout
    assert "revoke-me" in {t["name"] for t in json.loads(listed.stdout)["tokens"]}

    revoked = service.cli("tokens", "revoke", "revoke-me")
    assert revoked.returncode == 0, revoked.stderr
    refused = service.get("/search", token, params={"q": "crane", "mode": "keywords"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    through_the_cli = service.cli("search", "crane", token=token)  # the CLI sends UNICHUNK_TOKEN
    assert through_the_cli.returncode == 2 and "revoked" in through_the_cli.stderr, through_the_cli.stderr


def test_the_admin_token_and_a_stored_token_are_their_principals(service: Service) -> None:
    reader = service.create_token("--label", "eng")["token"]
    for token in (ADMIN, reader):
        assert service.get("/search", token, params={"q": "crane", "mode": "keywords"}).status_code == 200
    assert service.get("/search", None, params={"q": "crane"}).status_code == 401


def test_a_write_without_write_rights_is_403_and_the_cli_exits_4(service: Service) -> None:
    reader = service.create_token("--label", "eng")["token"]
    writer = service.create_token("--label", "eng", "--write")["token"]
    before = service.denied("/documents/{document_id:path}", "forbidden")
    refused = service.http.delete("/documents/x", headers={"Authorization": f"Bearer {reader}"})
    assert refused.status_code == 403 and "write" in refused.json()["detail"]
    assert service.denied("/documents/{document_id:path}", "forbidden") == before + 1
    allowed = service.http.delete("/documents/x", headers={"Authorization": f"Bearer {writer}"})
    assert allowed.status_code == 404  # allowed to try: the document does not exist
    through_the_cli = service.cli("--token", reader, "delete", "some-document")  # the option this time
    assert through_the_cli.returncode == 4, (through_the_cli.returncode, through_the_cli.stderr)
    assert "write" in through_the_cli.stderr


def test_refusals_are_counted_by_route_and_reason_and_logged_without_the_token(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    made = service.create_token("--label", "eng", "--name", "audited")
    service.cli("tokens", "revoke", "audited")
    before = {reason: service.denied("/search", reason) for reason in ("missing_token", "bad_token")}
    with caplog.at_level(logging.WARNING, logger="unichunk.deployments.service.auth"):
        assert service.get("/search", None, params={"q": "crane"}).status_code == 401
        assert service.get("/search", made["token"], params={"q": "crane"}).status_code == 401
        assert service.get("/search", "not-a-token", params={"q": "crane"}).status_code == 401
    assert service.denied("/search", "missing_token") == before["missing_token"] + 1
    assert service.denied("/search", "bad_token") == before["bad_token"] + 2
    lines = [r.getMessage() for r in caplog.records if r.name == "unichunk.deployments.service.auth"]
    assert len(lines) == 3, lines
    assert all("/search" in line for line in lines)
    assert f"token_id={made['id']}" in lines[1]  # the revoked token's public id, for the audit
    assert not any(made["token"] in line or "not-a-token" in line or "crane" in line for line in lines)
    assert made["token"] not in service.http.get("/metrics").text


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    token=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF), min_size=1, max_size=120)
)
@example(token="uck_0000000000000000_" + "A" * 43)
@example(token=ADMIN + "x")
def test_no_string_sent_as_a_bearer_token_authenticates_or_crashes(service: Service, token: str) -> None:
    if token == ADMIN:
        return
    header = b"Bearer " + token.encode("latin-1")
    response = service.http.get(
        "/search", params={"q": "crane", "mode": "keywords"}, headers={"Authorization": header}
    )
    assert response.status_code == 401, (token, response.text[:200])


def _webhook(service: Service, payload: dict[str, Any], secret: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    ts = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "X-Unichunk-Timestamp": str(ts),
        "X-Unichunk-Signature": sign(secret, ts, body),
    }
    return service.http.post("/webhooks/documents", content=body, headers=headers)


def test_each_source_signs_for_itself_only(service: Service) -> None:
    name = f"n-{time.time_ns()}.md"
    (service.root / name).write_text("# Note\n\nSome text.\n")
    status = StatusStore.of(SinkSettings(data_dir=service.data))
    status.mark_processed("crm-doc", chunk_ids=[], source_system="crm", source_id="c1")
    status.mark_processed("notes-doc", chunk_ids=[], source_system="notes", source_id="n1")

    update = {"event": "updated", "source_id": name}
    assert _webhook(service, update, SECRETS["notes"]).status_code == 202
    assert _webhook(service, {**update, "source_system": "notes"}, SECRETS["crm"]).status_code == 403
    # crm's own source, but updates are for the folder this receiver lists: crm may only delete
    assert _webhook(service, update, SECRETS["crm"]).status_code == 422
    delete_crm = {"event": "deleted", "source_id": "c1", "document_id": "crm-doc"}
    assert _webhook(service, delete_crm, SECRETS["crm"]).status_code == 202  # no source named: its own
    delete_notes = {"event": "deleted", "source_id": "n1", "document_id": "notes-doc"}
    refused = _webhook(service, delete_notes, SECRETS["crm"])  # another source's document, by its ID
    assert refused.status_code == 403 and refused.json()["error"] == "wrong_source"
    refused = _webhook(service, {**delete_notes, "source_system": "crm"}, SECRETS["crm"])
    assert refused.status_code == 403 and refused.json()["error"] == "wrong_source"
    # the shared secret now signs for the configured source only
    assert _webhook(service, {**delete_notes, "source_id": "n1b"}, SHARED).status_code == 202
    assert _webhook(service, {**delete_crm, "source_id": "c1b"}, SHARED).status_code == 403
    assert _webhook(service, update | {"source_id": "x"}, "no-such-secret").status_code == 401


def test_the_shared_secret_alone_signs_for_any_source_as_before(tmp_path: Path) -> None:
    from unichunk.deployments.service.webhook import signing_secrets

    assert signing_secrets(ServiceSettings(webhook_secret=SHARED)) == [(None, SHARED)]
    per_source = signing_secrets(
        ServiceSettings(webhook_secret=SHARED, webhook_secrets=SECRETS, source_root=tmp_path, source_name="n")
    )
    assert per_source == [*SECRETS.items(), ("n", SHARED)]
    alone = signing_secrets(ServiceSettings(webhook_secret=SHARED, webhook_secrets=SECRETS))
    assert alone == list(SECRETS.items())  # no configured source: the shared secret signs for none


@pytest.fixture(params=["sqlite", "postgresql"])
def open_app(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """The service without UNICHUNK_API_TOKEN, its records embedded or in server mode (PostgreSQL)."""
    from fastapi.testclient import TestClient

    from unichunk.sinks.database import dispose_engines

    if request.param == "postgresql":
        monkeypatch.setenv("UNICHUNK_DATABASE_URL", request.getfixturevalue("database_url"))
    else:
        monkeypatch.delenv("UNICHUNK_DATABASE_URL", raising=False)
    data = tmp_path / "data"
    store = BM25Sink(SinkSettings(data_dir=data), path=tmp_path / "bm25.sqlite")
    document = Document(
        text="The harbour crane lifts containers. " * 40, source_system="t", source_id="a.txt"
    )
    store.upsert(document, ChunkingService().chunk(document, ChunkStrategy(name="sentence", chunk_size=128)))
    app = create_app(
        ServiceSettings(webhook_secret="w"),
        PrefectEventSink("http://127.0.0.1:9/api", timeout=2),
        search_sinks=lambda: {"keywords": store},
        data_dir=data,
    )
    with TestClient(app) as client:
        yield client, SinkSettings(data_dir=data)
    store.close()
    dispose_engines()


def test_the_first_token_closes_an_open_api_for_good_on_either_records_backend(open_app: Any) -> None:
    from unichunk.tokens import Tokens

    client, records = open_app
    search = {"q": "crane", "mode": "keywords"}
    assert client.get("/search", params=search).status_code == 200  # no token at all: the owner
    tokens = Tokens(records)
    token, record = tokens.create(["eng"])
    assert client.get("/search", params=search).status_code == 401
    assert client.get("/openapi.json").status_code == 401
    assert client.get("/docs", follow_redirects=False).status_code == 303  # a page goes to the login
    bearer = {"Authorization": f"Bearer {token}"}
    assert client.get("/search", params=search, headers=bearer).status_code == 200
    tokens.revoke(record.id)  # another process's revocation, seen by the next request
    assert client.get("/search", params=search, headers=bearer).status_code == 401
    assert client.get("/search", params=search).status_code == 401  # revoking all opens nothing
