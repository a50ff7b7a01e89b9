"""A burst of webhooks that waits for the store lock is applied by one run, and no update is lost.

`unichunk serve` (every deployment plus the webhook receiver) on a private Prefect server, embedded
stores. After a first ingest, this test takes the embedded store's lock itself (the same `flock` a
re-index holds while it writes: taken here so the burst is certain to wait), rewrites 6 files and sends
their 6 signed `updated` webhooks. Each is accepted and starts its run; once a run waits for the lock, the
lock is let go. Then, while the run that took it is applying the burst, one file is rewritten again and
its webhook sent: an update that arrives mid-way. Proves: all 7 runs complete; one run applied the 6
queued updates (the others say which run applied theirs); the late update was applied by that run only if
it claimed it (never, since it claimed before the webhook came) or else by a later run; every file's latest
content is what is stored; the stores agree.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fault_checks import make_corpus
from served import FINAL, run_state, start_run, wait
from test_faults_overlapping_runs import (  # the `unichunk serve` fixture and its helpers
    Service,
    _assert_aligned,
    _runs,
    _signed_post,
    service,  # noqa: F401 (a fixture)
)

from unichunk.chunking.ids import sha256_hex
from unichunk.engine.store_access import HANDOVER_PREFIX, handover_markers, store_lock_path
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.update_queue import UpdateQueue
from unichunk.sinks.config import SinkSettings

# Three times the runs serve starts at once (UNICHUNK_SERVE_RUN_LIMIT, 2): runs wait for a slot as well as
# for the lock, and the one that takes the lock finds the whole burst queued; each run is a cold process.
BURST = 6


@contextmanager
def holding_store_lock(lock: Path) -> Iterator[None]:
    """The embedded store's lock, as a run takes it (`unichunk.engine.store_access`): a handover marker
    first, so the service's warm readers let go of their shared lock, then the exclusive `flock`."""
    marker = lock.with_name(f"{HANDOVER_PREFIX}{os.getpid()}")
    with lock.open("a+") as handle:
        marker.touch()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        finally:
            marker.unlink(missing_ok=True)
        handle.seek(0)
        handle.truncate()
        handle.write("the test (standing in for a re-index)")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _update(svc: Service, path: Path) -> httpx.Response:
    payload = {"event": "updated", "source_id": path.name, "path": path.name}
    return _signed_post(svc, payload, f"queued-{path.stem}-{uuid.uuid4().hex[:8]}")


def _ingest_first(svc: Service) -> None:
    ingest_id = svc.deployment_id("ingest")
    assert ingest_id
    params = {"params": {"source": {"kind": "directory", "root": str(svc.corpus)}}}
    first = start_run(svc.api, ingest_id, params)
    state = wait("the first ingest", lambda: (s := run_state(svc.api, first)) in FINAL and s, 600, svc.log)
    assert state == "COMPLETED", svc.log.read_text(errors="replace")[-4000:]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_burst_waiting_for_the_lock_is_applied_by_one_run_and_a_late_update_is_kept(
    service: Service,  # noqa: F811 (the imported fixture)
) -> None:
    paths = make_corpus(service.corpus, BURST)
    _ingest_first(service)
    settings = SinkSettings(data_dir=service.data_dir)
    lock = store_lock_path(reading_settings(settings))  # the live generation's
    assert lock is not None
    queue = UpdateQueue.of(settings)
    latest = {path.name: f"Report {path.stem} was rewritten in Faro, version 2.\n" for path in paths}

    with holding_store_lock(lock):
        for path in paths:
            path.write_text(latest[path.name])
        with ThreadPoolExecutor(max_workers=BURST) as pool:
            responses = list(pool.map(lambda p: _update(service, p), paths))
        assert [r.status_code for r in responses] == [202] * BURST, [r.text for r in responses]
        assert len(queue.entries()) == BURST and {u.state for u in queue.entries()} == {"pending"}
        wait("a run to wait for the store lock", lambda: handover_markers(lock), 300, service.log)

    # The lock is free: the run that takes it claims the burst. Rewrite one file and send its webhook
    # while that run is applying the others (or, on a slow start, before it claimed: then it is in the burst).
    wait(
        "a run to claim the burst",
        lambda: any(u.state != "pending" for u in queue.entries()),
        300,
        service.log,
    )
    claimed_before = {u.entry: u.state for u in queue.entries()}
    late = paths[0]
    latest[late.name] = f"Report {late.stem} was rewritten again mid-way, in Braga, version 3.\n"
    late.write_text(latest[late.name])
    response = _update(service, late)
    assert response.status_code == 202, response.text
    late_entry = response.json()["event_id"]

    def all_final() -> list[dict[str, Any]] | None:
        try:
            runs = _runs(service, "ingest-document")
        except httpx.TimeoutException:
            return None
        return runs if len(runs) == BURST + 1 and all(r["state"]["type"] in FINAL for r in runs) else None

    runs = wait(f"{BURST + 1} ingest-document runs to finish", all_final, 720, service.log)
    states = [
        (r["name"], r["state"]["type"], r["state"].get("message")) for r in runs
    ]  # two runs share a name
    assert {state for _, state, _ in states} == {"COMPLETED"}, states

    entries = {u.entry: u for u in queue.entries()}
    assert len(entries) == BURST + 1 and {u.state for u in entries.values()} == {"done"}
    burst_holders = {u.holder for e, u in entries.items() if e != late_entry}
    assert len(burst_holders) == 1, burst_holders  # one run applied the whole burst
    (drainer,) = burst_holders
    # Queued after the burst was claimed (all of it, at once): left for a later run, never settled unread.
    assert set(claimed_before) == set(entries) - {late_entry}
    assert entries[late_entry].holder != drainer
    # Two runs did the work of 11 webhooks; every other run only said which run applied its update.
    applying = {u.holder for u in entries.values()}
    applied_elsewhere = [m for _, _, m in states if m and "applied by" in m]
    assert len(applied_elsewhere) == BURST + 1 - len(applying) == BURST - 1, states

    rows = {r.source_id: r for r in live_status(settings).rows()}
    assert {name: rows[name].content_hash for name in latest} == {
        name: sha256_hex(text) for name, text in latest.items()
    }  # every file's latest content, the mid-way rewrite included
    assert {r.state for r in rows.values()} == {"processed"}
    service.stop()
    assert len(_assert_aligned(service)) == BURST
