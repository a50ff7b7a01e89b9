"""Two ingest runs of overlapping sources at the same time, in one process (as `unichunk serve` runs a
cron reindex beside a webhook-triggered ingest). Qdrant local mode admits one process per directory, so
two processes would need a Qdrant server; here both flows share the process's sinks.

Proves: both runs finish; the final state is exactly what a single run over the union gives (the chunk
IDs the chunking service derives for each document, nothing more), with nothing stored twice.
"""

from __future__ import annotations

import contextvars
import threading

from fault_checks import assert_converged, make_corpus

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.sources import load_item
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.index.generations import live_status
from unichunk.sinks import pool
from unichunk.sinks.config import SinkSettings


def test_two_overlapping_runs_at_once_equal_one_run(fault_env, tmp_path):
    corpus = tmp_path / "corpus"
    paths = make_corpus(corpus, 60)
    first = SourceParams(kind="paths", root=str(corpus), paths=[str(p) for p in paths[:40]])
    second = SourceParams(kind="paths", root=str(corpus), paths=[str(p) for p in paths[20:]])
    states: dict[str, object] = {}
    start = threading.Barrier(2)

    def run(name: str, source: SourceParams) -> None:
        start.wait()
        try:
            states[name] = ingest(IngestParams(source=source, batch_size=5), return_state=True)
        except BaseException as exc:  # kept, so a failure names its cause instead of a missing entry
            states[name] = exc

    # Each thread in a copy of this context: Prefect's settings (the session's server) are a context
    # variable, and a thread without them starts a temporary server of its own and leaves it running.
    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(run, *item))
        for item in (("a", first), ("b", second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=500)
    assert len(states) == 2, states
    for name, state in states.items():
        assert not isinstance(state, BaseException), (name, repr(state))
        assert state.is_completed(), (name, state.message)
    # The run that ended first did not close the sinks under the other (whose tasks would then reopen
    # them, and nobody would close those): once both flows are done, nothing is left open.
    assert not pool._open

    status = live_status(SinkSettings(data_dir=fault_env))
    rows = status.rows()
    assert len(rows) == 60 and {r.state for r in rows} == {"processed"}
    # What one run would store: each document's chunk IDs as the chunking service derives them.
    service = ChunkingService()
    from unichunk.chunking.sources import PathsSource

    single = {
        chunk.chunk_id
        for item in PathsSource(paths, root=corpus).list()
        for chunk in service.chunk(load_item(item), ChunkStrategy())
    }
    assert assert_converged(fault_env) == single
