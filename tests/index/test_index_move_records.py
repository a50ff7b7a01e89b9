"""`unichunk.index.move_records`: a data dir's records, made by the embedded stores, copied into an empty PostgreSQL
read back the same through the stores in server mode; a database that holds an index is refused, and a move
that stopped half-way runs again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import SecretStr

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Document
from unichunk.index.chunk_cache import ChunkCache
from unichunk.index.move_records import MoveRefused, main, move_records
from unichunk.index.registry import GenerationRegistry
from unichunk.index.source_registry import SourceRecord, SourceRegistry
from unichunk.index.status import StatusStore, failed_fields, processed_fields
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import dispose_engines


@pytest.fixture
def server(database_url: str, tmp_path):  # type: ignore[no-untyped-def]
    yield SinkSettings(data_dir=tmp_path / "elsewhere", database_url=SecretStr(database_url))
    dispose_engines()


def _embedded_index(data_dir) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Records as runs leave them: a live and a retired generation, status rows, cached chunks, sources."""
    settings = SinkSettings(data_dir=data_dir, database_url=None)
    registry = GenerationRegistry.of(settings)
    registry.bootstrap("gold", "f-old", {"chunking": {"name": "token_window"}})
    registry.begin_build("gnew", "f-new", {"chunking": {"name": "sentence"}}, 2)
    registry.switch_live("gnew", timedelta(hours=1))
    documents = [
        Document(text=f"text {n}\x00 with a NUL", source_system="docs", source_id=f"{n}.md") for n in range(3)
    ]
    cache = ChunkCache.of(settings)
    keys = cache.put_many([(d, chunks_from_spans(d, [Span(0, len(d.text), 1, ())])) for d in documents], "fp")
    for generation in ("gold", "gnew"):
        StatusStore.of(settings.for_generation(generation)).upsert_many(
            [
                (
                    documents[0].document_id,
                    processed_fields(["c1"], source_system="docs", source_id="0.md", path="/a\x00"),
                ),
                (documents[1].document_id, failed_fields("boom\x00", source_id="1.md", size=2**40)),
            ]
        )
    SourceRegistry.of(settings).record(SourceRecord("docs", "directory", "/srv/docs", ("**/*.md",)))
    return {
        "generations": registry.all(),
        "status": {
            g: StatusStore.of(settings.for_generation(g), readonly=True).rows() for g in ("gold", "gnew")
        },
        "chunks": cache.load_many(keys),
        "keys": keys,
        "sources": SourceRegistry.of(settings).all(),
    }


def test_moved_records_read_back_the_same_in_server_mode(tmp_path, server):
    data_dir = tmp_path / "data"
    before = _embedded_index(data_dir)
    moved = move_records(data_dir, server)
    assert moved == {
        "status gold": 2,
        "status gnew": 2,
        "chunk cache documents": 3,
        "chunk cache chunks": 3,
        "sources": 1,
        "generations": 2,
    }
    assert GenerationRegistry.of(server).all() == before["generations"]
    assert GenerationRegistry.of(server).live().generation_id == "gnew"
    for generation in ("gold", "gnew"):
        rows = StatusStore.of(server.for_generation(generation), readonly=True).rows()
        assert [r.as_dict() for r in rows] == [r.as_dict() for r in before["status"][generation]]
    assert ChunkCache.of(server).load_many(before["keys"]) == before["chunks"]
    assert SourceRegistry.of(server).all() == before["sources"]
    assert not server.data_dir.exists()

    with pytest.raises(MoveRefused, match="holds an index already"):
        move_records(data_dir, server)


def test_a_move_that_stopped_before_the_registry_runs_again(tmp_path, server, monkeypatch, capsys):
    data_dir = tmp_path / "data"
    before = _embedded_index(data_dir)
    import unichunk.index.move_records as mover

    copy = mover.copy_rows

    def cut_at_the_sources(source, target, table):  # type: ignore[no-untyped-def]
        if table == "sources":
            raise OSError("cut")
        return copy(source, target, table)

    monkeypatch.setattr(mover, "copy_rows", cut_at_the_sources)
    with pytest.raises(OSError, match="cut"):
        move_records(data_dir, server)
    assert GenerationRegistry.of(server).all() == []  # not yet an index: the move may run again
    monkeypatch.setattr(mover, "copy_rows", copy)
    monkeypatch.setenv("UNICHUNK_DATABASE_URL", server.database_url.get_secret_value())
    assert main(["--data-dir", str(data_dir)]) == 0
    assert "generations: 2 row(s)" in capsys.readouterr().out
    assert GenerationRegistry.of(server).all() == before["generations"]
    assert SourceRegistry.of(server).all() == before["sources"]
    assert main(["--data-dir", str(data_dir)]) == 2  # once moved, refused
    assert "holds an index already" in capsys.readouterr().err
