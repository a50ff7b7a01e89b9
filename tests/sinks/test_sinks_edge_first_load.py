"""A first bulk load into qdrant-edge indexes in steps during the writes (`EdgeQdrantSink._optimize_step`),
not in one run-end tail: search stays exact-equal while segments are unindexed, partly indexed and fully
indexed, and a process killed in the middle of a step leaves a shard that opens with every point.

Real qdrant-edge shards, clustered 384-d vectors (like a corpus's embeddings, where HNSW finds the true
neighbours), compared with exact cosine top-k computed by numpy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from unichunk.sinks.config import SinkSettings
from unichunk.sinks.stop import STOP
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink
from unichunk.sinks.vectors.sink import point_id

DIMENSION = 384
K = 5


def clustered(points: int, seed: int = 0) -> np.ndarray:
    """Unit vectors in 40-chunk documents around 50 topics: neighbourhoods HNSW can find."""
    rng = np.random.default_rng(seed)

    def unit(n: int) -> np.ndarray:
        v = rng.standard_normal((n, DIMENSION))
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    topics, documents = unit(50), unit(points // 40 + 1)
    index = np.arange(points) // 40
    vectors = topics[index % 50] + 0.8 * documents[index] + 0.6 * unit(points)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def chunk_id(k: int) -> str:
    return f"doc_{k // 40:06d}::chunk::{k % 40:03d}"


def batch(vectors: np.ndarray, start: int, stop: int) -> list[tuple[str, list[float], dict[str, object]]]:
    return [
        (
            point_id(chunk_id(k)),
            vectors[k].tolist(),
            {"chunk_id": chunk_id(k), "document_id": f"doc_{k // 40:06d}", "source_system": "filesystem"},
        )
        for k in range(start, stop)
    ]


class SmallSteps(EdgeQdrantSink):
    """The shipped stepping at test scale: a step every 1,200 points, segments indexed past ~330 vectors."""

    optimize_every = 1_200
    indexing_threshold_kb = 500


def settings(path: Path) -> SinkSettings:
    return SinkSettings(data_dir=path, qdrant_url=None, vector_engine="edge")


def assert_exact(sink: EdgeQdrantSink, vectors: np.ndarray, queries: np.ndarray) -> None:
    """The sink's top-k ids for each query are exact search's (cosine over every stored vector)."""
    truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :K]
    for query, wanted in zip(queries, truth, strict=True):
        found = [payload["chunk_id"] for _, payload in sink._store_query(query.tolist(), {}, K)]
        assert set(found) == {chunk_id(int(i)) for i in wanted}


def test_stepped_first_load_answers_exact_top_k_before_during_and_after_indexing(tmp_path: Path) -> None:
    vectors = clustered(3_000)
    rng = np.random.default_rng(1)
    queries = vectors[rng.integers(0, 3_000, 20)] + 0.3 * rng.standard_normal((20, DIMENSION)) / 20
    with SmallSteps(settings(tmp_path)) as sink, sink._lock:
        sink._check_collection(create=True)
        indexed = []
        for first in range(0, 3_000, 500):
            sink._store_upsert(batch(vectors, first, first + 500))
            written = vectors[: first + 500]
            indexed.append(sink.shard.info().indexed_vectors_count)
            assert_exact(sink, written, queries)
        assert indexed[0] == 0  # the first writes: brute force only, still exact
        assert 0 < indexed[3] < 2_000  # a step indexed the older segment; the newest is brute force
        sink.optimize()  # the run-end optimisation: little or nothing left to index
        info = sink.shard.info()
        assert info.points_count == 3_000 and info.indexed_vectors_count >= 3_000 - 500
        assert_exact(sink, vectors, queries)
    with SmallSteps(settings(tmp_path)) as sink:  # reopened: the same answers from the files
        assert sink.count() == 3_000
        assert_exact(sink, vectors, queries)


def test_no_step_starts_once_a_stop_is_asked(tmp_path: Path) -> None:
    vectors = clustered(2_400)
    with SmallSteps(settings(tmp_path)) as sink, sink._lock:
        sink._check_collection(create=True)
        STOP.request()
        try:
            sink._store_upsert(batch(vectors, 0, 1_200))  # a step is due: the stopping run skips it
            assert sink.shard.info().indexed_vectors_count == 0 and sink.count() == 1_200
        finally:
            STOP.clear()
        sink._store_upsert(batch(vectors, 1_200, 2_400))  # still due, and no stop now: indexed
        assert sink.shard.info().indexed_vectors_count > 0


def test_the_shipped_shard_has_no_payload_graphs_and_bounded_segments(tmp_path: Path) -> None:
    with EdgeQdrantSink(settings(tmp_path)) as sink, sink._lock:
        sink._check_collection(create=True)
        sink._store_upsert(batch(clustered(100), 0, 100))
    config = (tmp_path / "qdrant_edge").rglob("edge_config.json")
    text = next(config).read_text()
    assert '"payload_m":0' in text.replace(" ", "") and '"max_segment_size":37500' in text.replace(" ", "")


_CHILD = """
import importlib.util
from pathlib import Path
spec = importlib.util.spec_from_file_location("first_load", {test!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
SmallSteps, batch, clustered, settings = module.SmallSteps, module.batch, module.clustered, module.settings
vectors = clustered({points})
with SmallSteps(settings(Path({path!r}))) as sink, sink._lock:
    sink._check_collection(create=True)
    sink._store_upsert(batch(vectors, 0, {before}))
    print("stepping", flush=True)
    sink._store_upsert(batch(vectors, {before}, {points}))  # crosses optimize_every: indexes in this write
    print("done", flush=True)
"""


def test_a_process_killed_in_the_middle_of_a_step_leaves_every_point(tmp_path: Path) -> None:
    points, before = 20_000, 1_100  # the second write brings 18,900 unindexed points: a step of seconds
    script = _CHILD.format(test=__file__, points=points, before=before, path=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "stepping"
        # Kill once the step is rewriting segments (qdrant-edge builds them under the shard's temp_segments).
        while child.poll() is None and not any((tmp_path / "qdrant_edge").glob("*/temp_segments/*")):
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
        output = child.stdout.read() if child.stdout else ""
    assert child.returncode == -signal.SIGKILL and "done" not in output, "the step finished before the kill"
    vectors = clustered(points)
    assert any((tmp_path / "qdrant_edge").glob("*/temp_segments/*"))  # the half-built segment
    with SmallSteps(settings(tmp_path)) as sink:
        assert not any((tmp_path / "qdrant_edge").glob("*/temp_segments/*"))  # removed on opening
        assert sink.count() == points  # the write was flushed before its step began: nothing lost
        assert sink.chunk_ids() == {chunk_id(k) for k in range(points)}
        queries = vectors[::997] + 0.01
        assert_exact(sink, vectors, queries / np.linalg.norm(queries, axis=1, keepdims=True))
        sink._changed = True  # as a next run that wrote: the interrupted optimisation completes
        sink.optimize()
        assert sink.count() == points and sink.shard.info().indexed_vectors_count >= points - 1_200
        assert_exact(sink, vectors, queries / np.linalg.norm(queries, axis=1, keepdims=True))


if __name__ == "__main__":
    pytest.main([__file__])
