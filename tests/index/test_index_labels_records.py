"""Access labels in the records, on each backend (`records_settings`: SQLite, PostgreSQL): the status table's
`labels`, the source registry's labels and rules, and tables made before labels existed, which must open
(their documents have none) and gain the columns when a writer opens them.
"""

from __future__ import annotations

from sqlalchemy import text

from unichunk.index import source_registry as registry_module
from unichunk.index import status as status_module
from unichunk.index.source_registry import SourceRecord, SourceRegistry
from unichunk.index.status import StatusStore, processed_fields


def _status(settings, *, readonly: bool = False) -> StatusStore:  # type: ignore[no-untyped-def]
    return StatusStore.of(settings.for_generation("g1"), readonly=readonly)


def test_labels_are_recorded_per_document_and_expected_per_chunk(records_settings) -> None:  # type: ignore[no-untyped-def]
    store = _status(records_settings)
    store.upsert_many(
        [
            ("d1", processed_fields(["c1", "c2"], labels=("hr", "eng"))),
            ("d2", processed_fields(["c3"])),
        ]
    )
    rows = store.get_many(["d1", "d2"])
    assert (rows["d1"].labels, rows["d2"].labels) == (("eng", "hr"), ())
    assert store.expected_labels() == {"c1": ("eng", "hr"), "c2": ("eng", "hr"), "c3": ()}
    store.upsert("d1", labels=())  # only the labels change: the rest of the row stays
    row = store.get("d1")
    assert (row.labels, row.chunk_ids, row.state) == ((), ["c1", "c2"], "processed")


def test_a_status_table_made_before_labels_opens_and_gains_the_column(records_settings) -> None:  # type: ignore[no-untyped-def]
    database = _status(records_settings).db
    with database.write() as conn:  # the table as an earlier version made it (no `labels` column)
        conn.execute(text("DROP TABLE documents"))
        earlier = (
            status_module._POSTGRES_SCHEMA
            if database.dialect == "postgresql"
            else status_module._SQLITE_SCHEMA
        )
        conn.execute(text(earlier[0].replace(",\n    labels TEXT", "")))
        conn.execute(
            text(
                "INSERT INTO documents (document_id, state, chunk_ids, created_at, updated_at) "
                "VALUES (:d, 'processed', '[\"c1\"]', 'then', 'then')"
            ),
            {"d": database.pack("old")},
        )
    assert "labels" not in database.columns("documents")
    reader = _status(records_settings, readonly=True)
    assert reader.get("old").labels == ()  # no labels: readable by admins only
    assert reader.expected_labels() == {"c1": ()}
    writer = _status(records_settings)
    assert "labels" in writer.db.columns("documents")
    writer.upsert("old", labels=("hr",))
    assert _status(records_settings, readonly=True).get("old").labels == ("hr",)


def test_the_source_registry_keeps_labels_and_rules_and_opens_an_earlier_table(records_settings) -> None:  # type: ignore[no-untyped-def]
    registry = SourceRegistry.of(records_settings)
    writer = registry.create()
    with writer.write() as conn:  # the table as an earlier version made it
        earlier = (
            registry_module._POSTGRES_SCHEMA
            if writer.dialect == "postgresql"
            else registry_module._SQLITE_SCHEMA
        )
        conn.execute(text("DROP TABLE sources"))
        conn.execute(text(earlier[0].replace(",\n    labels TEXT,\n    label_rules TEXT", "")))
        conn.execute(
            text(
                "INSERT INTO sources (name, kind, root, first_seen, last_listed) "
                "VALUES (:n, 'directory', :r, 'then', 'then')"
            ),
            {"n": writer.pack("docs"), "r": writer.pack("/srv/docs")},
        )
    assert "labels" not in writer.columns("sources")
    (old,) = SourceRegistry.of(records_settings).all()
    assert (old.name, old.labels, old.label_rules) == ("docs", (), ())
    SourceRegistry.of(records_settings).record(
        SourceRecord("docs", "directory", "/srv/docs", labels=("staff",), label_rules=("hr/**=hr",))
    )
    (new,) = SourceRegistry.of(records_settings).all()
    assert (new.labels, new.label_rules) == (("staff",), ("hr/**=hr",))


def test_a_shard_manifest_carries_each_items_labels_and_reads_an_earlier_one() -> None:
    import json

    from unichunk.chunking.sources import SourceItem
    from unichunk.index.shard_records import _dump, _load

    item = SourceItem("docs", "hr/pay.md", "/srv/docs/hr/pay.md", 10, 20, ("hr", "staff"))
    assert _load(_dump(item)) == item
    earlier = json.dumps(["docs", "a.md", "/srv/docs/a.md", 1, 2])  # written before labels
    assert _load(earlier) == SourceItem("docs", "a.md", "/srv/docs/a.md", 1, 2)
