"""A run with nothing to do loads no model and opens no store (issue 16): the second `unichunk ingest` of an
unchanged folder imports neither torch, sentence-transformers nor spaCy, never calls the model loaders,
opens no sink (so imports no store client), and neither takes nor creates the embedded store's lock file.

Through the real `unichunk` CLI in a subprocess (a fresh interpreter, so nothing is imported already), with a
small wrapper that runs the console script's app and prints, at exit, which heavy modules were imported,
which loaders were called and which sinks were opened. The first run is the control: it must load both
models and open every store, so the checks can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import servers

_PROBE = """
import atexit, json, sys
import unichunk.sinks.factory as factory
import unichunk.sinks.graph.extraction as extraction
import unichunk.sinks.graph.extraction_worker as extraction_worker
import unichunk.sinks.vectors.minilm as minilm
calls = []

def counted(module, name):
    real = getattr(module, name)
    def call(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)
    setattr(module, name, call)

counted(minilm, "load_backend")
counted(extraction, "load_spacy")
counted(extraction_worker.ProcessExtractor, "_started")  # spaCy's worker process, where it runs there
opened = []
real_open_sink = factory.open_sink

def open_sink(name, settings):  # every store is opened here (the pool and the service go through it)
    opened.append(name)
    return real_open_sink(name, settings)

factory.open_sink = open_sink
STORE_CLIENTS = ("qdrant_client", "qdrant_edge", "bm25s", "falkordb", "neo4j")

@atexit.register
def report():
    heavy = [m for m in ("torch", "sentence_transformers", "onnxruntime", "spacy") if m in sys.modules]
    clients = [m for m in STORE_CLIENTS if m in sys.modules]
    print("PROBE " + json.dumps({"imported": heavy, "calls": calls, "opened": opened, "clients": clients}),
          file=sys.stderr)

from unichunk.deployments.cli.main import app
app(sys.argv[1:], prog_name="unichunk")
"""


def _ingest(probe: Path, corpus: Path, env: dict[str, str]) -> dict:
    result = subprocess.run(
        [sys.executable, str(probe), "ingest", str(corpus), "--json"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = [line for line in result.stderr.splitlines() if line.startswith("PROBE ")]
    assert len(lines) == 1, result.stderr
    return {"summary": json.loads(result.stdout), **json.loads(lines[0].removeprefix("PROBE "))}


@pytest.mark.parametrize("spacy_process", ["inline", "worker"])
def test_a_no_change_ingest_loads_no_model(
    tmp_path: Path, corpus: Path, pipeline_env: Path, spacy_process: str
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE, encoding="utf-8")
    env = servers.environment_with(
        HF_HUB_OFFLINE="1", PYTHONPATH=str(Path(__file__).parents[2]), UNICHUNK_SPACY_PROCESS=spacy_process
    )

    first = _ingest(probe, corpus, env)
    assert first["summary"]["processed"] == 3, first["summary"]
    # the control: a real run loads both models (spaCy here, or in the worker process it starts)
    spacy = "load_spacy" if spacy_process == "inline" else "_started"
    assert set(first["calls"]) == {"load_backend", spacy}, first
    assert {"torch", "onnxruntime"} & set(first["imported"]), first
    assert ("spacy" in first["imported"]) == (spacy_process == "inline"), first
    assert sorted(first["opened"]) == ["graph", "keywords", "vectors"], first  # and opens every store
    assert {"qdrant_edge", "bm25s", "falkordb"} <= set(first["clients"]), first
    (lock,) = pipeline_env.rglob("run.lock")  # the embedded store's lock, taken by the first run
    lock.unlink()  # gone: only a run that takes the lock makes it again

    second = _ingest(probe, corpus, env)
    assert second["summary"]["processed"] == 0 and second["summary"]["skipped"] == 3, second["summary"]
    assert second["calls"] == [], second
    assert second["imported"] == [], second
    assert second["opened"] == [] and second["clients"] == [], second  # no store opened, no client loaded
    assert not lock.exists()  # the store's lock was neither taken nor created
