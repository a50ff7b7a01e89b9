"""Listing documents (`Pipeline.document_page`, and `documents()` with no IDs) on each records backend
(`records_settings`: SQLite, PostgreSQL), where the database filters by state, source and the caller's
labels, counts, orders and cuts the page.

The property: for random records (labels or none, states, sources) and random callers, a page equals the
rule applied in Python to every record (`Principal.may_read`), in order, sliced; and only the page's rows
are fetched. Labels that differ only in `_`, `.`, `-`, `:` or by a prefix check that labels are compared
whole, never as text patterns.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from unichunk import Pipeline
from unichunk.access import OWNER, Principal
from unichunk.index import status as status_module
from unichunk.index.document_states import STATES
from unichunk.index.registry import GenerationRegistry
from unichunk.index.status import DocumentStatus, StatusStore
from unichunk.results import DocumentInfo
from unichunk.sinks.config import SinkSettings

EXAMPLES = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
LABELS = ("eng", "eng_x", "eng.x", "engx", "en", "a:b", "a-b", "hr")
SOURCES = (None, "docs", "mail", "é", "docs/x")
NAMES = st.text(alphabet="ab/é0 ", min_size=1, max_size=3)
GENERATION = "g0000000000"

# A record: (its document ID, source system, source ID, state, labels: None for a row that never had any).
records = st.lists(
    st.tuples(
        NAMES,
        st.sampled_from(SOURCES),
        st.none() | NAMES,
        st.sampled_from(STATES),
        st.none() | st.frozensets(st.sampled_from(LABELS), max_size=3),
    ),
    min_size=2,
    max_size=30,
    unique_by=lambda record: record[0],
)
callers = st.just(OWNER) | st.builds(
    lambda labels: Principal(name="reader", labels=tuple(labels)),
    st.frozensets(st.sampled_from(LABELS), max_size=5),
)


@pytest.fixture
def listed(records_settings: SinkSettings) -> Iterator[tuple[Pipeline, StatusStore]]:
    """A Pipeline whose live generation has an empty status table, and that table's writer."""
    GenerationRegistry.of(records_settings).bootstrap(GENERATION, "0" * 16, {})
    yield Pipeline(records_settings), StatusStore.of(records_settings.for_generation(GENERATION))


def _order(row: DocumentStatus) -> tuple[Any, ...]:
    """The listing's order: source, then ID there, a missing one first; the document ID breaks ties."""
    return (
        row.source_system is not None,
        row.source_system or "",
        row.source_id is not None,
        row.source_id or "",
        row.document_id,
    )


def _expected(pipeline: Pipeline, store: StatusStore, state: Any, source: Any) -> list[DocumentInfo]:
    """Every record read whole and filtered in Python (the rule of `may_read`), in order: the reference."""
    kept = sorted(
        (
            row
            for row in store.rows()
            if state in (None, row.state)
            and source in (None, row.source_system)
            and pipeline.principal.may_read(row.labels)
        ),
        key=_order,
    )
    found = pipeline.documents([row.document_id for row in kept])  # the look-up by ID filters in Python
    return [found[row.document_id] for row in kept]


@EXAMPLES
@given(
    rows=records,
    caller=callers,
    state=st.none() | st.sampled_from(STATES),  # no filter half the time
    source=st.none() | st.sampled_from([*(s for s in SOURCES if s), "none such"]),
    data=st.data(),
)
def test_a_page_is_the_readable_records_in_order_sliced(
    listed: tuple[Pipeline, StatusStore],
    rows: list[tuple[str, str | None, str | None, str, frozenset[str] | None]],
    caller: Principal,
    state: Any,
    source: Any,
    data: st.DataObject,
) -> None:
    pipeline, store = listed
    with store.db.write() as conn:
        conn.execute(text("DELETE FROM documents"))
    for document_id, source_system, source_id, row_state, labels in rows:  # in no order (`upsert_many` sorts)
        store.upsert(
            document_id,
            source_system=source_system,
            source_id=source_id,
            state=row_state,
            chunk_ids=[f"{document_id}:0"],
            path=f"/srv/{document_id}",  # shown to admins only
            **({} if labels is None else {"labels": labels}),
        )
    view = pipeline.scoped(caller)
    expected = _expected(view, store, state, source)
    offset = data.draw(st.integers(0, len(expected) + 1), label="offset")  # mostly within the records
    limit = data.draw(st.integers(1, len(expected) + 1), label="limit")
    fetched: list[str] = []
    original = DocumentStatus.from_row.__func__  # type: ignore[attr-defined]

    def counted(cls: type[DocumentStatus], row: Any) -> DocumentStatus:
        fetched.append(row["document_id"])
        return original(cls, row)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(status_module.DocumentStatus, "from_row", classmethod(counted))
        page = view.document_page(state=state, source=source, offset=offset, limit=limit)
    assert page.total == len(expected)
    assert page.documents == expected[offset : offset + limit]
    assert len(fetched) == len(page.documents)  # no record beyond the page, none it may not read
    assert list(view.documents(state=state, source=source).values()) == expected


def test_a_table_made_before_labels_lists_its_documents_to_admins_only(
    listed: tuple[Pipeline, StatusStore],
) -> None:
    pipeline, store = listed
    database = store.db
    with database.write() as conn:  # the table as an earlier version made it (no `labels` column)
        earlier = (
            status_module._POSTGRES_SCHEMA
            if database.dialect == "postgresql"
            else status_module._SQLITE_SCHEMA
        )
        conn.execute(text("DROP TABLE documents"))
        conn.execute(text(earlier[0].replace(",\n    labels TEXT", "")))
        conn.execute(
            text(
                "INSERT INTO documents (document_id, state, created_at, updated_at) "
                "VALUES (:d, 'processed', 'then', 'then')"
            ),
            {"d": database.pack("old")},
        )
    reader = pipeline.scoped(Principal(name="reader", labels=("hr",)))
    assert (reader.document_page().total, reader.documents()) == (0, {})
    page = pipeline.document_page()
    assert (page.total, [d.document_id for d in page.documents]) == (1, ["old"])
