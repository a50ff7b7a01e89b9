"""`Pipeline` used as a library prints no Prefect INFO lines and no model-loading bar: its runs' lines
reach the Prefect API (the UI) and, at the level a caller enables, the `unichunk.runs` logger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

SCRIPT = """
import logging, sys
from unichunk import Pipeline

with Pipeline(sinks=("vectors", "keywords")) as p:
    first = p.ingest(sys.argv[1])
    print("ingested", first.processed, flush=True)
    print("--- INFO on ---", file=sys.stderr, flush=True)
    logging.getLogger("unichunk.runs").setLevel(logging.INFO)
    second = p.ingest(sys.argv[1])
    print("unchanged", second.skipped, flush=True)
"""


def test_a_library_call_prints_no_run_lines_unless_asked(pipeline_env: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Title\n\nAlice Moreau met Bob in Paris.\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(docs)],
        env={**os.environ, "UNICHUNK_DATA_DIR": str(pipeline_env)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ingested 1" in done.stdout and "unchanged 1" in done.stdout, done.stdout
    quiet, asked = done.stderr.split("--- INFO on ---\n")
    assert "INFO" not in quiet and "Loading weights" not in quiet, quiet
    assert "Finished in state Completed()" in asked and "1 unchanged" in asked, asked

    # ... and the Prefect API got every line of both runs (what the UI shows)
    api = os.environ["PREFECT_API_URL"]
    runs = httpx.post(f"{api}/flow_runs/filter", json={"sort": "START_TIME_DESC", "limit": 50}).json()
    ours = [  # other tests' runs on this server include ones without a source (`reindex` of all)
        r
        for r in runs
        if ((r["parameters"].get("params") or {}).get("source") or {}).get("root") == str(docs)
    ]
    assert len(ours) == 2, [r["name"] for r in runs]
    for run in ours:
        logs = httpx.post(
            f"{api}/logs/filter", json={"logs": {"flow_run_id": {"any_": [run["id"]]}}, "limit": 200}
        ).json()
        assert any("Finished in state Completed()" in log["message"] for log in logs), logs
