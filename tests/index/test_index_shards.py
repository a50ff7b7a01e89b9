"""The stable split of a run's documents into shards, and the records a sharded run's parent and shards share.

Proves: every document lands in exactly one shard, the same one in any process (Python's `hash()` would
differ per process) and for any order or company of documents; shards are balanced; the manifest hands
each shard exactly its documents back, any file name included; an attempt the parent retried is fenced
out (its beats and summary no longer count, and it cannot take the shard back); a parent's records go
when it drops them, and those of a parent that died are swept by the next sharded run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from unichunk.chunking.sources import SourceItem
from unichunk.index import shard_records
from unichunk.index.process_identity import ProcessIdentity
from unichunk.index.shard_records import ShardRecords, SupersededAttempt
from unichunk.index.shards import MAX_SHARDS, shard_of, split
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import dispose_engines

names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=40)
# Any string a file name can be, lone surrogates (undecodable bytes, surrogateescape) included.
raw_names = st.text(st.characters(exclude_characters="\x00"), min_size=1, max_size=40)


@pytest.fixture(params=["sqlite", "postgresql"])
def records(request: pytest.FixtureRequest, tmp_path: Path) -> ShardRecords:
    """The records on the embedded default, or in server mode on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield ShardRecords.of(SinkSettings(data_dir=tmp_path))
        return
    url = request.getfixturevalue("database_url")
    yield ShardRecords.of(SinkSettings(data_dir=tmp_path / "unused", database_url=SecretStr(url)))
    dispose_engines()  # the database is dropped after the test: no pooled connection may linger
    assert not (tmp_path / "unused").exists()  # server mode writes nothing to the data dir


def _item(source_id: str, n: int = 0) -> SourceItem:
    return SourceItem("src", source_id, f"/data/{source_id}", n, n * 1000)


@settings(max_examples=200, deadline=None)
@given(st.lists(names, unique=True, max_size=60), st.integers(1, MAX_SHARDS), st.randoms())
def test_every_document_is_in_exactly_one_shard_whatever_the_order(source_ids, shards, rnd) -> None:
    items = [_item(s, n) for n, s in enumerate(source_ids)]
    parts = split(items, shards)
    assert len(parts) == shards
    placed = [item.document_id for part in parts for item in part]
    assert sorted(placed) == sorted(item.document_id for item in items)  # each once, none lost
    for number, part in enumerate(parts):
        assert all(shard_of(item.document_id, shards) == number for item in part)
        assert part == [item for item in items if item in part]  # the listing's order kept
    shuffled = list(items)
    rnd.shuffle(shuffled)
    again = split(shuffled[: len(shuffled) // 2], shards)  # another order, other company: same shards
    for number, part in enumerate(again):
        assert all(shard_of(item.document_id, shards) == number for item in part)


def test_the_split_is_the_same_in_another_process() -> None:
    """Another interpreter (another hash seed) computes the same shards."""
    ids = [f"doc_{n:016x}" for n in range(500)] + ["naïve 日本語.md", "a\udcff.txt"]
    here = [shard_of(document_id, 7) for document_id in ids]
    code = (
        "import json, sys; from unichunk.index.shards import shard_of; "
        "ids = json.loads(sys.stdin.read()); print(json.dumps([shard_of(i, 7) for i in ids]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(ids),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert json.loads(done.stdout) == here


@pytest.mark.parametrize("shards", [2, 3, 4, 8])
def test_shards_are_balanced(shards: int) -> None:
    """Document IDs as the pipeline makes them (a hash of source and path), 4,000 of them: each shard within
    10% of its share (the binomial spread here is about 3%)."""
    items = [_item(f"notes/{n // 100}/file_{n:05d}.md") for n in range(4000)]
    sizes = [len(part) for part in split(items, shards)]
    share = len(items) / shards
    assert all(abs(size - share) < 0.10 * share for size in sizes), sizes


def test_shard_count_is_bounded() -> None:
    for bad in (0, -1, MAX_SHARDS + 1):
        with pytest.raises(ValueError, match="shards must be between"):
            shard_of("doc", bad)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(raw_names, unique=True, max_size=30), st.integers(1, 5))
def test_the_manifest_hands_each_shard_exactly_its_documents(records, source_ids, shards) -> None:
    parent = uuid.uuid4().hex  # one parent per example: the records outlive examples
    items = [_item(s, n) for n, s in enumerate(source_ids)]
    parts = split(items, shards)
    records.write_manifest(parent, parts)
    for number, part in enumerate(parts):
        assert records.begin(parent, number, 1, f"run-{number}") == part
    assert {n: r.documents for n, r in records.records(parent).items()} == {
        n: len(p) for n, p in enumerate(parts)
    }
    records.drop(parent)


def test_a_retried_attempt_fences_out_the_one_before(records) -> None:
    records.write_manifest("p", [[_item("a"), _item("b")]])
    assert records.records("p")[0].attempt == 0  # nothing begun yet
    assert records.begin("p", 0, 1, "run-1") == [_item("a"), _item("b")]
    record = records.records("p")[0]
    assert (record.attempt, record.flow_run, record.process) == (1, "run-1", ProcessIdentity.current())
    assert records.beat("p", 0, 1, done=1) and records.records("p")[0].beats == 1

    records.begin("p", 0, 2, "run-2")  # the parent gave attempt 1 up and started attempt 2
    assert not records.beat("p", 0, 1, done=2)  # the old attempt's beats no longer count
    assert not records.finish("p", 0, 1, '{"flow": "old"}')  # nor its summary
    with pytest.raises(SupersededAttempt, match="attempt 2 has begun, this is attempt 1"):
        records.begin("p", 0, 1, "run-1")  # a late start of attempt 1 cannot take the shard back
    assert records.finish("p", 0, 2, '{"flow": "new"}')
    record = records.records("p")[0]
    assert (record.attempt, record.flow_run, record.summary, record.done) == (
        2,
        "run-2",
        '{"flow": "new"}',
        0,
    )


def test_records_go_with_the_parent_and_a_dead_parents_are_swept(records, monkeypatch) -> None:
    records.write_manifest("done", [[_item("a")]])
    records.drop("done")
    assert records.records("done") == {}
    with pytest.raises(LookupError, match="the parent run has ended"):
        records.begin("done", 0, 1, "late")

    records.write_manifest("crashed", [[_item("a")]])
    later = time.time() + shard_records.ORPHAN_SECONDS + 60
    monkeypatch.setattr(shard_records.time, "time", lambda: later)
    records.write_manifest("next", [[_item("b")]])  # the next sharded run sweeps what the dead one left
    assert records.records("crashed") == {} and set(records.records("next")) == {0}
    assert records.run_keys() == ["next"]
