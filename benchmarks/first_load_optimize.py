"""The run-end tail of a first bulk load into qdrant-edge: `python -m benchmarks.first_load_optimize`.

qdrant-edge never optimises on its own, so a run ends with `optimize()` (`unichunk.index.sink_writes
.optimize_sinks`), which on a first load of 200k chunks built the whole HNSW graph in one step (41 minutes on
a loaded 2-core machine). This writes a first load without the embedding model: seeded normalised 384-d
vectors with the payload `VectorSink` stores (40 chunks per document), through the real edge engine's write
(`EdgeQdrantSink._store_upsert`, what `VectorSink.write` ends in) in batches of 640 chunks, then the
run-end `sink.optimize()`. Each mode gets a fresh store and the same points, in this one process:

- `current`: the sink as it was (Qdrant's default HNSW, one optimisation at the end);
- `payload_m0`: only no payload-aware HNSW links (`payload_m=0`), still one optimisation at the end;
- `stepped`: the shipped sink: `payload_m=0`, a write indexes every `OPTIMIZE_EVERY` points, segments
  of at most `SEGMENT_POINTS` vectors.

Per mode: seconds of all writes (the steps included) and of the slowest single write, the tail (the
run-end `optimize()`), query p50 and recall@10 against exact brute force (numpy) after the writes (before
the tail: what queries get before the index is built) and after it, the same for queries filtered by
`source_system`, segments and disk. The vectors are clustered like embeddings of a corpus (500 topics, a
document near its topic, its chunks near the document; each query near a stored chunk): uniform random
384-d vectors have no neighbourhoods, and HNSW recall on them says nothing about real text. 5 % and 30 % of
the documents come from two more `source_system`s, and every document of a topic shares one, so a filter
is correlated with the content (the case Qdrant's payload-aware links are for). `--vectors uniform`
writes uniform random unit vectors instead (queries too): the issue's 41-minute case, the hardest graph
to build, whose recall figures mean nothing. Options: --points N (default 50,000), --queries N, --modes
current,payload_m0,stepped, --vectors clustered|uniform, --dir DIR (default /dev/shm).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.vector_store import CHUNKS_PER_DOCUMENT, RandomEmbedder, _payload, _unit

WRITE_BATCH = 640
MODES = ("current", "payload_m0", "stepped")
K = 10


TOPICS = 500


def _systems(points: int) -> np.ndarray:
    """Each point's `source_system`: 5 % "wiki" and 30 % "git" (whole documents), the rest "filesystem"."""
    share = np.arange(points) // CHUNKS_PER_DOCUMENT % 20
    return np.where(share == 0, "wiki", np.where(share <= 6, "git", "filesystem"))


def corpus(points: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded unit vectors for `points` chunks (40 a document) and `queries` queries near stored chunks."""
    rng = np.random.default_rng(0)
    topics = _unit(rng, TOPICS)
    documents = _unit(rng, points // CHUNKS_PER_DOCUMENT + 1)
    index = np.arange(points) // CHUNKS_PER_DOCUMENT
    vectors = topics[index % TOPICS] + 0.8 * documents[index] + 0.6 * _unit(rng, points)
    near = vectors[rng.integers(0, points, queries)] + 0.6 * _unit(rng, queries)
    return _normalised(vectors), _normalised(near)


def uniform(points: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded uniform random unit vectors: no neighbourhoods, the costliest HNSW build."""
    rng = np.random.default_rng(0)
    return _normalised(_unit(rng, points)), _normalised(_unit(rng, queries))


def _normalised(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def _sink_class(mode: str) -> type:
    """The edge sink with the mode's index settings (class attributes of `EdgeQdrantSink`)."""
    from unichunk.sinks.vectors import qdrant_edge

    shipped = qdrant_edge.EdgeQdrantSink
    if mode == "stepped":
        return shipped
    attributes: dict[str, Any] = {"optimize_every": None, "segment_points": None}
    if mode == "current":
        attributes["hnsw"] = None
    return type(f"EdgeQdrantSink_{mode}", (shipped,), attributes)


def _open(directory: Path, mode: str) -> Any:
    from unichunk.sinks.config import SinkSettings

    settings = SinkSettings(data_dir=directory, qdrant_url=None, vector_engine="edge")
    return _sink_class(mode)(settings, RandomEmbedder())


def _queries(
    sink: Any,
    vectors: np.ndarray,
    chunk_ids: list[str],
    queries: np.ndarray,
    source: tuple[str, np.ndarray] | None = None,
) -> dict[str, float]:
    """Query p50 (ms) and recall@10 against exact cosine top-10 over `vectors`; with `source` (a
    `source_system` and the rows of its points), filtered by it."""
    scores = queries @ vectors.T
    if source is not None:
        scores[:, ~source[1]] = -np.inf
    exact = np.argsort(-scores, axis=1)[:, :K]
    conditions = {} if source is None else {"source_system": [source[0]]}
    seconds, recalls = [], []
    for query, truth in zip(queries, exact, strict=True):
        started = time.perf_counter()
        found = sink._store_query(query.tolist(), conditions, K)
        seconds.append(time.perf_counter() - started)
        wanted = {chunk_ids[i] for i in truth}
        recalls.append(len(wanted & {payload["chunk_id"] for _, payload in found}) / K)
    return {"p50_ms": statistics.median(seconds) * 1000, "recall": statistics.fmean(recalls)}


def _disk_mb(path: Path) -> float:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file()) / 2**20


def run_mode(root: Path, mode: str, vectors: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    from unichunk.sinks.vectors.sink import point_id

    directory, points = root / mode, len(vectors)
    rng = random.Random(0)
    chunk_ids: list[str] = []
    systems = _systems(points)
    slowest, started = 0.0, time.perf_counter()
    with _open(directory, mode) as sink, sink._lock:
        sink._check_collection(create=True)
        for first in range(0, points, WRITE_BATCH):
            count = min(WRITE_BATCH, points - first)
            batch = []
            for k in range(first, first + count):
                payload = _payload(k // CHUNKS_PER_DOCUMENT, k % CHUNKS_PER_DOCUMENT, rng)
                payload["source_system"] = systems[k]
                chunk_ids.append(payload["chunk_id"])
                batch.append((point_id(payload["chunk_id"]), vectors[k].tolist(), payload))
            write_started = time.perf_counter()
            sink._store_upsert(batch)
            slowest = max(slowest, time.perf_counter() - write_started)
        figures = {"write_s": time.perf_counter() - started, "slowest_write_s": slowest}
        before = _queries(sink, vectors, chunk_ids, queries)
        started = time.perf_counter()
        sink.optimize()
        figures["tail_s"] = time.perf_counter() - started
        after = _queries(sink, vectors, chunk_ids, queries)
        filtered = {
            name: _queries(sink, vectors, chunk_ids, queries, (name, systems == name))
            for name in ("wiki", "git")
        }
        info = sink.shard.info()
        figures |= {
            "p50_before_ms": before["p50_ms"],
            "recall_before": before["recall"],
            "p50_after_ms": after["p50_ms"],
            "recall_after": after["recall"],
            "wiki_p50_ms": filtered["wiki"]["p50_ms"],
            "wiki_recall": filtered["wiki"]["recall"],
            "git_p50_ms": filtered["git"]["p50_ms"],
            "git_recall": filtered["git"]["recall"],
            "segments": info.segments_count,
            "indexed": info.indexed_vectors_count,
        }
    figures["disk_mb"] = _disk_mb(directory)
    shutil.rmtree(directory)
    return figures


_ROWS = (
    ("writes, steps included (s)", "write_s", "{:.1f}"),
    ("slowest single write (s)", "slowest_write_s", "{:.1f}"),
    ("run-end optimize, the tail (s)", "tail_s", "{:.1f}"),
    ("writes + tail (s)", "total_s", "{:.1f}"),
    ("query p50 before the tail (ms)", "p50_before_ms", "{:.1f}"),
    ("recall@10 before the tail", "recall_before", "{:.3f}"),
    ("query p50 after the tail (ms)", "p50_after_ms", "{:.1f}"),
    ("recall@10 after the tail", "recall_after", "{:.3f}"),
    ("query filtered to 5 % of points, p50 after the tail (ms)", "wiki_p50_ms", "{:.1f}"),
    ("its recall@10", "wiki_recall", "{:.3f}"),
    ("query filtered to 30 % of points, p50 after the tail (ms)", "git_p50_ms", "{:.1f}"),
    ("its recall@10", "git_recall", "{:.3f}"),
    ("segments / indexed vectors", "segments", "{}"),
    ("disk after (MB)", "disk_mb", "{:.0f}"),
)


def table(results: dict[str, dict[str, float]], points: int) -> str:
    modes = list(results)
    lines = [f"| {points:,} points | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
    for label, key, fmt in _ROWS:
        cells = []
        for mode in modes:
            r = results[mode]
            if key == "total_s":
                cells.append(fmt.format(r["write_s"] + r["tail_s"]))
            elif key == "segments":
                cells.append(f"{r['segments']} / {r['indexed']:,}")
            else:
                cells.append(fmt.format(r[key]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--vectors", choices=("clustered", "uniform"), default="clustered")
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    args = parser.parse_args()
    vectors, queries = (corpus if args.vectors == "clustered" else uniform)(args.points, args.queries)
    root = Path(tempfile.mkdtemp(prefix="first_load_", dir=args.dir))
    results: dict[str, dict[str, float]] = {}
    try:
        for mode in args.modes.split(","):
            results[mode] = run_mode(root, mode, vectors, queries)
            print(json.dumps({mode: results[mode]}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(results, args.points))


if __name__ == "__main__":
    main()
