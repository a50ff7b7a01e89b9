"""Both embedded vector engines behind the same `VectorSink` interface: `python -m benchmarks.vector_store`.

qdrant-client local mode (`UNICHUNK_VECTOR_ENGINE=local`) against qdrant-edge (`edge`), as written and
after the sink's `optimize()` (`edge-optimized`: what a pipeline run leaves, since it optimises the shard
once after its writes), at 20k, 50k and 200k points of 384-d random unit vectors with the payload `VectorSink` writes (source fields, ~800
characters of content, 40 chunks per document). Each engine grows one store in /dev/shm (when there is
one: local mode commits every point to SQLite, and the disk is shared), seeding points through the sink's
own engine method (`_store_upsert`, which skips the per-write stale-point lookup seeding does not need).
At each size a fresh subprocess per engine opens the store, so RSS and open time are that engine's alone,
and measures through the public sink API:

- open + first query: constructing the sink and answering one search (what a CLI or a service reopening
  the store pays; module imports, about 2 s for qdrant-client, are done before and not counted);
- query p50 and filtered query p50 (`filter={"document_id": ...}`), k=10;
- one write batch of 640 chunks (16 new documents, `sink.write`, with its stale-point lookup);
- delete of one document (40 points, `sink.delete`);
- RSS after the first query and peak RSS of the subprocess;
- for `edge-optimized`: `sink.optimize()` after the seeding (in the seeding process, as a run optimises
  after its writes: the whole shard at the first size, the points added since at the next) and again after
  the measured write and delete (the cost a small incremental run adds).

The optimised store is grown separately from the plain `edge` one, so the plain figures stay those of a
never-optimised shard. Options: --quick (20k only), --sizes 20000,50000, --queries N,
--engines local,edge,edge-optimized, --keep DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

DIMENSION = 384
CHUNKS_PER_DOCUMENT = 40
WRITE_BATCH = 640
ENGINES = ("local", "edge", "edge-optimized")
OPTIMIZED = "edge-optimized"
SIZES = (20_000, 50_000, 200_000)
_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "vector",
    "store",
    "query",
    "filter",
    "index",
    "shard",
    "segment",
    "payload",
    "chunk",
]


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIMENSION)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class RandomEmbedder:
    """Random unit vectors, seeded by the text: the engines' cost without a model's."""

    name = "random-384"
    max_tokens = 100_000
    dimension = DIMENSION

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        seed = int.from_bytes(uuid.uuid5(uuid.NAMESPACE_URL, text).bytes[:8], "big")
        return _unit(np.random.default_rng(seed), 1)[0].tolist()

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def close(self) -> None:
        pass


def _settings(directory: Path, engine: str) -> Any:
    from unichunk.sinks.config import SinkSettings

    return SinkSettings(
        data_dir=directory,
        qdrant_url=None,
        vector_engine="edge" if engine == OPTIMIZED else engine,
        upsert_batch_size=256,
    )


def _open(directory: Path, engine: str) -> Any:
    from unichunk.sinks.vectors.sink import open_vector_sink

    return open_vector_sink(_settings(directory, engine), RandomEmbedder())  # type: ignore[arg-type]


def _document_id(d: int) -> str:
    return f"doc_{d:08d}"


def _payload(d: int, i: int, rng: random.Random) -> dict[str, Any]:
    """What `chunk_payload` stores for chunk i of document d (same fields, realistic sizes)."""
    content = " ".join(rng.choice(_WORDS) for _ in range(130))[:800]
    chunk_id = f"{_document_id(d)}::chunk::{i:03d}::{d * 1000 + i:08x}"
    return {
        "source_system": "filesystem",
        "source_id": f"/corpus/part{d % 7}/file{d}.md",
        "title": f"Document {d}",
        "path": f"/corpus/part{d % 7}/file{d}.md",
        "mime_type": "text/markdown",
        "generation": None,
        "chunk_id": chunk_id,
        "document_id": _document_id(d),
        "chunk_index": i,
        "start_char": i * 800,
        "end_char": i * 800 + len(content),
        "token_count": 180,
        "heading_chain": ["Guide", f"Section {i // 5}"],
        "content": content,
        "content_hash": uuid.uuid5(uuid.NAMESPACE_URL, content).hex * 2,
        "whole_document": False,
        "document_content_hash": uuid.uuid5(uuid.NAMESPACE_URL, str(d)).hex * 2,
        "ingested_at": datetime.now(UTC).isoformat(),
        "metadata": {"strategy": "recursive"},
    }


def seed(directory: Path, engine: str, start: int, stop: int) -> dict[str, float]:
    """Add points [start, stop) (whole documents) to the store: seconds taken, and for `edge-optimized`
    the seconds of the sink's `optimize()` after it (in this process, as a pipeline run does)."""
    from unichunk.sinks.vectors.sink import point_id

    rng, vectors_rng = random.Random(start), np.random.default_rng(start)
    started = time.perf_counter()
    with _open(directory, engine) as sink, sink._lock:
        sink._check_collection(create=True)
        for first in range(start, stop, 1000):
            count = min(1000, stop - first)
            vectors = _unit(vectors_rng, count)
            points = []
            for n, k in enumerate(range(first, first + count)):
                payload = _payload(k // CHUNKS_PER_DOCUMENT, k % CHUNKS_PER_DOCUMENT, rng)
                points.append((point_id(payload["chunk_id"]), vectors[n].tolist(), payload))
            sink._store_upsert(points)
        seconds = {"seconds": time.perf_counter() - started}
        if engine == OPTIMIZED:
            started = time.perf_counter()
            sink.optimize()
            seconds["optimize_s"] = time.perf_counter() - started
    return seconds


def _victim(size: int) -> int:
    """The document deleted at `size`: the last one seeded for it, so later sizes know it is gone."""
    return size // CHUNKS_PER_DOCUMENT - 1


def _present(rng: random.Random, documents: int) -> int:
    """A random seeded document not deleted at an earlier size."""
    gone = {_victim(s) for s in SIZES}
    while (d := rng.randrange(documents)) in gone:
        pass
    return d


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(directory: Path, engine: str, size: int, queries: int) -> dict[str, float]:
    """The figures for one engine at one size, in this (fresh) process."""
    import unichunk.sinks.vectors.qdrant_edge  # noqa: F401 - imports are paid once per process, not per open
    from unichunk.chunking.base import Span, chunks_from_spans
    from unichunk.chunking.models import Document
    from unichunk.sinks.base import Prepared

    rng = random.Random(size)
    documents = size // CHUNKS_PER_DOCUMENT
    started = time.perf_counter()
    sink = _open(directory, engine)
    first = sink.search("first query", k=10)
    open_first = time.perf_counter() - started
    assert len(first) == 10, f"{engine}: the store answered {len(first)} hits"
    rss_open = _rss_mb()

    def timed(call: Any) -> float:
        t = time.perf_counter()
        call()
        return time.perf_counter() - t

    plain = [timed(lambda n=n: sink.search(f"query {n}", k=10)) for n in range(queries)]
    filtered = []
    for n in range(queries):
        wanted = _document_id(_present(rng, documents))
        t = time.perf_counter()
        hits = sink.search(f"filtered {n}", k=10, filter={"document_id": wanted})
        filtered.append(time.perf_counter() - t)
        assert hits and {h.document_id for h in hits} == {wanted}, f"{engine}: filter returned {len(hits)}"

    batch = []
    for d in range(10_000_000 + size, 10_000_000 + size + WRITE_BATCH // CHUNKS_PER_DOCUMENT):
        text = "\n\n".join(_payload(d, i, rng)["content"] for i in range(CHUNKS_PER_DOCUMENT))
        document = Document(text=text, source_system="bench", source_id=f"new-{d}")
        spans, offset = [], 0
        for paragraph in text.split("\n\n"):
            offset = text.index(paragraph, offset)
            spans.append(Span(offset, offset + len(paragraph), 180, ("Guide",), {}))
            offset += len(paragraph)
        batch.append((document, chunks_from_spans(document, spans)))
    prepared: Prepared = sink.prepare(batch)
    write = timed(lambda: sink.write(prepared))
    victim = _document_id(_victim(size))
    deleted = {}
    delete = timed(lambda: deleted.setdefault("n", sink.delete(victim)))
    assert deleted["n"] == CHUNKS_PER_DOCUMENT, deleted
    reoptimize = timed(sink.optimize) if engine == OPTIMIZED else float("nan")
    count = sink.count()
    sink.close()
    return {
        "reoptimize_s": reoptimize,
        "points": float(count),
        "open_first_query_s": open_first,
        "query_p50_ms": statistics.median(plain) * 1000,
        "filtered_p50_ms": statistics.median(filtered) * 1000,
        "write_640_s": write,
        "delete_doc_ms": delete * 1000,
        "rss_open_mb": rss_open,
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _child(args: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.vector_store", *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


ROWS = [
    ("open + first query (s)", "open_first_query_s", "{:.2f}"),
    ("query p50 (ms)", "query_p50_ms", "{:.1f}"),
    ("filtered query p50 (ms)", "filtered_p50_ms", "{:.1f}"),
    ("write 640 chunks (s)", "write_640_s", "{:.2f}"),
    ("delete one document (ms)", "delete_doc_ms", "{:.1f}"),
    ("RSS after open (MB)", "rss_open_mb", "{:.0f}"),
    ("peak RSS (MB)", "rss_peak_mb", "{:.0f}"),
    ("optimize after seeding (s)", "optimize_s", "{:.1f}"),
    ("optimize after the write and delete (s)", "reoptimize_s", "{:.2f}"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20k points only")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="grow the stores here and keep them")
    parser.add_argument("--child", nargs=4, metavar=("ACTION", "DIR", "ENGINE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        action, directory, engine, number = args.child
        if action == "seed":
            start, stop = (int(x) for x in number.split(":"))
            print(json.dumps(seed(Path(directory), engine, start, stop)))
        else:
            print(json.dumps(measure(Path(directory), engine, int(number), args.queries)))
        return

    sizes = [20_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    engines = args.engines.split(",")
    shm = Path("/dev/shm")
    root = args.keep or Path(tempfile.mkdtemp(prefix="unichunk-vectors-", dir=shm if shm.is_dir() else None))
    print(f"stores under {root}; {os.cpu_count()} CPUs; {args.queries} queries per p50", flush=True)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    seeded = dict.fromkeys(engines, 0)
    try:
        for size in sizes:
            results[size] = {}
            for engine in engines:
                store = root / engine
                took = _child(["--child", "seed", str(store), engine, f"{seeded[engine]}:{size}"])
                print(f"{engine}: seeded {seeded[engine]}..{size}: {took}", flush=True)
                seeded[engine] = size  # measure() adds its batch as other documents (IDs from 10M)
                results[size][engine] = _child(
                    ["--queries", str(args.queries), "--child", "measure", str(store), engine, str(size)]
                )
                results[size][engine]["optimize_s"] = took.get("optimize_s", float("nan"))
                print(f"{engine} @ {size}: {results[size][engine]}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print()
    pairs = [(a, b) for a, b in (("local", "edge"), ("edge", OPTIMIZED)) if a in engines and b in engines]
    for size, by_engine in results.items():
        print(f"| {size // 1000}k points | " + " | ".join(engines + [f"{a} / {b}" for a, b in pairs]) + " |")
        print("|---" * (len(engines) + len(pairs) + 1) + "|")
        for label, key, fmt in ROWS:
            cells = [_cell(fmt, by_engine[e][key]) for e in engines]
            cells += [_ratio(by_engine[a][key], by_engine[b][key]) for a, b in pairs]
            print(f"| {label} | " + " | ".join(cells) + " |")
        print()


def _cell(fmt: str, value: float) -> str:
    return "" if value != value else fmt.format(value)  # NaN: not measured for this engine


def _ratio(a: float, b: float) -> str:
    return "" if a != a or b != b else f"{a / max(b, 1e-9):.1f}x"


if __name__ == "__main__":
    main()
