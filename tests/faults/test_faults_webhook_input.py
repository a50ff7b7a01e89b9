"""Hostile webhook requests touch no store and start no run.

The receiver's answers and the absence of Prefect events are covered in
tests/pipeline/test_pipeline_webhook.py; here, with the stores configured to the same data dir, a
barrage of refused requests (missing/bad/stale signature, replay, oversize body, wrong content type,
JSON with unexpected types, path traversal in IDs) must leave the data dir holding only the receiver's
own replay cache (and the update queue with the one accepted update), and the Prefect server with no new
flow run and no document event.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
from fastapi.testclient import TestClient

from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.service.webhook_security import sign
from unichunk.deployments.settings import ServiceSettings
from unichunk.index.update_queue import UpdateQueue
from unichunk.sinks.config import SinkSettings

SECRET = "fault-test-secret"


def _headers(body: bytes, *, ts: int | None = None, secret: str = SECRET, **extra: str) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    return {
        "Content-Type": "application/json",
        "X-Unichunk-Timestamp": str(ts),
        "X-Unichunk-Signature": sign(secret, ts, body),
        **extra,
    }


def _flow_run_count(api_url: str) -> int:
    response = httpx.post(f"{api_url}/flow_runs/count", json={}, timeout=10)
    response.raise_for_status()
    return response.json()


def _document_events(api_url: str, since: float) -> list[dict]:
    flt = {"event": {"prefix": ["document."]}, "occurred": {"since": _iso(since)}}
    response = httpx.post(f"{api_url}/events/filter", json={"filter": flt, "limit": 50}, timeout=10)
    response.raise_for_status()
    return response.json()["events"]


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat()


def test_refused_webhooks_touch_no_store_and_start_no_run(tmp_path, monkeypatch, prefect_api_url):
    data_dir = tmp_path / "data"
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.md").write_text("# A\n")
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(data_dir))
    settings = ServiceSettings(webhook_secret=SECRET, webhook_max_body=2048, source_root=root)
    tag = uuid.uuid4().hex[:8]
    ok = json.dumps({"event": "updated", "source_id": f"{tag}.md"}).encode()

    def raw(data: object) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(data).encode()
        return body, _headers(body)

    now = int(time.time())
    cases = [
        (ok, {"Content-Type": "application/json"}),  # no signature
        (ok, _headers(ok, secret="not-the-secret")),
        (ok, _headers(ok, ts=now - 3600)),  # stale
        (ok + b" " * 4096, _headers(ok + b" " * 4096)),  # oversize
        (ok, _headers(ok) | {"Content-Type": "application/x-www-form-urlencoded"}),
        raw({"event": "updated", "source_id": ["a.md"]}),
        raw({"event": "updated", "source_system": 7, "source_id": "a.md"}),  # a number where a name belongs
        raw({"event": "deleted", "source_id": "a.md", "document_id": 12}),
        raw([{"event": "updated"}]),
        raw({"event": "updated", "source_id": "../../etc/passwd"}),
        raw({"event": "deleted", "source_id": "a.md", "document_id": "../../data"}),
        raw({"event": "updated", "source_id": "a.md", "path": "/etc/passwd"}),
    ]
    started = time.time() - 1
    runs_before = _flow_run_count(prefect_api_url)
    with TestClient(create_app(settings, PrefectEventSink(prefect_api_url), data_dir=data_dir)) as client:
        (root / f"{tag}-r.md").write_text("# R\n")
        replayed_body, replayed_headers = raw({"event": "updated", "source_id": f"{tag}-r.md"})
        replayed_headers["X-Unichunk-Delivery"] = f"dlv-{tag}"
        first = client.post("/webhooks/documents", content=replayed_body, headers=replayed_headers)
        assert first.status_code == 202  # the only accepted one: it emits an event, nothing more
        cases.append((replayed_body, replayed_headers))  # and its replay
        for body, headers in cases:
            response = client.post("/webhooks/documents", content=body, headers=headers)
            assert 400 <= response.status_code < 500, (body[:80], response.status_code, response.text)
    time.sleep(1)
    stored = sorted(p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*") if p.is_file())
    # The receiver's own records only: its replay cache, and the update queue holding the accepted one.
    assert stored and all(p.startswith(("webhook/replay.db", "webhook/updates.db")) for p in stored), stored
    assert [u.entry for u in UpdateQueue.of(SinkSettings(data_dir=data_dir)).entries()] == [
        first.json()["event_id"]
    ]
    assert _flow_run_count(prefect_api_url) == runs_before
    accepted = first.json()["event_id"]
    deadline = time.monotonic() + 60  # the server stores events asynchronously: wait for the accepted one
    while accepted not in _our_event_ids(prefect_api_url, started, tag):
        assert time.monotonic() < deadline, "the accepted webhook's event never reached Prefect"
        time.sleep(0.5)
    time.sleep(1)  # anything the refused requests had emitted would be stored by now
    assert _our_event_ids(prefect_api_url, started, tag) == [accepted]


def _our_event_ids(api_url: str, since: float, tag: str) -> list[str]:
    markers = (tag, "passwd", "../../data")
    return [e["id"] for e in _document_events(api_url, since) if any(m in json.dumps(e) for m in markers)]
