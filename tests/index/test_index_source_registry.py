"""The source registry: how to list each ingested source again, the latest listing's settings winning."""

from __future__ import annotations

from unichunk.index.source_registry import SourceRecord, SourceRegistry


def test_recorded_sources_come_back_as_they_were_listed_last(records_settings):
    registry = SourceRegistry.of(records_settings)
    assert registry.all() == [] and not records_settings.data_dir.exists()  # reading creates nothing
    docs = SourceRecord("docs-1a2b3c4d", "directory", "/srv/docs", ("**/*.md",))
    files = SourceRecord("fs", "paths", None, paths=("/srv/a.txt", "/srv/b.txt"))
    registry.record(docs)
    registry.record(files)
    registry.record(
        SourceRecord("docs-1a2b3c4d", "directory", "/srv/docs", ("**/*.md", "**/*.txt"), (), True)
    )
    found = {r.name: r for r in registry.all()}
    assert found["fs"] == files
    assert (
        found["docs-1a2b3c4d"].patterns == ("**/*.md", "**/*.txt") and found["docs-1a2b3c4d"].follow_symlinks
    )
    assert found["docs-1a2b3c4d"].first_seen <= found["docs-1a2b3c4d"].last_listed
