"""What a run shows in Prefect, read back from the real Prefect server's API: its name, its Failed state's
message, its summary and failures artifacts, and its INFO lines per batch (issue 16).

The flows run in this process, as the CLI runs them; the served runs (a deployment's, resolved by
Prefect's engine in a subprocess) are checked in `test_pipeline_deployments.py`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx
import pytest

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.sources import default_source_name
from unichunk.engine.params import FailedDocument, IngestParams, IngestSummary, RebuildParams, SourceParams
from unichunk.engine.reports import cause, escape_markdown, failure_message, failures_table, named_failures
from unichunk.engine.run_names import source_label
from unichunk.flows.ingest import ingest
from unichunk.flows.rebuild import rebuild
from unichunk.flows.reindex import reindex

BAD = "bad *[x]|y`_<b>.md"  # markdown in a file name: emphasis, a link, a table pipe, code, HTML


def _api(api: str, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(f"{api}{path}", json=body, timeout=15)
    response.raise_for_status()
    return response.json()


def _artifacts(api: str, run_id: str) -> dict[str, dict[str, Any]]:
    found = _api(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}})
    return {a["key"]: a for a in found}


def _logs(api: str, run_id: str, expect: str, timeout: float = 30) -> list[dict[str, Any]]:
    """The run's log lines (its tasks' too) once one contains `expect`: they reach the API in batches."""
    for handler in logging.getLogger("prefect.flow_runs").handlers:
        handler.flush()
    deadline = time.monotonic() + timeout
    while True:
        logs = _api(api, "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200})
        if any(expect in log["message"] for log in logs) or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


def _run(flow_fn: Any, params: Any) -> tuple[Any, Any, dict[str, Any]]:
    state = flow_fn(params, return_state=True)
    run_id = str(state.state_details.flow_run_id)
    return state, state.result(raise_on_failure=False), {"id": run_id}


def test_an_ingest_reindex_and_rebuild_show_their_names_artifacts_logs_and_failures_in_prefect(
    pipeline_env, corpus, prefect_api_url
):
    api = prefect_api_url
    (corpus / BAD).write_bytes(b"\x00\x01\x02PNG\x00" * 40)  # binary content: fails to load
    params = IngestParams(source=SourceParams(root=str(corpus)), batch_size=2)
    source = default_source_name(corpus)

    state, summary, run = _run(ingest, params)
    # The Failed state names the bad file and why; the CLI still gets the summary from it.
    assert state.is_failed()
    assert isinstance(summary, IngestSummary) and summary.processed == 3, summary
    assert state.message.startswith("1 document(s) failed (of 4 listed): ")
    assert f"{BAD} (binary content" in state.message and "TypeError" not in state.message
    flow_run = httpx.get(f"{api}/flow_runs/{run['id']}", timeout=10).json()
    assert flow_run["name"] == f"ingest · {source}"
    assert flow_run["state"]["type"] == "FAILED" and flow_run["state"]["message"] == state.message

    artifacts = _artifacts(api, run["id"])
    assert set(artifacts) == {"ingest-summary", "ingest-failures"}
    markdown = artifacts["ingest-summary"]["data"]
    assert artifacts["ingest-summary"]["type"] == "markdown"
    for row in ("| listed | 4 |", "| processed | 3 (3 chunked) |", "| failed | 1 |", "| deleted | 0 |"):
        assert row in markdown, markdown
    for sink, count in summary.chunks_written.items():
        assert f"| {sink} | {count} |" in markdown, markdown
    # what was embedded and what reused: together the vectors written
    assert summary.embedded + summary.reused == summary.chunks_written["vectors"] > 0
    assert f"| vectors embedded / reused | {summary.embedded} / {summary.reused} |" in markdown, markdown
    assert escape_markdown(BAD) in markdown and BAD not in markdown  # escaped, never interpreted
    table = json.loads(artifacts["ingest-failures"]["data"])
    assert table["document"] == [BAD] and table["status"] == ["failed"]  # plain text in the table
    assert table["error"][0].startswith("load failed:")

    # INFO lines per batch (2 documents each here), with chunks and seconds per sink.
    logs = _logs(api, run["id"], "seconds (prepare+write)")
    batches = [log["message"] for log in logs if log["message"].startswith("batch ") and log["level"] == 20]
    written = [line for line in batches if "seconds (prepare+write)" in line]
    assert len(written) >= 2, batches
    assert all("chunks written graph=" in line and "vectors " in line for line in written), written
    # progress in chunks, in the flow log of the run (what a served run shows in the UI)
    progress = [log["message"] for log in logs if log["message"].startswith("progress: ")]
    assert progress and all(" chunks (" in line and " documents" in line for line in progress), progress
    assert not any("TypeError" in log["message"] for log in logs)

    # The nightly reindex: the bad file is known unreadable now, so the run completes and says so.
    state, summary, run = _run(reindex, params)
    assert state.is_completed(), state.message
    flow_run = httpx.get(f"{api}/flow_runs/{run['id']}", timeout=10).json()
    assert flow_run["name"].startswith("reindex · 20") and len(flow_run["name"]) == len(
        "reindex · 2026-01-01"
    )
    artifacts = _artifacts(api, run["id"])
    assert "alignment: ok" in artifacts["reindex-summary"]["data"]
    assert "| known unreadable | 1 |" in artifacts["reindex-summary"]["data"]
    table = json.loads(artifacts["reindex-failures"]["data"])
    assert (table["document"], table["status"]) == ([BAD], ["known unreadable"])
    assert summary.duration_seconds > 0

    # A rebuild with other settings: switched (the bad file is reported, unreadable in both generations).
    state, summary, run = _run(
        rebuild, RebuildParams(source=params.source, strategy=ChunkStrategy(name="sentence"))
    )
    assert state.is_completed() and summary.outcome == "switched", state.message
    flow_run = httpx.get(f"{api}/flow_runs/{run['id']}", timeout=10).json()
    assert flow_run["name"] == "rebuild · sentence"
    artifacts = _artifacts(api, run["id"])
    assert f"### rebuild {summary.generation}: switched" in artifacts["rebuild-summary"]["data"]
    assert "#### rebuild" in artifacts["rebuild-summary"]["data"]  # the build pass, with its counts
    table = json.loads(artifacts["rebuild-failures"]["data"])
    assert (table["document"], table["status"]) == ([BAD], ["reported"])


def test_a_clean_run_keeps_an_empty_failures_table(pipeline_env, corpus, prefect_api_url):
    params = IngestParams(source=SourceParams(root=str(corpus), source_system="kb"), sinks=["keywords"])
    state, _, run = _run(ingest, params)
    assert state.is_completed(), state.message
    assert httpx.get(f"{prefect_api_url}/flow_runs/{run['id']}", timeout=10).json()["name"] == "ingest · kb"
    artifacts = _artifacts(prefect_api_url, run["id"])
    assert "### ingest: Completed" in artifacts["ingest-summary"]["data"]
    assert json.loads(artifacts["ingest-failures"]["data"]) == {
        "document": [],
        "status": [],
        "error": [],
        "document_id": [],
    }


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("a|b.eml", r"a\|b\.eml"),
        ("*bold* [link](http://x) `code` <script>", r"\*bold\* \[link\]\(http\:\/\/x\) \`code\` \<script\>"),
        ("two\nlines\t_x_", r"two lines \_x\_"),
        ("&amp; \\", r"\&amp\; \\"),  # an entity stays literal text too
    ],
)
def test_user_data_is_escaped_in_markdown(text, escaped):
    assert escape_markdown(text) == escaped


def test_failure_messages_name_a_few_documents_with_their_causes():
    failures = [
        FailedDocument(
            document_id=f"doc_{n}",
            source_id=f"f{n}.eml",
            path=f"/src/f{n}.eml",
            error=f"load failed: /src/f{n}.eml: UnknownCharset: x-unknown-{n}",
            failure="unreadable",
        )
        for n in range(5)
    ]
    assert cause(failures[0]) == "UnknownCharset: x-unknown-0"
    assert named_failures(failures) == (
        "f0.eml (UnknownCharset: x-unknown-0), f1.eml (UnknownCharset: x-unknown-1), "
        "f2.eml (UnknownCharset: x-unknown-2) and 2 more"
    )
    summary = IngestSummary(flow="ingest", listed=40, failed=failures[:2])
    assert failure_message(summary) == (
        "2 document(s) failed (of 40 listed): f0.eml (UnknownCharset: x-unknown-0), "
        "f1.eml (UnknownCharset: x-unknown-1)"
    )
    long = FailedDocument(document_id="d", source_id="a.txt", error="chunking failed: " + "x" * 500)
    assert len(cause(long)) == 517 and named_failures([long]).endswith("…)")
    table = failures_table(failures[:1], [])
    assert table["document"] == ["f0.eml"] and table["error"] == [failures[0].error]


def test_run_names_come_from_the_parameters_as_models_or_json(tmp_path):
    assert source_label(None) == "all sources"
    assert source_label({"kind": "directory", "root": str(tmp_path)}) == default_source_name(tmp_path)
    assert source_label(SourceParams(root=str(tmp_path), source_system="kb")) == "kb"
    assert source_label({"kind": "paths", "paths": ["/a/x.md", "/a/y.md"], "root": "/a"}) == "x.md +1"


def test_a_sharded_run_names_its_shards_and_adds_their_summaries_up(monkeypatch):
    """Shard runs are named `ingest-shard · 2/4 (attempt 2)` from their parameters (JSON, as a worker gets
    them); the parent's summary adds the shards' counts and lists them in its artifact, escaped."""
    from prefect.runtime import flow_run as runtime

    from unichunk.engine.params import ShardOutcome
    from unichunk.engine.reports import ingest_markdown
    from unichunk.engine.run_names import shard_run_name

    for attempt, name in ((1, "ingest-shard · 2/4"), (2, "ingest-shard · 2/4 (attempt 2)")):
        params = {"params": {"shard": 1, "shards": 4, "attempt": attempt}}
        monkeypatch.setitem(runtime.FIELDS, "parameters", lambda p=params: p)
        assert shard_run_name() == name

    parent = IngestSummary(flow="ingest", listed=10, skipped=2)
    shards = [
        IngestSummary(
            flow="ingest-shard",
            listed=5,
            processed=5,
            chunked=5,
            chunks_written={"graph": 7},
            sink_seconds={"graph": 1.5},
        ),
        IngestSummary(
            flow="ingest-shard",
            listed=3,
            processed=2,
            skipped=0,
            chunks_written={"graph": 3},
            sink_seconds={"graph": 0.5},
            failed=[FailedDocument(document_id="d", source_id="x.txt", error="load failed")],
        ),
    ]
    for part in shards:
        parent.add(part)
    assert (parent.listed, parent.processed, parent.skipped, parent.chunked) == (10, 7, 2, 5)
    assert parent.chunks_written == {"graph": 10} and parent.sink_seconds == {"graph": 2.0}
    assert [f.source_id for f in parent.failed] == ["x.txt"]
    parent.shards = [
        ShardOutcome(
            shard=0, documents=5, attempts=1, flow_run="ingest-shard · 1/2", state="Completed", processed=5
        ),
        ShardOutcome(
            shard=1,
            documents=3,
            attempts=3,
            flow_run="ingest-shard · 2/2 (attempt 3)",
            state="lost",
            message="its run ended Crashed: *boom* | x",
        ),
    ]
    assert parent.line().startswith("ingest (in 2 shards, 1 retried): 10 listed, 7 processed")
    markdown = ingest_markdown(parent, "Completed")
    assert "| 1 | 5 | 1 | ingest\\-shard · 1\\/2 | Completed | 5 | 0 |" in markdown
    assert "lost\\: its run ended Crashed\\: \\*boom\\* \\| x" in markdown
    lines = markdown.splitlines()
    heads = [lines[i - 1] for i, line in enumerate(lines) if line.startswith("|---")]
    assert heads and all(cell.strip() for h in heads for cell in h.strip("|").split("|")), heads
