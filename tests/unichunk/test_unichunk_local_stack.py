"""`unichunk.local_stack.prefect_api`, the one way every entry point reaches Prefect, and the servers that
stop themselves (`unichunk.sinks.idle_watchdog`): real servers, a real busy machine, a real idle period."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
import servers
from documents import write_files

from unichunk.local_stack import STATE_FILE, down, prefect_api, stack_dir
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.falkordb_server import ensure_server, server_dir, stop_server
from unichunk.sinks.idle_watchdog import group_alive

CORPUS = {
    "guide.md": "# Guide\n\nQdrant stores vectors for semantic search.\n\n## Setup\n\nInstall Prefect and run the flow.\n",
    "notes/plain.txt": "BM25 ranks chunks by keyword overlap. Alice maintains the keyword index in Berlin.\n",
}


def _eventually(condition: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)


def _pid(state: Path) -> int:
    return int(json.loads(state.read_text())["pid"])


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    data = tmp_path / "data"
    yield data
    if data.exists():
        down(data, echo=False)


# --- FalkorDB ---------------------------------------------------------------------------------------------


def test_falkordb_stops_itself_once_no_client_is_connected_for_the_idle_period(data_dir: Path) -> None:
    url = ensure_server(data_dir, idle_seconds=1)
    group = _pid(server_dir(data_dir) / "server.json")
    client = redis.Redis.from_url(url, socket_timeout=5)
    for _ in range(5):  # a connected client is a use, however long it stays
        assert client.ping()
        time.sleep(1)
    assert group_alive(group)
    client.close()
    _eventually(lambda: not group_alive(group), "the unused FalkorDB stopped")
    assert not (server_dir(data_dir) / "server.json").exists()
    assert "unused for 1 s" in (server_dir(data_dir) / "server.log").read_text()
    assert ensure_server(data_dir, idle_seconds=1) != ""  # the next use starts it again
    stop_server(data_dir)


def test_falkordb_stops_when_its_data_dir_is_deleted(data_dir: Path) -> None:
    url = ensure_server(data_dir, idle_seconds=0)  # 0: never for idleness
    group = _pid(server_dir(data_dir) / "server.json")
    assert redis.Redis.from_url(url).ping()
    shutil.rmtree(data_dir)
    _eventually(lambda: not group_alive(group), "FalkorDB stopped with its data dir gone")


# --- Prefect ----------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_two_threads_reach_their_own_data_dirs_server_which_stops_once_unused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # the local servers, not the session's
    from prefect.settings import PREFECT_API_URL, temporary_settings

    dirs = [tmp_path / "a", tmp_path / "b"]
    inside = threading.Barrier(2, timeout=400)
    seen: dict[Path, tuple[str, str | None, bool]] = {}
    errors: list[BaseException] = []

    def use(data: Path) -> None:
        try:
            # Prefect read PREFECT_API_URL when it loaded (a CI run sets one for the session): not here
            with (
                temporary_settings(restore_defaults={PREFECT_API_URL}),
                prefect_api(SinkSettings(data_dir=data, server_idle_seconds=2)) as api,
            ):
                assert api.local is not None
                inside.wait()  # both threads hold their own server at the same time
                time.sleep(5)  # past the idle period: a held server is in use
                healthy = httpx.get(f"{api.url}/health", timeout=30).status_code == 200
                seen[data] = (api.url, PREFECT_API_URL.value(), healthy)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=use, args=(d,)) for d in dirs]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        for data in dirs:
            url, setting, healthy = seen[data]
            assert setting == url and healthy  # each thread's Prefect settings name its own server
            assert json.loads((stack_dir(data) / STATE_FILE).read_text())["api_url"] == url
        assert seen[dirs[0]][0] != seen[dirs[1]][0]
        assert "PREFECT_API_URL" not in os.environ
        # A run left Running by a command killed with SIGKILL does not keep its server for ever.
        api = seen[dirs[0]][0]
        flow = httpx.post(f"{api}/flows/", json={"name": "killed"}, timeout=30).json()
        run = httpx.post(
            f"{api}/flow_runs/", json={"flow_id": flow["id"], "state": {"type": "RUNNING"}}, timeout=30
        ).json()
        assert run["state_type"] == "RUNNING", run
        groups = {data: _pid(stack_dir(data) / STATE_FILE) for data in dirs}
        for data, group in groups.items():
            _eventually(lambda group=group: not group_alive(group), f"{data}'s unused server stopped")
            assert not (stack_dir(data) / STATE_FILE).exists()
            assert "unused for 2 s" in (stack_dir(data) / "prefect-server.log").read_text()
    finally:
        for data in dirs:
            down(data, echo=False)


@pytest.mark.timeout(600)
def test_pipeline_ingest_on_a_busy_machine_uses_the_data_dirs_local_server(tmp_path: Path) -> None:
    """No PREFECT_API_URL, two CPU-bound processes beside it: the Pipeline still ingests, through the data
    dir's recorded server (not a temporary one of its own), which stops once its data dir is deleted."""
    data_dir, corpus = tmp_path / "data", write_files(tmp_path / "corpus", CORPUS)
    code = (
        "import sys\nfrom unichunk import Pipeline\n"
        "summary = Pipeline(data_dir=sys.argv[1], sinks=('vectors', 'keywords')).ingest(sys.argv[2])\n"
        "print(summary.processed, len(summary.failed))\n"
    )
    env = servers.environment_with(PREFECT_API_URL=None, PYTHONPATH=None)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(data_dir), str(corpus)],
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
        )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["2", "0"], done.stdout
        assert "ephemeral" not in done.stderr.lower(), done.stderr[-3000:]
        recorded = json.loads((stack_dir(data_dir) / STATE_FILE).read_text())
        runs = httpx.post(f"{recorded['api_url']}/flow_runs/filter", json={}, timeout=30).json()
        assert runs and all(run["state_type"] == "COMPLETED" for run in runs), runs
        group = int(recorded["pid"])
    except BaseException:
        down(data_dir, echo=False)
        raise
    shutil.rmtree(data_dir)  # as a CI job deletes its temporary data dir
    _eventually(lambda: not group_alive(group), "the server stopped with its data dir gone")


@pytest.mark.timeout(600)
def test_two_data_dirs_in_one_process_each_get_their_runs_events(tmp_path: Path) -> None:
    """The Python API on one data dir, then on another, in one process: each run's events reach its own
    data dir's server (Prefect keeps one events worker per process, bound to the first server it used),
    and no event fails to send."""
    corpus = write_files(tmp_path / "corpus", CORPUS)
    dirs = [tmp_path / "first", tmp_path / "second"]
    code = (
        "import sys\nfrom unichunk import Pipeline\n"
        "for data in sys.argv[2:]:\n"
        "    with Pipeline(data_dir=data, sinks=('keywords',)) as pipeline:\n"
        "        print(pipeline.ingest(sys.argv[1]).processed, flush=True)\n"
    )
    env = servers.environment_with(PREFECT_API_URL=None, PYTHONPATH=None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(corpus), *map(str, dirs)],
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["2", "2"], done.stdout
        assert "failed to process item" not in done.stderr, done.stderr[-3000:]
        urls = [json.loads((stack_dir(d) / STATE_FILE).read_text())["api_url"] for d in dirs]
        assert urls[0] != urls[1]
        for url in urls:
            runs = httpx.post(f"{url}/flow_runs/filter", json={}, timeout=30).json()
            assert len(runs) == 1 and runs[0]["state_type"] == "COMPLETED", runs
            wanted = {"resource": {"id": [f"prefect.flow-run.{runs[0]['id']}"]}}

            def names(url: str = url, wanted: dict = wanted) -> set[str]:
                found = httpx.post(f"{url}/events/filter", json={"filter": wanted}, timeout=30).json()
                return {event["event"] for event in found["events"]}

            # the server stores events in batches (Prefect's event persister): not at once
            _eventually(lambda names=names: "prefect.flow-run.Completed" in names(), f"{url}'s run events")
    finally:
        for data in dirs:
            down(data, echo=False)
