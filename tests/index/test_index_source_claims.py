"""Registering a source is one transaction with its overlap check, on both records backends (issue 29,
item 4): of many runs registering overlapping folders at once (a parent and its subfolders, the same
folder under two names), exactly one is recorded and every other is refused naming both roots."""

from __future__ import annotations

import threading

import pytest

from unichunk.engine.sources import refuse_overlap
from unichunk.index.errors import SourceOverlap
from unichunk.index.source_registry import SourceRecord, SourceRegistry, overlapping


def test_overlap_is_nesting_or_sharing_under_another_name():
    docs = SourceRecord("docs", "directory", "/srv/docs")
    assert overlapping(SourceRecord("guide", "directory", "/srv/docs/guide"), [docs]) == docs
    assert overlapping(SourceRecord("all", "directory", "/srv"), [docs]) == docs
    assert overlapping(SourceRecord("twin", "directory", "/srv/docs"), [docs]) == docs
    assert overlapping(SourceRecord("docs", "directory", "/srv/docs"), [docs]) is None  # itself, again
    assert overlapping(SourceRecord("other", "directory", "/srv/docs-2"), [docs]) is None  # a sibling
    one = SourceRecord("one", "paths", "/srv/docs", paths=("/srv/docs/a.md",))
    assert overlapping(one, [docs]) == docs
    assert overlapping(docs, [one]) == one
    assert overlapping(SourceRecord("x", "paths", "/elsewhere", paths=("/elsewhere/a.md",)), [docs]) is None


def test_concurrent_claims_of_overlapping_sources_record_exactly_one(records_settings, tmp_path):
    root = tmp_path / "ov"
    claims = [
        SourceRecord("ov", "directory", str(root)),
        SourceRecord("sub", "directory", str(root / "sub")),
        SourceRecord("deep", "directory", str(root / "sub" / "deep")),
        SourceRecord("twin", "directory", str(root)),
    ]
    registry = SourceRegistry.of(records_settings)
    registry.create()  # the table exists before the race: what races is the claim, not the DDL
    go = threading.Barrier(len(claims))
    outcomes: dict[str, str] = {}

    def claim(record: SourceRecord) -> None:
        go.wait()
        try:
            SourceRegistry.of(records_settings).claim(
                record, lambda recorded: refuse_overlap(record, recorded)
            )
            outcomes[record.name] = "recorded"
        except SourceOverlap as exc:
            outcomes[record.name] = str(exc)

    threads = [threading.Thread(target=claim, args=(record,)) for record in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorded = [name for name, outcome in outcomes.items() if outcome == "recorded"]
    assert len(recorded) == 1 and len(outcomes) == len(claims), outcomes
    assert [r.name for r in registry.all()] == recorded
    winner = next(r for r in claims if r.name == recorded[0])
    for record in claims:
        if record.name != winner.name:
            message = outcomes[record.name]
            assert record.root in message and winner.root in message and "forget-source" in message, message


def test_a_refused_claim_records_nothing(records_settings, tmp_path):
    registry = SourceRegistry.of(records_settings)
    registry.record(SourceRecord("a", "directory", str(tmp_path / "a")))
    with pytest.raises(SourceOverlap):
        record = SourceRecord("b", "directory", str(tmp_path / "a" / "b"))
        registry.claim(record, lambda recorded: refuse_overlap(record, recorded))
    assert [r.name for r in registry.all()] == ["a"]
    assert registry.forget("a") and registry.all() == [] and not registry.forget("a")
