"""The webhook receiver against a real Prefect server: what it refuses never reaches Prefect, what it
accepts arrives exactly once, with the event id derived from the delivery id."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from unichunk.chunking.ids import derive_document_id
from unichunk.deployments.service.webhook import WEBHOOKS_REJECTED, PrefectEventSink, create_app
from unichunk.deployments.service.webhook_security import event_id_for, sign
from unichunk.deployments.settings import ServiceSettings
from unichunk.index.update_queue import UpdateQueue
from unichunk.sinks.config import SinkSettings

SECRET = "test-secret-for-the-receiver"
MAX_BODY = 4096


def find_events(
    api_url: str, *, resource_ids: list[str] | None = None, ids: list[str] | None = None
) -> list[dict]:
    """Events stored by the Prefect server matching the filter (document.* events only)."""
    flt: dict[str, Any] = {"event": {"prefix": ["document."]}}
    if resource_ids:
        flt["resource"] = {"id": resource_ids}
    if ids:
        flt["id"] = {"id": ids}
    response = httpx.post(f"{api_url}/events/filter", json={"filter": flt, "limit": 50}, timeout=10)
    response.raise_for_status()
    return response.json()["events"]


def wait_for_events(api_url: str, timeout: float = 60, **flt: Any) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := find_events(api_url, **flt):
            return found
        time.sleep(0.5)
    raise AssertionError(f"no event matching {flt} reached Prefect within {timeout:.0f} s")


SOURCE = "notes"  # the configured source's name (UNICHUNK_SOURCE_NAME): its documents' IDs use it


@pytest.fixture()
def source_root(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nSome text.\n")
    return root


@pytest.fixture()
def settings(tmp_path: Path, source_root: Path, monkeypatch: pytest.MonkeyPatch) -> ServiceSettings:
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(tmp_path / "data"))  # the replay cache lives there
    return ServiceSettings(
        webhook_secret=SECRET, webhook_max_body=MAX_BODY, source_root=source_root, source_name=SOURCE
    )


@pytest.fixture()
def client(settings: ServiceSettings, prefect_api_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings, PrefectEventSink(prefect_api_url))) as test_client:
        yield test_client


def listed(root: Path | None, source_id: str) -> str:
    """Write the file `source_id` names under the source root (a webhook may name only a file a scan
    lists, under its own path); returns `source_id`."""
    assert root is not None
    (root / source_id).write_text(f"# {source_id}\n\nSome text.\n")
    return source_id


def payload(source_id: str, **extra: Any) -> dict[str, Any]:
    return {"event": "updated", "source_id": source_id, **extra}


def signed_headers(
    body: bytes, *, delivery: str | None = None, ts: int | None = None, secret: str = SECRET
) -> dict:
    ts = int(time.time()) if ts is None else ts
    headers = {
        "Content-Type": "application/json",
        "X-Unichunk-Timestamp": str(ts),
        "X-Unichunk-Signature": sign(secret, ts, body),
    }
    if delivery:
        headers["X-Unichunk-Delivery"] = delivery
    return headers


def post(client: TestClient, body: bytes | Any, headers: dict[str, str]) -> httpx.Response:
    return client.post("/webhooks/documents", content=body, headers=headers)


def test_valid_update_emits_one_event_with_the_delivery_derived_id(
    client: TestClient, prefect_api_url: str, source_root: Path
) -> None:
    source_id = f"a-{uuid.uuid4().hex[:8]}.md"
    body = json.dumps(payload(listed(source_root, source_id), path=source_id)).encode()
    delivery = f"dlv-{uuid.uuid4().hex}"
    headers = signed_headers(body, delivery=delivery)

    response = post(client, body, headers)
    assert response.status_code == 202, response.text
    expected_id = str(uuid.uuid5(uuid.UUID("8d0f6a52-5a0e-4a53-9f5e-3c1c1b7f6e21"), f"delivery:{delivery}"))
    assert response.json()["event_id"] == expected_id

    events = wait_for_events(prefect_api_url, ids=[expected_id])
    assert len(events) == 1
    event = events[0]
    document_id = derive_document_id(source_system=SOURCE, source_id=source_id)
    assert event["event"] == "document.updated"
    assert event["resource"]["prefect.resource.id"] == f"unichunk.document.{document_id}"
    assert event["payload"]["document_id"] == document_id
    assert event["payload"]["source_id"] == source_id
    assert event["payload"]["path"] == str(source_root.resolve() / source_id)

    # The sender retries the same delivery (same body, new timestamp, so a new signature): refused as a replay.
    retry = post(client, body, signed_headers(body, delivery=delivery, ts=int(time.time()) + 1))
    assert retry.status_code == 409
    # And the exact same request again (same signature, no delivery id would matter): refused too.
    assert post(client, body, headers).status_code == 409
    time.sleep(2)
    assert len(find_events(prefect_api_url, resource_ids=[f"unichunk.document.{document_id}"])) == 1


def test_prefect_drops_a_second_event_with_the_same_id(
    settings: ServiceSettings, prefect_api_url: str, tmp_path: Path
) -> None:
    """Two receivers that do not share a replay cache both accept a retried delivery: Prefect itself
    must still keep one event (it deduplicates by event id), so at most one flow run starts."""
    source_id = f"dup-{uuid.uuid4().hex[:8]}.md"
    body = json.dumps(payload(listed(settings.source_root, source_id))).encode()
    delivery = f"dlv-{uuid.uuid4().hex}"
    with (
        TestClient(create_app(settings, PrefectEventSink(prefect_api_url))) as first,
        TestClient(
            create_app(settings, PrefectEventSink(prefect_api_url), data_dir=tmp_path / "other-replica")
        ) as second,
    ):
        assert post(first, body, signed_headers(body, delivery=delivery)).status_code == 202
        assert (
            post(second, body, signed_headers(body, delivery=delivery, ts=int(time.time()) + 1)).status_code
            == 202
        )
    resource = f"unichunk.document.{derive_document_id(source_system=SOURCE, source_id=source_id)}"
    wait_for_events(prefect_api_url, resource_ids=[resource])
    time.sleep(3)  # give a duplicate every chance to be persisted
    events = find_events(prefect_api_url, resource_ids=[resource])
    assert [e["id"] for e in events] == [str(event_id_for(delivery, ""))]


def test_replay_is_still_refused_after_a_restart(
    settings: ServiceSettings, prefect_api_url: str, records_settings: SinkSettings
) -> None:
    """On either backend (`records_settings` sets UNICHUNK_DATABASE_URL, or not, for the receiver)."""
    body = json.dumps(payload(listed(settings.source_root, f"r-{uuid.uuid4().hex[:8]}.md"))).encode()
    headers = signed_headers(body, delivery=f"dlv-{uuid.uuid4().hex}")
    with TestClient(create_app(settings, PrefectEventSink(prefect_api_url))) as before:
        assert post(before, body, headers).status_code == 202
    with TestClient(create_app(settings, PrefectEventSink(prefect_api_url))) as after:
        response = post(after, body, headers)
    assert response.status_code == 409, response.text


def _chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_rejections_emit_no_event(client: TestClient, prefect_api_url: str, source_root: Path) -> None:
    """Every refusal answers its status and reaches Prefect with nothing; a valid sentinel sent after
    them proves the server had time to store anything they might have emitted."""
    run = uuid.uuid4().hex[:8]
    (source_root.parent / "outside.md").write_text("not allowed")
    (source_root / "link.md").symlink_to(source_root.parent / "outside.md")
    now = int(time.time())
    source_ids: list[str] = []

    def body_for(name: str, **extra: Any) -> bytes:
        source_ids.append(listed(source_root, f"{run}-{name}.md"))
        return json.dumps(payload(f"{run}-{name}.md", **extra)).encode()

    ok = body_for("ok")
    big = body_for("big", pad="x" * MAX_BODY)  # pad is also an unknown key, but size comes first
    replayed = body_for("replayed")
    replay_headers = signed_headers(replayed, delivery=f"dlv-{run}-replay")
    assert post(client, replayed, replay_headers).status_code == 202
    replay_resource = (
        f"unichunk.document.{derive_document_id(source_system=SOURCE, source_id=f'{run}-replayed.md')}"
    )

    def traversal(name: str, **fields: Any) -> tuple[bytes, dict]:
        data = {"event": "updated", "source_id": f"{run}-{name}", **fields}
        source_ids.append(data["source_id"])
        raw = json.dumps(data).encode()
        return raw, signed_headers(raw)

    cases: list[tuple[str, int, bytes | Iterator[bytes], dict]] = [
        ("missing signature", 401, ok, {"Content-Type": "application/json"}),
        ("missing timestamp", 401, ok, {k: v for k, v in signed_headers(ok).items() if "Timestamp" not in k}),
        ("bad signature", 401, ok, signed_headers(ok, secret="wrong-secret")),
        ("signature of other body", 401, ok, signed_headers(ok + b" ")),
        ("stale timestamp", 401, ok, signed_headers(ok, ts=now - 302)),
        ("future timestamp", 401, ok, signed_headers(ok, ts=now + 400)),
        ("replayed signature", 409, replayed, replay_headers),
        (
            "replayed delivery id",
            409,
            replayed,
            signed_headers(replayed, delivery=f"dlv-{run}-replay", ts=now - 5),
        ),
        ("oversize with length", 413, big, signed_headers(big)),
        ("oversize streamed", 413, _chunks(big), signed_headers(big)),
        ("wrong content type", 415, ok, signed_headers(ok) | {"Content-Type": "text/plain"}),
        ("no content type", 415, ok, {k: v for k, v in signed_headers(ok).items() if k != "Content-Type"}),
        ("malformed json", 422, b'{"event": "updated",', signed_headers(b'{"event": "updated",')),
        ("json array", 422, b"[1, 2]", signed_headers(b"[1, 2]")),
        ("number source_id", 422, *(lambda r: (r, signed_headers(r)))(json.dumps(payload(7)).encode())),
        (
            "unknown event",
            422,
            *(lambda r: (r, signed_headers(r)))(json.dumps(payload("x") | {"event": "x"}).encode()),
        ),
        ("dotdot path", 422, *traversal("dotdot", path="../outside.md")),
        ("absolute path outside root", 422, *traversal("abs", path=str(source_root.parent / "outside.md"))),
        ("symlink out of root", 422, *traversal("link", path="link.md")),
        ("nul in path", 422, *traversal("nul", path="a.md\x00.txt")),
        ("control char in source_id", 422, *traversal("ctl\x1b[31m")),
        (
            "dotdot source_id",
            422,
            *(lambda r: (r, signed_headers(r)))(json.dumps(payload("../../etc/passwd")).encode()),
        ),
        (
            "absolute source_id",
            422,
            *(lambda r: (r, signed_headers(r)))(json.dumps(payload("/etc/passwd")).encode()),
        ),
        ("dotdot document_id", 422, *traversal("docid", document_id="../../x")),
        ("bad delivery id", 422, ok, signed_headers(ok, delivery="a b/../c")),
    ]
    before = {
        reason: WEBHOOKS_REJECTED.labels(reason=reason)._value.get()
        for reason in ("missing_signature", "too_large", "replay")
    }
    for name, status, body, headers in cases:
        response = post(client, body, headers)
        assert response.status_code == status, (
            f"{name}: expected {status}, got {response.status_code} {response.text}"
        )
        assert "event_id" not in response.json(), name
    assert (
        WEBHOOKS_REJECTED.labels(reason="missing_signature")._value.get() == before["missing_signature"] + 2
    )
    assert WEBHOOKS_REJECTED.labels(reason="too_large")._value.get() == before["too_large"] + 2
    assert WEBHOOKS_REJECTED.labels(reason="replay")._value.get() == before["replay"] + 2
    metrics = client.get("/metrics").text
    assert 'unichunk_webhooks_rejected_total{reason="unsafe_path"}' in metrics

    sentinel = body_for("sentinel")
    sentinel_response = post(client, sentinel, signed_headers(sentinel))
    assert sentinel_response.status_code == 202
    wait_for_events(prefect_api_url, ids=[sentinel_response.json()["event_id"]])
    time.sleep(1)

    rejected = [
        f"unichunk.document.{derive_document_id(source_system=SOURCE, source_id=s)}"
        for s in source_ids
        if not s.endswith(("-sentinel.md", "-replayed.md"))
    ]
    assert find_events(prefect_api_url, resource_ids=rejected) == []
    assert len(find_events(prefect_api_url, resource_ids=[replay_resource])) == 1


def test_prefect_down_answers_503_and_the_retry_goes_through(
    settings: ServiceSettings, prefect_api_url: str
) -> None:
    name = listed(settings.source_root, f"down-{uuid.uuid4().hex[:8]}.md")
    body = json.dumps(payload(name)).encode()
    headers = signed_headers(body, delivery=f"dlv-{uuid.uuid4().hex}")
    with TestClient(create_app(settings, PrefectEventSink("http://127.0.0.1:9/api", timeout=2))) as down:
        response = post(down, body, headers)
        assert response.status_code == 503, response.text
        health = down.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "unavailable"
    queue = UpdateQueue.of(SinkSettings())
    assert queue.entries() == []  # refused: no run may apply it on its behalf
    # Not remembered as accepted: once Prefect is back, the very same delivery is taken.
    with TestClient(create_app(settings, PrefectEventSink(prefect_api_url))) as up:
        accepted = post(up, body, headers)
        assert accepted.status_code == 202
        health = up.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
    # Accepted: queued under the event's id (its run's `entry`), pending until a run applies it.
    (queued,) = queue.entries()
    assert (queued.entry, queued.state, queued.source_system) == (
        accepted.json()["event_id"],
        "pending",
        SOURCE,
    )
    assert queued.path == str(settings.source_root.resolve() / name)  # type: ignore[union-attr]


def test_a_receiver_without_secret_refuses_everything(tmp_path: Path, prefect_api_url: str) -> None:
    settings = ServiceSettings(webhook_secret=None, source_root=tmp_path)
    body = json.dumps(payload("a.md")).encode()
    with TestClient(
        create_app(settings, PrefectEventSink(prefect_api_url), data_dir=tmp_path / "d")
    ) as client:
        response = post(client, body, signed_headers(body, secret=""))
    assert response.status_code == 401


def test_signature_window_edges_and_formats() -> None:
    from unichunk.deployments.service.webhook_security import WebhookRejected, verify_signature

    body, ts = b'{"a": 1}', 1_800_000_000
    signature = sign(SECRET, ts, body)
    for now in (ts - 300, ts, ts + 300):
        assert verify_signature(SECRET, signature, str(ts), body, tolerance=300, now=now) == (
            ts,
            signature[7:],
        )
    for now, reason in ((ts - 301, "stale_timestamp"), (ts + 301, "stale_timestamp")):
        with pytest.raises(WebhookRejected) as info:
            verify_signature(SECRET, signature, str(ts), body, tolerance=300, now=now)
        assert (info.value.status, info.value.reason) == (401, reason)
    bad = [
        (signature, "1.5e9", "bad_timestamp"),
        (signature[7:], str(ts), "bad_signature"),  # hex without the sha256= prefix
        (signature[:-1] + ("0" if signature[-1] != "0" else "1"), str(ts), "bad_signature"),
        (signature, str(ts + 1), "bad_signature"),  # the timestamp is part of the signed message
    ]
    for sig, stamp, reason in bad:
        with pytest.raises(WebhookRejected) as info:
            verify_signature(SECRET, sig, stamp, body, tolerance=300, now=ts)
        assert info.value.reason == reason, (sig, stamp)


def test_signed_events_that_name_nothing_ingestable_are_refused_before_any_event(
    client: TestClient, prefect_api_url: str, source_root: Path, settings: ServiceSettings
) -> None:
    """A correctly signed `updated` whose path is no regular file inside the root, a `deleted` of a document
    the index does not hold, or another source's name: 422 with a reason, and nothing reaches Prefect."""
    run = uuid.uuid4().hex[:8]
    (source_root / "folder").mkdir()
    os.mkfifo(source_root / "pipe.md")
    cases = {
        "root itself": ({"path": "."}, "not_a_file"),
        "a directory": ({"path": "folder"}, "not_a_file"),
        "a missing file": ({"path": "absent.md"}, "not_a_file"),
        "a FIFO": ({"path": "pipe.md"}, "not_a_file"),
        "a Windows path": ({"path": "C:\\Windows\\win.ini"}, "not_a_file"),
        "a file URL": ({"path": "file:///etc/passwd"}, "not_a_file"),
        "no path, no such file": ({}, "not_a_file"),
        "another source": ({"path": "a.md", "source_system": "someone-else"}, "unknown_source"),
        "an unknown document": ({"event": "deleted"}, "unknown_document"),
    }
    source_ids = []
    for n, (name, (fields, reason)) in enumerate(cases.items()):
        data = {"event": "updated", "source_id": f"{run}-{n}.md", **fields}
        source_ids.append(data["source_id"])
        body = json.dumps(data).encode()
        response = post(client, body, signed_headers(body))
        assert response.status_code == 422, (name, response.text)
        assert response.json()["error"] == reason, (name, response.json())
    named = json.dumps(payload(listed(source_root, f"{run}-named.md"), source_system=SOURCE)).encode()
    accepted = post(client, named, signed_headers(named))  # naming the configured source is fine
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["document_id"] == derive_document_id(
        source_system=SOURCE, source_id=f"{run}-named.md"
    )
    wait_for_events(prefect_api_url, ids=[accepted.json()["event_id"]])
    time.sleep(1)
    refused = [
        f"unichunk.document.{derive_document_id(source_system=SOURCE, source_id=s)}" for s in source_ids
    ]
    assert find_events(prefect_api_url, resource_ids=refused) == []
    assert settings.source_system() == SOURCE


def test_a_webhook_may_name_only_a_file_the_scan_lists_under_its_own_path(
    client: TestClient, prefect_api_url: str, source_root: Path
) -> None:
    """Issue 29, item 7: a signed `updated` that a rescan could never undo (a `source_id` other than the
    file's path, a symlink inside the root, a file or folder link, an extension the scan's patterns
    exclude) is refused 422 with the reason, and reaches Prefect with nothing; the legitimate one is 202."""
    run = uuid.uuid4().hex[:8]
    served = listed(source_root, f"{run}-served.md")
    (source_root / f"{run}-link.md").symlink_to(source_root / served)
    (source_root / f"{run}-dir").mkdir()
    listed(source_root, f"{run}-dir/inner.md")
    (source_root / f"{run}-dirlink").symlink_to(source_root / f"{run}-dir", target_is_directory=True)
    (source_root / f"{run}-data.bin").write_bytes(b"\x00\x01binary")
    cases = {
        "spoofed source_id": ({"source_id": f"spoof/{run}-fake.md", "path": served}, "source_id_mismatch"),
        "source_id other than the path": ({"source_id": f"{run}-x.md", "path": served}, "source_id_mismatch"),
        "a symlink inside the root": ({"source_id": f"{run}-link.md"}, "not_in_source"),
        "through a symlinked folder": ({"source_id": f"{run}-dirlink/inner.md"}, "not_in_source"),
        "an excluded extension": ({"source_id": f"{run}-data.bin"}, "not_in_source"),
        "an absolute path of the file": (
            {"source_id": f"spoof/{run}-abs.md", "path": str(source_root / served)},
            "source_id_mismatch",
        ),
    }
    refused, details = [], {}
    for name, (fields, reason) in cases.items():
        data = {"event": "updated", **fields}
        refused.append(data["source_id"])
        body = json.dumps(data).encode()
        response = post(client, body, signed_headers(body))
        assert response.status_code == 422, (name, response.text)
        assert response.json()["error"] == reason, (name, response.json())
        details[name] = response.json()["detail"]
    assert "symbolic link" in details["a symlink inside the root"]
    assert "patterns" in details["an excluded extension"]
    assert "spoof/" in details["spoofed source_id"] and served in details["spoofed source_id"]

    for fields in (
        {"source_id": served},
        {"source_id": f"{run}-dir/inner.md", "path": f"{run}-dir/inner.md"},
    ):
        body = json.dumps({"event": "updated", **fields}).encode()
        accepted = post(client, body, signed_headers(body))
        assert accepted.status_code == 202, accepted.text
        wait_for_events(prefect_api_url, ids=[accepted.json()["event_id"]])
    time.sleep(1)
    ids = [f"unichunk.document.{derive_document_id(source_system=SOURCE, source_id=s)}" for s in refused]
    assert find_events(prefect_api_url, resource_ids=ids) == []
