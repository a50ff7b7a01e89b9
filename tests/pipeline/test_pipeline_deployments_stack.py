"""`unichunk.local_stack`: the local stack really starts a Prefect server and FalkorDB, is reused when up,
and `down()` stops exactly what `up()` started."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
import redis

from unichunk.local_stack import down, stack_dir, up
from unichunk.sinks.graph.falkordb_server import server_dir
from unichunk.sinks.idle_watchdog import PINNED_FILE


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def test_up_is_idempotent_and_down_stops_what_up_started(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    port = _free_port()
    data_dir = tmp_path / "data"
    try:
        first = up(data_dir, port=port)
        assert first.started_prefect
        assert first.prefect_api_url == f"http://127.0.0.1:{port}/api"
        assert _answers(f"{first.prefect_api_url}/health")
        assert redis.Redis.from_url(first.falkordb_url).ping()
        printed = capsys.readouterr().out
        assert first.prefect_api_url in printed and first.falkordb_url in printed
        assert (stack_dir(data_dir) / "prefect-server.log").exists()
        # `up`'s servers are pinned: their watchdogs stop them only at `down` or with the data dir.
        assert (stack_dir(data_dir) / PINNED_FILE).exists() and (server_dir(data_dir) / PINNED_FILE).exists()

        again = up(data_dir, port=port, echo=False)
        assert not again.started_prefect and again.falkordb_url == first.falkordb_url
    finally:
        stopped = down(data_dir, echo=False)
    assert stopped == {"prefect": True, "falkordb": True}
    assert (
        not (stack_dir(data_dir) / PINNED_FILE).exists() and not (server_dir(data_dir) / PINNED_FILE).exists()
    )
    assert not _answers(f"{first.prefect_api_url}/health")
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(first.falkordb_url, socket_connect_timeout=2).ping()
    assert down(data_dir, echo=False) == {"prefect": False, "falkordb": False}
