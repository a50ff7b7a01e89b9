"""The pipeline's records, on each backend (`records_settings`): the document status table and the chunk cache."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.index.chunk_cache import ChunkCache, ChunkKey
from unichunk.index.document_leases import DocumentLeases
from unichunk.index.registry import GenerationRegistry
from unichunk.index.source_registry import SourceRecord, SourceRegistry
from unichunk.index.status import STATES, StatusStore, failed_fields, processed_fields, processing_fields
from unichunk.sinks.config import SinkSettings


def _status(settings, generation: str = "g1", *, readonly: bool = False) -> StatusStore:
    return StatusStore.of(settings.for_generation(generation), readonly=readonly)


def test_status_store_incremental_rule_and_expected_ids(records_settings):
    store = _status(records_settings)
    store.mark_processing("d1", source_system="fs", source_id="a.md", path="/x/a.md")
    assert store.get("d1").state == "processing"
    assert not StatusStore.is_current(store.get("d1"), "h1", "f1")
    store.mark_processed("d1", chunk_ids=["c1", "c2"], content_hash="h1", fingerprint="f1")
    row = store.get("d1")
    assert row.state == "processed" and row.chunk_count == 2 and row.last_success_at
    assert row.source_id == "a.md"  # columns not given keep their values
    assert StatusStore.is_current(row, "h1", "f1")
    assert not StatusStore.is_current(row, "h2", "f1") and not StatusStore.is_current(row, "h1", "f2")
    store.mark_failed("d1", "boom")
    row = store.get("d1")
    assert (row.state, row.error, row.chunk_ids) == ("failed", "boom", ["c1", "c2"])
    assert not StatusStore.is_current(row, "h1", "f1")
    store.mark_processed("d2", chunk_ids=["c3"], content_hash="h", fingerprint="f")
    assert store.expected_chunk_ids() == {"c1", "c2", "c3"}
    assert store.counts() == {"pending": 0, "processing": 0, "processed": 1, "failed": 1}
    assert [r.document_id for r in store.rows(state="failed")] == ["d1"]
    assert store.delete("d1") and not store.delete("d1")
    assert store.get("d1") is None
    with pytest.raises(ValueError, match="unknown status columns"):
        store.upsert("d3", colour="red")


def test_status_store_survives_concurrent_writers(records_settings):
    store = _status(records_settings)

    def writer(n: int) -> None:
        other = _status(records_settings)  # each thread its own store object, as separate runs
        for i in range(25):
            other.mark_processed(f"d{n}-{i}", chunk_ids=[f"c{n}-{i}"], content_hash="h", fingerprint="f")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.counts()["processed"] == 100 and len(store.expected_chunk_ids()) == 100


def test_readonly_status_store_on_a_fresh_data_dir_creates_nothing(records_settings):
    store = _status(records_settings, readonly=True)
    assert store.get_many(["x"]) == {} and store.rows() == [] and store.expected_chunk_ids() == set()
    assert store.counts() == dict.fromkeys(STATES, 0)
    assert not records_settings.data_dir.exists()
    assert not store.db.has_table("documents")


def _chunks(document: Document, pieces: list[tuple[int, int]]) -> list[Chunk]:
    return chunks_from_spans(document, [Span(s, e, 1, ("Title",)) for s, e in pieces])


def test_chunk_store_round_trip_and_prune(records_settings):
    store = ChunkCache.of(records_settings)
    v1 = Document(text="alpha beta", source_system="fs", source_id="a.md", metadata={"k": 1})
    chunks = _chunks(v1, [(0, 5), (6, 10)])
    key = store.put(v1, "fp", chunks)
    assert key == ChunkKey(v1.document_id, v1.content_hash, "fp") and store.has(key)
    assert store.load(key) == (v1, chunks)
    assert store.get_chunks(ChunkKey(v1.document_id, v1.content_hash, "other")) is None
    v2 = Document(text="gamma", source_system="fs", source_id="a.md")
    key2 = store.put(v2, "fp", _chunks(v2, [(0, 5)]))
    other_settings = store.put(v1, "fp-rebuild", chunks)  # v1 chunked by a rebuild's settings
    assert store.prune(v1.document_id, keep_content_hash=v2.content_hash, fingerprint="fp") == 1
    assert not store.has(key) and store.has(key2)
    assert store.load(other_settings) == (v1, chunks)  # another generation's chunks (and document) stay
    assert store.prune(v1.document_id, keep_content_hash=v2.content_hash, fingerprint="fp-rebuild") == 1
    with pytest.raises(KeyError):
        store.load(key)
    with pytest.raises(KeyError):
        store.load(other_settings)
    assert store.get_document(v1.document_id, v1.content_hash) is None
    assert store.delete_document(v1.document_id) == 1 and not store.has(key2)


def test_chunk_store_batch_calls_match_the_single_ones(records_settings):
    store = ChunkCache.of(records_settings)
    docs = [Document(text=f"text number {i}", source_system="fs", source_id=f"{i}.md") for i in range(3)]
    entries = [(d, _chunks(d, [(0, 4), (5, len(d.text))])) for d in docs]
    keys = store.put_many(entries, "fp")
    assert keys == [ChunkKey(d.document_id, d.content_hash, "fp") for d in docs]
    assert store.put_many([], "fp") == []
    # Order follows the keys given, not the storage order.
    assert store.load_many(list(reversed(keys))) == list(reversed(entries))
    missing = ChunkKey(docs[0].document_id, docs[0].content_hash, "other")
    assert store.existing([*keys, missing]) == set(keys)
    assert store.get_chunks_many([keys[1], missing]) == {keys[1]: entries[1][1]}
    with pytest.raises(KeyError, match="no stored chunks"):
        store.load_many([keys[0], missing])
    # A newer version of two documents: prune_many drops the old versions of exactly those two.
    newer = [Document(text=f"edited {i}", source_system="fs", source_id=f"{i}.md") for i in range(2)]
    new_keys = store.put_many([(d, _chunks(d, [(0, len(d.text))])) for d in newer], "fp")
    assert store.prune_many(new_keys) == 2
    assert store.existing(keys) == {keys[2]} and store.existing(new_keys) == set(new_keys)
    assert store.get_document(docs[0].document_id, docs[0].content_hash) is None


def test_rows_sort_alike_on_both_backends_unknown_sources_first(records_settings):
    store = _status(records_settings)
    store.upsert_many(
        [
            ("d1", failed_fields("e", source_system="b", source_id="x")),
            ("d2", failed_fields("e")),  # a document with no known source
            ("d3", failed_fields("e", source_system="a", source_id=None)),
            ("d4", failed_fields("e", source_system="a", source_id="y")),
        ]
    )
    assert [r.document_id for r in store.rows()] == ["d2", "d3", "d4", "d1"]


def test_status_upsert_many_is_one_transaction(records_settings):
    store = _status(records_settings)
    store.upsert_many(
        [
            ("d1", processed_fields(["c1"], content_hash="h", fingerprint="f")),
            ("d2", failed_fields("boom", source_id="b.md")),
            ("d3", processing_fields(source_id="c.md")),
        ]
    )
    rows = store.get_many(["d1", "d2", "d3"])
    assert (rows["d1"].state, rows["d1"].chunk_ids, rows["d1"].chunk_count) == ("processed", ["c1"], 1)
    assert (rows["d2"].state, rows["d2"].error, rows["d3"].state) == ("failed", "boom", "processing")
    # One bad row fails the whole batch before anything is written.
    with pytest.raises(ValueError, match="unknown status columns"):
        store.upsert_many([("d4", processing_fields()), ("d5", {"colour": "red"})])
    assert store.get("d4") is None
    store.upsert_many([])  # nothing to do is not an error


# Any text a user can put in a record: NUL and every other control character, any plane; not a lone
# surrogate, which SQLite's driver cannot encode (PostgreSQL stores even that, see below).
USER_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    names=st.lists(st.tuples(USER_TEXT, USER_TEXT), min_size=1, max_size=4, unique=True),
    path=USER_TEXT,
    error=USER_TEXT,
    text=USER_TEXT.filter(str.strip),
)
@example(names=[("a\x00b", "\x00"), ("a", "b\x00")], path="/x\x00y", error="bad\x00\n", text="nul\x00here")
def test_user_text_round_trips_exactly_in_every_record(records_settings, names, path, error, text):
    """Paths, source names and IDs, errors, labels and document text come back exactly, NUL included
    (PostgreSQL's TEXT cannot hold one: those columns are BYTEA there), and status rows sort alike on both
    backends (by code point)."""
    status = _status(records_settings)
    ids = [f"id\x00{system}\x00{source_id}" for system, source_id in names]  # a caller's own IDs
    status.upsert_many(
        (document_id, failed_fields(error, source_system=system, source_id=source_id, path=path))
        for document_id, (system, source_id) in zip(ids, names, strict=True)
    )
    found = status.get_many(ids)
    for document_id, (system, source_id) in zip(ids, names, strict=True):
        row = found[document_id]
        assert (row.source_system, row.source_id, row.path, row.error) == (system, source_id, path, error)
    listed = [(r.source_system, r.source_id) for r in status.rows() if r.document_id in ids]
    assert listed == sorted(names)
    assert [r.document_id for r in status.rows(source_system=names[0][0]) if r.document_id in ids] == [
        d
        for d, (system, _) in sorted(zip(ids, names, strict=True), key=lambda p: p[1])
        if system == names[0][0]
    ]
    assert status.delete_many(ids) == len(ids) and status.get_many(ids) == {}

    cache = ChunkCache.of(records_settings)
    document = Document(text=text, source_system="fs", source_id=names[0][1] or "x", document_id=ids[0])
    key = cache.put(document, "fp", _chunks(document, [(0, len(text))]))
    assert cache.load(key) == (document, _chunks(document, [(0, len(text))]))
    assert ids[0] in cache.document_ids()
    assert cache.delete_documents([ids[0]]) == 1

    registry = GenerationRegistry.of(records_settings)
    generation = f"g{len(registry.all())}"  # a new one per example: a known one keeps its description
    registry.begin_build(generation, "f", {"note": text}, 1)
    registry.mark_failed(generation, error)
    built = registry.get(generation)
    assert (built.last_error, built.description) == (error, {"note": text})

    sources = SourceRegistry.of(records_settings)
    record = SourceRecord(names[0][0] or "s", "paths", path, (text,), (path, error))
    sources.record(record)
    assert record in sources.all()

    leases = DocumentLeases.of(records_settings)
    assert leases.acquire("holder", "g", ids, 60, label=error) == set(ids)
    assert leases.held("holder", "g") == set(ids)
    assert leases.held_by_others("other", "g", ids) == dict.fromkeys(ids, error or "holder")
    leases.release_all("holder")


def test_postgresql_keeps_even_a_lone_surrogate(database_url):
    """A file name that is not UTF-8 reaches Python with lone surrogates; PostgreSQL keeps it exactly
    (SQLite's driver refuses to encode it, as it always has)."""
    settings = SinkSettings(data_dir="/nonexistent", database_url=database_url)
    status = StatusStore.of(settings.for_generation("g1"))
    name = "caf\udce9.txt"
    status.mark_failed("d1", f"cannot read {name}", source_system="fs", source_id=name, path=f"/x/{name}")
    row = status.get("d1")
    assert (row.source_id, row.path, row.error) == (name, f"/x/{name}", f"cannot read {name}")


def test_a_status_table_made_by_an_earlier_version_gains_the_failure_column(records_settings):
    """Tables made before `failure` existed: a reader reads it as NULL, the first writer adds it, and a
    load failure recorded since carries its reason as data."""
    from sqlalchemy import text

    from unichunk.index import status as status_module

    database = _status(records_settings).db
    with database.write() as conn:  # the table as an earlier version made it (no `failure` column)
        conn.execute(text("DROP TABLE documents"))
        earlier = (
            status_module._POSTGRES_SCHEMA
            if database.dialect == "postgresql"
            else status_module._SQLITE_SCHEMA
        )
        conn.execute(text(earlier[0].replace(",\n    failure TEXT", "")))
        conn.execute(
            text(
                "INSERT INTO documents (document_id, state, error, created_at, updated_at) "
                "VALUES (:d, 'failed', :e, 'then', 'then')"
            ),
            {"d": database.pack("old"), "e": database.pack("load failed: a.txt: not valid utf-8 text")},
        )
    assert "failure" not in database.columns("documents")
    old = _status(records_settings, readonly=True).get("old")
    assert (old.state, old.failure) == ("failed", None)  # no reason kept: the next run reads it again
    writer = _status(records_settings)
    assert "failure" in writer.db.columns("documents")
    writer.upsert_many([("new", failed_fields("load failed: b.txt: over the limit", "too_large"))])
    rows = _status(records_settings, readonly=True).get_many(["old", "new"])
    assert (rows["old"].failure, rows["new"].failure) == (None, "too_large")
    writer.mark_processed("new", chunk_ids=["c1"])
    assert writer.get("new").failure is None
