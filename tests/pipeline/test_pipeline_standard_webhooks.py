"""Standard Webhooks beside our own headers: deliveries signed by the `standardwebhooks` SDK's own
`Webhook.sign`, posted to the real receiver app with a real Prefect server behind it. A wrong signature is
a 401, a replayed webhook-id a 409, and no header value, however hostile, is a 500."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook

from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.service.webhook_security import EVENT_NAMESPACE, sign
from unichunk.deployments.settings import ServiceSettings

# The SDKs' own secret format; the receiver's UNICHUNK_WEBHOOK_SECRET is then exactly this string.
WHSEC = "whsec_" + base64.b64encode(b"standard-webhooks-test-key-32byt").decode()
PLAIN = "a-plain-shared-secret"  # not whsec_: the SDK gets whsec_ + base64 of it


def receiver(tmp_path: Path, prefect_api_url: str, secret: str) -> TestClient:
    root = tmp_path / "src"
    root.mkdir(exist_ok=True)
    for name in "abcde":  # the files the tests' webhooks name (a webhook names only a file a scan lists)
        (root / f"{name}.md").write_text(f"# {name.upper()}\n\nSome text.\n")
    service = ServiceSettings(webhook_secret=secret, source_root=root, source_name="notes")
    app = create_app(service, PrefectEventSink(prefect_api_url), data_dir=tmp_path / "data")
    return TestClient(app)


@pytest.fixture()
def client(tmp_path: Path, prefect_api_url: str) -> Iterator[TestClient]:
    with receiver(tmp_path, prefect_api_url, WHSEC) as test_client:
        yield test_client


def standard_headers(
    secret: str, body: bytes, msg_id: str | None = None, ts: int | None = None
) -> dict[str, str]:
    """What a sender using the SDK sends: webhook-id, webhook-timestamp and the SDK's own signature."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    ts = int(time.time()) if ts is None else ts
    signature = Webhook(secret).sign(msg_id, datetime.fromtimestamp(ts, UTC), body.decode())
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": signature,
    }


def body_for(source_id: str) -> bytes:
    return json.dumps({"event": "updated", "source_id": source_id, "path": source_id}).encode()


def test_an_sdk_signed_delivery_is_accepted_with_the_webhook_id_as_delivery(client: TestClient) -> None:
    body = body_for("a.md")
    headers = standard_headers(WHSEC, body)
    response = client.post("/webhooks/documents", content=body, headers=headers)
    assert response.status_code == 202, response.text
    expected = uuid.uuid5(EVENT_NAMESPACE, f"delivery:{headers['webhook-id']}")
    assert response.json()["event_id"] == str(expected)


def test_a_plain_secret_signs_as_whsec_of_its_bytes(tmp_path: Path, prefect_api_url: str) -> None:
    body = body_for("b.md")
    sdk_secret = "whsec_" + base64.b64encode(PLAIN.encode()).decode()
    with receiver(tmp_path, prefect_api_url, PLAIN) as plain_client:
        accepted = plain_client.post(
            "/webhooks/documents", content=body, headers=standard_headers(sdk_secret, body)
        )
        assert accepted.status_code == 202, accepted.text
        # ...and our own scheme still works with the same secret.
        ts = int(time.time())
        ours = {
            "Content-Type": "application/json",
            "X-Unichunk-Timestamp": str(ts),
            "X-Unichunk-Signature": sign(PLAIN, ts, body),
        }
        assert plain_client.post("/webhooks/documents", content=body, headers=ours).status_code == 202


def test_wrong_signature_wrong_secret_and_stale_timestamp_are_401(client: TestClient) -> None:
    body = body_for("c.md")
    tampered = standard_headers(WHSEC, body)
    tampered["webhook-signature"] = standard_headers(WHSEC, body + b" ")["webhook-signature"]
    other_secret = standard_headers("whsec_" + base64.b64encode(b"x" * 32).decode(), body)
    stale = standard_headers(WHSEC, body, ts=int(time.time()) - 3600)
    missing = {k: v for k, v in standard_headers(WHSEC, body).items() if k != "webhook-id"}
    for headers, reason in [
        (tampered, "bad_signature"),
        (other_secret, "bad_signature"),
        (stale, "stale_timestamp"),
        (missing, "missing_signature"),
    ]:
        response = client.post("/webhooks/documents", content=body, headers=headers)
        assert response.status_code == 401, (reason, response.text)
        assert response.json()["error"] == reason


def test_a_replayed_webhook_id_is_refused_even_when_re_signed(client: TestClient) -> None:
    body = body_for("d.md")
    msg_id = f"msg_{uuid.uuid4().hex}"
    first = client.post("/webhooks/documents", content=body, headers=standard_headers(WHSEC, body, msg_id))
    assert first.status_code == 202, first.text
    # The SDKs retry a delivery with the same id and a new timestamp (so a new signature).
    again = standard_headers(WHSEC, body, msg_id, ts=int(time.time()) + 1)
    replay = client.post("/webhooks/documents", content=body, headers=again)
    assert replay.status_code == 409 and replay.json()["error"] == "replay"


HEADER_VALUES = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60),
    st.sampled_from(["v1,", "v1", ",", "v1,!!!", "v2,abc", "999999999999", "-1", "1e9", "０", " v1,x "]),
    st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"").decode("latin-1")),
)


@given(
    headers=st.dictionaries(
        st.sampled_from(
            [
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "x-unichunk-signature",
                "x-unichunk-timestamp",
            ]
        ),
        HEADER_VALUES,
    )
)
@example(headers={"webhook-id": "msg_1", "webhook-timestamp": "999999999999", "webhook-signature": "v1,x"})
@example(headers={"webhook-id": "msg_1", "webhook-timestamp": "1", "webhook-signature": "v1"})
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_arbitrary_signature_headers_never_give_a_500(client: TestClient, headers: dict[str, str]) -> None:
    body = body_for("e.md")
    sent = {"Content-Type": "application/json"} | {k: v.encode() for k, v in headers.items()}
    response = client.post("/webhooks/documents", content=body, headers=sent)  # type: ignore[arg-type]
    assert response.status_code in (401, 422), (headers, response.status_code, response.text)
