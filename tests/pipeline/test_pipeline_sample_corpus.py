"""The bundled sample corpus, ingested through the real `ingest` flow on the session's real Prefect server.

This is what `unichunk demo` runs: every format we ship a sample of (md, html, txt, eml) must end up in all
three stores under the same chunk IDs, and the run must be recorded by the Prefect server itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.index.alignment import verify_alignment
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks

SAMPLE_CORPUS = Path(__file__).resolve().parents[2] / "deployments" / "sample_corpus"


async def _flow_run_state(flow_run_id) -> str:  # type: ignore[no-untyped-def]
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        run = await client.read_flow_run(flow_run_id)
        return run.state.type.value if run.state else "NONE"


def test_sample_corpus_reaches_all_three_sinks_through_the_prefect_server(pipeline_env, prefect_api_url):
    files = sorted(p for p in SAMPLE_CORPUS.iterdir() if p.is_file())
    assert {p.suffix for p in files} >= {".md", ".html", ".txt", ".eml"}

    state = ingest(IngestParams(source=SourceParams(root=str(SAMPLE_CORPUS))), return_state=True)
    summary = state.result()
    assert state.is_completed(), state.message
    assert summary.processed == len(files) and summary.failed == []
    # the run is the server's record, not an ephemeral one
    assert asyncio.run(_flow_run_state(state.state_details.flow_run_id)) == "COMPLETED"

    expected = live_status(SinkSettings(data_dir=pipeline_env)).expected_chunk_ids()
    sinks = get_sinks(SINK_NAMES, reading_settings(SinkSettings()))
    report = verify_alignment(sinks, expected)
    assert report.ok, report.as_dict()
    assert len(expected) >= len(files)
    assert all(count == len(expected) for count in report.counts.values())
    assert summary.chunks_written == dict.fromkeys(SINK_NAMES, len(expected))
