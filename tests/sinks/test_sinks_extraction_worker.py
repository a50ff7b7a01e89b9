"""spaCy in a worker process (`ProcessExtractor`), with the real model in a real child process.

It extracts exactly what spaCy inline extracts; a stop asked mid-batch ends the wait within a second and
kills the child, and the next batch starts another; a child that dies gives its batch a clear error and the
next batch works; a child whose parent is killed outright ends too, and the parent's script is never run
again in the child (as multiprocessing's spawn would). `auto` picks the worker exactly where
MiniLM holds the GIL (the compiled bfloat16 package).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from processes import all_ended

from unichunk.chunking.segments import segment_chunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.extraction import ExtractionError, SpacyExtractor
from unichunk.sinks.graph.extraction_worker import ProcessExtractor
from unichunk.sinks.graph.sink import KnowledgeGraphSink
from unichunk.sinks.stop import STOP, StopRequested

TEXTS = [
    "Margaret Okafor joined Microsoft in Seattle in 2015. She met Satya Nadella there.",
    "Google opened an office in London, near the British Museum, in 2004.",
    "",
    "No names at all in this one, only words.",
    "Ada Lovelace wrote about the Analytical Engine of Charles Babbage in London. \u00e9\u00e8\u2603 \x00",
]


def _chunks(texts: list[str]):  # type: ignore[no-untyped-def]
    return [segment_chunk(text) for text in texts]


@pytest.fixture
def worker():  # type: ignore[no-untyped-def]
    extractor = ProcessExtractor(SpacyExtractor())
    yield extractor
    extractor.close()
    STOP.clear()


def test_the_worker_extracts_what_spacy_inline_extracts(worker):
    chunks = _chunks(TEXTS)
    inline = SpacyExtractor().extract(chunks)
    assert worker.extract(chunks) == inline
    assert any(x.entities for x in inline) and any(x.relations for x in inline)  # not empty on both sides
    assert worker.fingerprint == SpacyExtractor().fingerprint  # the cache and the graph do not change


def test_a_stop_mid_batch_kills_the_child_and_the_next_batch_starts_another(worker):
    worker.extract(_chunks(TEXTS[:1]))  # the child is up, its model loaded
    process = worker._child
    many = _chunks([f"{TEXTS[0]} Report number {n} from Paris and Berlin." * 20 for n in range(3000)])
    asked = threading.Timer(1.0, STOP.request, args=(signal.SIGINT,))
    asked.start()
    started = time.monotonic()
    with pytest.raises(StopRequested):
        worker.extract(many)
    assert time.monotonic() - started < 1.0 + 2.0  # the wait ends within the poll, not with the batch
    assert all_ended([process.pid], 5)
    STOP.clear()
    assert worker.extract(_chunks(TEXTS[:1])) == SpacyExtractor().extract(_chunks(TEXTS[:1]))
    assert worker._child.pid != process.pid


def test_a_child_that_dies_fails_its_batch_clearly_and_the_next_batch_works(worker):
    worker.extract(_chunks(TEXTS[:1]))
    process = worker._child
    many = _chunks([f"{TEXTS[1]} Entry {n} in Rome." * 20 for n in range(3000)])
    killer = threading.Timer(1.0, os.kill, args=(process.pid, signal.SIGKILL))
    killer.start()
    with pytest.raises(ExtractionError, match="worker process ended"):
        worker.extract(many)
    assert worker.extract(_chunks(TEXTS[1:2])) == SpacyExtractor().extract(_chunks(TEXTS[1:2]))


def test_the_child_ends_when_its_parent_is_killed_outright_and_never_runs_its_script(tmp_path):
    script = textwrap.dedent(
        """
        import os, signal, sys
        from unichunk.chunking.segments import segment_chunk
        from unichunk.sinks.graph.extraction import SpacyExtractor
        from unichunk.sinks.graph.extraction_worker import ProcessExtractor

        # no `if __name__ == "__main__"` guard, as in many a user's script: the worker must not run it again
        worker = ProcessExtractor(SpacyExtractor())
        worker.extract([segment_chunk("Ada Lovelace lived in London.")])
        print(worker._child.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    (tmp_path / "parent.py").write_text(script)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "parent.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert len(done.stdout.split()) == 1, done.stdout  # the script ran once
    child = int(done.stdout.split()[0])
    assert all_ended([child], 10), "the spaCy worker outlived its killed parent"


@pytest.mark.parametrize(
    ("settings", "worker"),
    [
        ({"embedding_backend": "torch-bf16"}, True),  # the compiled package holds the GIL
        ({"embedding_backend": "torch"}, True),  # compiled in fp32 on the CPU: the package holds it too
        ({"embedding_backend": "torch", "embedding_compiled": False}, False),  # torch releases it
        ({"embedding_backend": "onnx"}, False),
        ({"embedding_backend": "torch-bf16", "device": "cuda"}, False),  # no package on CUDA
        ({"embedding_backend": "torch", "spacy_process": "worker"}, True),
        ({"embedding_backend": "torch-bf16", "spacy_process": "inline"}, False),
        ({"embedding_backend": "torch-bf16", "extractor": "llm"}, False),
        ({"embedding_backend": "torch-bf16", "embedder": "openai"}, False),
    ],
)
def test_auto_runs_spacy_in_a_worker_where_minilm_holds_the_gil(settings, worker):
    assert SinkSettings(**settings).spacy_in_worker() is worker


def test_the_graph_sink_runs_the_worker_when_asked_and_closes_it(pipeline_env):
    sink = KnowledgeGraphSink.from_settings(SinkSettings(data_dir=pipeline_env, spacy_process="worker"))
    assert isinstance(sink.extractor, ProcessExtractor)
    sink.extractor.extract(_chunks(TEXTS[:1]))
    process = sink.extractor._child
    sink.close()
    assert all_ended([process.pid], 5)
