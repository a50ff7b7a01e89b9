"""Access labels through real ingests (qdrant-edge with MiniLM, the keyword store, the records, a real Prefect
server): where labels come from (source labels, path rules, an in-memory document's own), that every store
and the records hold them, and that a label change relabels every store without embedding anything, so
`verify` stays clean and a run stopped half-way converges on the next.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from unichunk import Pipeline
from unichunk.chunking.models import Document
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.service.webhook_security import sign
from unichunk.deployments.settings import ServiceSettings
from unichunk.engine.params import IngestParams, IngestSummary, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.index.alignment import verify_alignment
from unichunk.index.generations import live_status, reading_settings
from unichunk.index.source_registry import SourceRegistry
from unichunk.settings import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.pool import close_all_sinks, get_sinks
from unichunk.sinks.vectors.sink import open_vector_sink

SINKS = ("vectors", "keywords")
SECRET = "a-webhook-secret-for-the-labels-tests"
FILES = {
    "hr/salaries.md": "# Salaries\n\nThe salary bands for engineers are reviewed every spring by the board.",
    "eng/design.md": "# Design\n\nThe ingestion pipeline writes every chunk to three stores at once.",
    "notes.md": "# Notes\n\nThe canteen serves soup on Fridays and salad on Mondays.",
}


def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def labels_by_path(settings: SinkSettings) -> dict[str, dict[str, set[tuple[str, ...]]]]:
    """Per store: each document's path (its source ID) -> the label sets its chunks hold."""
    close_all_sinks()
    pinned = reading_settings(settings)
    found: dict[str, dict[str, set[tuple[str, ...]]]] = {}
    with open_vector_sink(pinned) as vectors, BM25Sink(pinned) as keywords:
        for sink in (vectors, keywords):
            by_chunk = sink.chunk_labels()
            chunks = sink.get_chunks(list(by_chunk))
            per_path: dict[str, set[tuple[str, ...]]] = {}
            for chunk_id, labels in by_chunk.items():
                per_path.setdefault(chunks[chunk_id].document_id, set()).add(labels)
            found[sink.name] = per_path
    return found


def hits(pipeline: Pipeline, settings: SinkSettings, query: str, labels: list[str]) -> set[str]:
    """The paths of the documents a labels-filtered search finds, the same in each store."""
    close_all_sinks()
    pinned = reading_settings(settings)
    found = []
    with open_vector_sink(pinned) as vectors, BM25Sink(pinned) as keywords:
        for sink in (vectors, keywords):
            ids = {hit.document_id for hit in sink.search(query, 10, {"labels": labels})}
            found.append({info.source_id for info in pipeline.documents(ids).values()})
    assert found[0] == found[1], found
    return found[0]


def aligned(pipeline: Pipeline) -> bool:
    """`verify` finds the two stores these tests write in line with the records, labels included (the
    graph, not written here, is left out)."""
    report = pipeline.verify()
    kinds = (report.missing, report.extra, report.altered, report.mislabelled)
    return report.counts["vectors"] > 0 and not any(kind.get(name) for kind in kinds for name in SINKS)


def by_source_id(
    pipeline: Pipeline, found: dict[str, set[tuple[str, ...]]]
) -> dict[str, set[tuple[str, ...]]]:
    info = pipeline.documents(found)
    return {info[d].source_id or d: labels for d, labels in found.items()}


def test_source_labels_and_rules_reach_every_store_and_a_change_relabels_without_embedding(
    pipeline_env: Path, tmp_path: Path
) -> None:
    root = corpus(tmp_path)
    settings = SinkSettings(data_dir=pipeline_env)
    with Pipeline(settings, sinks=SINKS) as pipeline:
        first = pipeline.ingest(root, labels=["Staff"], label_rules=["hr/**=hr"])
        assert first.processed == 3 and first.relabelled == 0
        expected = {
            "hr/salaries.md": {("hr", "staff")},
            "eng/design.md": {("staff",)},
            "notes.md": {("staff",)},
        }
        for name, found in labels_by_path(settings).items():
            assert by_source_id(pipeline, found) == expected, name
        records = pipeline.status().documents
        assert {d.source_id: tuple(d.labels) for d in records} == {
            "hr/salaries.md": ("hr", "staff"),
            "eng/design.md": ("staff",),
            "notes.md": ("staff",),
        }
        assert aligned(pipeline)

        # New labels, same files: every store relabelled, nothing chunked or embedded.
        second = pipeline.ingest(root, labels=["all"], label_rules=["hr/**=hr", "eng/**=eng,dev"])
        assert (second.relabelled, second.processed, second.chunked, second.embedded) == (3, 0, 0, 0)
        assert second.chunks_written == {}
        assert hits(pipeline, settings, "every chunk spring", ["dev"]) == {"eng/design.md"}
        assert hits(pipeline, settings, "every chunk spring", ["hr", "nobody"]) == {"hr/salaries.md"}
        assert hits(pipeline, settings, "every chunk spring", []) == set()
        expected = {
            "hr/salaries.md": {("all", "hr")},
            "eng/design.md": {("all", "dev", "eng")},
            "notes.md": {("all",)},
        }
        for name, found in labels_by_path(settings).items():
            assert by_source_id(pipeline, found) == expected, name
        assert aligned(pipeline)

        # A re-index of every recorded source keeps the labels it was given (the registry holds them).
        third = pipeline.ingest()
        assert (third.relabelled, third.processed, third.skipped) == (0, 0, 3)

        # One document's own labels, set directly: kept by later re-indexes, dropped with [].
        hr_id = next(d.document_id for d in pipeline.status().documents if d.source_id == "hr/salaries.md")
        direct = pipeline.relabel(hr_id, ["Secret"])
        assert (direct.relabelled, direct.embedded) == (1, 0)
        assert pipeline.documents([hr_id])[hr_id].labels == ["all", "hr", "secret"]
        assert pipeline.ingest().relabelled == 0
        for found in labels_by_path(settings).values():
            assert by_source_id(pipeline, found)["hr/salaries.md"] == {("all", "hr", "secret")}
        assert pipeline.relabel(hr_id, []).relabelled == 1
        assert pipeline.documents([hr_id])[hr_id].labels == ["all", "hr"]
        assert aligned(pipeline)


def test_a_relabel_stopped_half_way_is_reported_by_verify_and_converges_on_the_next_run(
    pipeline_env: Path, tmp_path: Path
) -> None:
    root = corpus(tmp_path)
    settings = SinkSettings(data_dir=pipeline_env)
    with Pipeline(settings, sinks=SINKS) as pipeline:
        pipeline.ingest(root, labels=["a"])
        hr_id = next(d.document_id for d in pipeline.status().documents if d.source_id == "hr/salaries.md")
    close_all_sinks()
    # As a run that relabelled the vector store and then died would leave it: records and keywords say "a".
    with open_vector_sink(reading_settings(settings)) as vectors:
        assert vectors.relabel(hr_id, ["b"]) >= 1
    close_all_sinks()
    with Pipeline(settings, sinks=SINKS) as pipeline:
        report = pipeline.verify()
        assert report.mislabelled["vectors"] and not report.mislabelled["keywords"]
        assert not report.ok and not report.mislabelled.get("graph")  # no labels in the graph yet: skipped
        again = pipeline.ingest(root, labels=["b"])
        assert (again.relabelled, again.embedded) == (3, 0)
        assert aligned(pipeline)
        for found in labels_by_path(settings).values():
            assert set().union(*found.values()) == {("b",)}


def test_in_memory_documents_carry_their_own_labels_and_a_bad_label_fails_that_document_alone(
    pipeline_env: Path,
) -> None:
    settings = SinkSettings(data_dir=pipeline_env)
    documents = [
        Document(
            text="Quarterly revenue grew by a tenth.", source_id="q3.md", metadata={"labels": ["Finance"]}
        ),
        Document(text="Nobody may read this but admins.", source_id="open.md"),
        Document(
            text="A label with a space is refused.", source_id="bad.md", metadata={"labels": ["no way"]}
        ),
    ]
    with Pipeline(settings, sinks=SINKS) as pipeline:
        summary = pipeline.ingest(documents, source_name="notes", labels=["everyone"])
        assert summary.processed == 2
        assert [f.source_id for f in summary.failed] == ["bad.md"] and "bad label" in summary.failed[0].error
        expected = {"q3.md": {("everyone", "finance")}, "open.md": {("everyone",)}}
        for name, found in labels_by_path(settings).items():
            assert by_source_id(pipeline, found) == expected, name
        # A later ingest of one of them with other labels keeps the other's own labels.
        changed = [
            Document(
                text="Quarterly revenue grew by a tenth.", source_id="q3.md", metadata={"labels": ["board"]}
            )
        ]
        again = pipeline.ingest(changed, source_name="notes", labels=["everyone"])
        assert (again.relabelled, again.embedded) == (1, 0)
        expected = {"q3.md": {("board", "everyone")}, "open.md": {("everyone",)}}
        for found in labels_by_path(settings).values():
            assert by_source_id(pipeline, found) == expected
        assert aligned(pipeline)
    close_all_sinks()


def test_a_webhook_carries_the_documents_own_labels_and_refuses_a_bad_one(
    tmp_path: Path, prefect_api_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiver checks and normalises `labels` and puts them in the event for the ingest-document
    run; a bad label is that request's 422, and nothing reaches Prefect."""
    root = corpus(tmp_path)
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(tmp_path / "data"))
    settings = ServiceSettings(webhook_secret=SECRET, source_root=root, source_name="docs")
    with TestClient(create_app(settings, PrefectEventSink(prefect_api_url))) as client:

        def send(body: dict[str, object]) -> httpx.Response:
            raw = json.dumps(body).encode()
            ts = int(time.time())
            headers = {
                "Content-Type": "application/json",
                "X-Unichunk-Timestamp": str(ts),
                "X-Unichunk-Signature": sign(SECRET, ts, raw),
                "X-Unichunk-Delivery": f"dlv-{uuid.uuid4().hex}",
            }
            return client.post("/webhooks/documents", content=raw, headers=headers)

        bad = send({"event": "updated", "source_id": "notes.md", "labels": ["ok", "not ok"]})
        assert bad.status_code == 422 and "bad label 'not ok'" in bad.text
        good = send({"event": "updated", "source_id": "notes.md", "labels": ["Board", "hr"]})
        assert good.status_code == 202, good.text
    deadline = time.monotonic() + 60
    while True:  # the server stores an event a moment after taking it
        events = httpx.post(
            f"{prefect_api_url}/events/filter",
            json={"filter": {"id": {"id": [good.json()["event_id"]]}}, "limit": 5},
            timeout=10,
        ).json()["events"]
        if events or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [event["payload"]["labels"] for event in events] == [["board", "hr"]]


def test_the_ingest_document_run_keeps_a_webhooks_labels_for_later_scans(
    pipeline_env: Path, tmp_path: Path
) -> None:
    root = corpus(tmp_path)
    settings = SinkSettings(data_dir=pipeline_env)
    with Pipeline(settings, sinks=SINKS) as pipeline:
        pipeline.ingest(root, labels=["staff"], source_name="docs")
    close_all_sinks()
    path = str(root / "notes.md")
    flows = pytest.importorskip("unichunk.flows.documents")
    run = flows.ingest_document(
        path=path, source_system="docs", root=str(root), sinks=list(SINKS), labels=["board"]
    )
    assert (run.relabelled, run.embedded) == (1, 0)
    close_all_sinks()
    with Pipeline(settings, sinks=SINKS) as pipeline:
        for found in labels_by_path(settings).values():
            assert by_source_id(pipeline, found)["notes.md"] == {("board", "staff")}
        # A later scan of the source, and a webhook without labels, keep them.
        assert pipeline.ingest(root, labels=["staff"], source_name="docs").relabelled == 0
        close_all_sinks()
        (root / "notes.md").write_text(FILES["notes.md"] + "\n\nAnd pasta on Wednesdays.")
        edited = flows.ingest_document(path=path, source_system="docs", root=str(root), sinks=list(SINKS))
        assert edited.processed == 1
        for found in labels_by_path(settings).values():
            assert by_source_id(pipeline, found)["notes.md"] == {("board", "staff")}
        assert aligned(pipeline)
    close_all_sinks()


def test_server_mode_keeps_labels_in_postgresql_and_relabels_there(
    pipeline_env: Path, server_records: str, corpus: Path
) -> None:
    """The records, the source registry and the keyword store in PostgreSQL: labels stored, filtered in
    the query, changed without a re-write, and checked by verify."""

    def run(labels: list[str], rules: list[str]) -> IngestSummary:
        params = IngestParams(
            source=SourceParams(root=str(corpus), labels=labels, label_rules=rules), sinks=["keywords"]
        )
        state = ingest(params, return_state=True)
        assert state.is_completed(), state.message
        return state.result()

    first = run(["staff"], ["notes/**=notes"])
    assert (first.processed, first.relabelled) == (3, 0)
    second = run(["staff"], ["notes/**=notes,eng", "guide.md=public"])
    assert (second.processed, second.relabelled, second.chunks_written) == (0, 3, {})
    status = live_status(SinkSettings())
    assert {row.source_id: row.labels for row in status.rows()} == {
        "guide.md": ("public", "staff"),
        "notes/plain.txt": ("eng", "notes", "staff"),
        "notes/page.html": ("eng", "notes", "staff"),
    }
    keywords = get_sinks(["keywords"], reading_settings(SinkSettings()))["keywords"]
    found = keywords.search("keyword index graphs qdrant", 10, {"labels": ["eng"]})
    assert {hit.document_id for hit in found} == {
        row.document_id for row in status.rows() if row.source_id.startswith("notes/")
    }
    report = verify_alignment(
        {"keywords": keywords}, expected=status.expected_chunk_ids(), labels=status.expected_labels()
    )
    assert report.ok and report.mislabelled == {"keywords": set()}
    (record,) = SourceRegistry.of(SinkSettings()).all()
    assert (record.labels, record.label_rules) == (("staff",), ("notes/**=eng,notes", "guide.md=public"))
    assert run(["staff"], ["notes/**=notes,eng", "guide.md=public"]).skipped == 3
