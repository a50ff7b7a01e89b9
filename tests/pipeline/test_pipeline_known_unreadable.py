"""`unichunk.engine.batches.known_unreadable`: which failed documents a run skips and reports instead of reading.

Only a load failure of a file unchanged since (same path, size and mtime) is skipped: anything else may
succeed on a retry (a store failure, a chunking bug fixed since, a changed file, a raised size limit).
The end-to-end behaviour is in tests/faults/test_faults_bad_files.py and test_faults_hostile_input.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from unichunk.chunking.sources import SourceItem
from unichunk.engine.batches import known_unreadable
from unichunk.index.status import DocumentStatus

ITEM = SourceItem("fs", "bad.txt", "/corpus/bad.txt", 120, 1_700_000_000_000_000_000)
LIMIT = 64 * 1024 * 1024  # the run's largest document: far above these files
ROW = DocumentStatus(
    document_id=ITEM.document_id,
    state="failed",
    error="load failed: bad.txt: not valid utf-8 text: invalid start byte at byte offset 4",
    failure="unreadable",
    path=ITEM.path,
    size=ITEM.size,
    mtime_ns=ITEM.mtime_ns,
)


def test_an_unchanged_file_that_failed_to_load_is_known_unreadable() -> None:
    assert known_unreadable(ITEM, ROW, LIMIT)


@pytest.mark.parametrize(
    "row",
    [
        None,  # never seen
        replace(ROW, state="processed", error=None),
        replace(ROW, error="write[vectors] failed after retries: ConnectionError: down", failure=None),
        replace(ROW, error="chunking failed: RuntimeError: strategy bug", failure=None),
        replace(
            ROW, failure=None
        ),  # failed to load under an earlier version, which kept no reason: once more
        replace(ROW, mtime_ns=ITEM.mtime_ns - 1),  # touched or rewritten since
        replace(ROW, size=ITEM.size + 1),
        replace(ROW, path="/elsewhere/bad.txt"),
    ],
)
def test_anything_else_is_read_again(row: DocumentStatus | None) -> None:
    assert not known_unreadable(ITEM, row, LIMIT)


def test_a_file_refused_for_its_size_is_retried_once_the_limit_allows_it() -> None:
    row = replace(
        ROW,
        error="load failed: /corpus/bad.txt: file is 120 bytes, over the 100-byte limit",
        failure="too_large",
    )
    assert known_unreadable(ITEM, row, 100)  # still over the limit: reading it again would fail the same way
    assert not known_unreadable(ITEM, row, 1000)
