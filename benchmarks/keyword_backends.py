"""Where the keyword index lives in server mode, measured: `python -m benchmarks.keyword_backends`.

Two designs, side by side in one run:

- **(a) PostgreSQL + bm25s** (what `BM25Sink` does in server mode): the BM25 term store in PostgreSQL,
  each query-serving process holding a bm25s index it loads from the store and keeps current from the
  store's change log;
- **(b) Qdrant sparse + IDF**: BM25 as Qdrant sparse vectors with the IDF modifier, scored by Qdrant.
  Document values are BM25's term-frequency part tf / (tf + k1 (1 - b + b len / avglen)), which the
  writer must compute with *some* average length; Qdrant multiplies by its own IDF at query time. No Qdrant
  server can run on this machine, so (b) runs in-process on qdrant-edge (Qdrant's engine: the segments,
  sparse index and IDF a server runs) and, for recall, qdrant-client's local mode. What that leaves out:
  the network round trip (~0.3-1 ms on a LAN), and a server's memory sits in the Qdrant process rather
  than in each serving process, which then holds only a client ("serving process" row).

**Recall** (the eval data: corpora chunked by the shipped `auto` strategy, its 276 questions): every
variant's top-10 against the exact scorer (our embedded SQLite store: bm25s, Lucene IDF, k1 1.5, b 0.75)
and against rank_bm25, and the character recall@5/@10 of `benchmarks.retrieval_quality`. (b) is run with
the exact average length (an oracle no writer has), with the running average a writer knows when it writes
each document, with Qdrant's default 256, and after one corpus is re-ingested under new chunk IDs (Qdrant
counts deleted points in N and df until its optimizer rewrites the segments; then after `optimize()`).

**Latency and memory** (synthetic corpora, 100k and 1M chunks, ~90 terms each from a Zipf vocabulary of
150k words; rows written in bulk, COPY on PostgreSQL): per design, a fresh process opens the store and
answers queries of 1-4 mid-frequency terms (k=10, hits with their text): open time (for (a) the full load
of the term store), p50/p95, a 20-chunk write followed by the next query (for (a) the incremental refresh
every serving process pays), RSS. Writes: chunks/s through `BM25Sink.write` (PostgreSQL) and through the
shard's upsert (edge) for the same prepared batches.

PostgreSQL: `--database-url`, else POSTGRES_URL, else a throw-away cluster started like the tests' (initdb
+ pg_ctl, fsync off). Options: --sizes 100000,1000000, --queries N, --skip-recall, --skip-latency, --quick
(20k chunks, 50 queries).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import evaldata

K1, B = 1.5, 0.75
VOCABULARY = 150_000
MEAN_TERMS = 90
PAGE = 50_000
CHUNKS_PER_DOCUMENT = 20
SIZES = (100_000, 1_000_000)
QDRANT_DEFAULT_AVGLEN = 256.0  # Qdrant's Bm25Config / fastembed default


def _rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (VmHWM: its peak; getrusage's maxrss would count the parent's from
    before the exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _percentiles(seconds: Sequence[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def term_index(term: str) -> int:
    """A term's sparse-vector dimension: a hash, as a writer that shares no vocabulary must use."""
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


def tf_weights(counts: Counter[str] | dict[str, int], avglen: float) -> tuple[list[int], list[float]]:
    """BM25's term-frequency part per term (Lucene form, as bm25s scores), Qdrant adding the IDF."""
    length = sum(counts.values())
    norm = K1 * (1 - B + B * length / avglen)
    merged: dict[int, float] = {}
    for term, tf in counts.items():
        i = term_index(term)
        merged[i] = merged.get(i, 0.0) + tf / (tf + norm)  # a hash collision adds up, as it would
    return list(merged), list(merged.values())


def query_vector(counts: Counter[str]) -> tuple[list[int], list[float]]:
    merged: dict[int, float] = {}
    for term, n in counts.items():
        merged[term_index(term)] = merged.get(term_index(term), 0.0) + float(n)  # repeats count, as in bm25s
    return list(merged), list(merged.values())


# -- (b) on qdrant-edge and on local mode ----------------------------------------------------------------


class EdgeSparse:
    """BM25 as sparse vectors with the IDF modifier in a qdrant-edge shard."""

    def __init__(self, path: Path, create: bool = True, eager_vacuum: bool = False) -> None:
        from qdrant_edge import EdgeConfig, EdgeOptimizersConfig, EdgeShard, EdgeSparseVectorParams, Modifier

        if create:
            # eager_vacuum: optimize() rewrites a segment after any delete (defaults: 20 % deleted, and
            # 1000 vectors at least), so its IDF statistics forget deleted points.
            optimizers = (
                EdgeOptimizersConfig(deleted_threshold=0.001, vacuum_min_vector_number=1)
                if eager_vacuum
                else None
            )
            config = EdgeConfig(
                sparse_vectors={"bm25": EdgeSparseVectorParams(modifier=Modifier.Idf)}, optimizers=optimizers
            )
            self.shard = EdgeShard.create(str(path), config)
        else:
            self.shard = EdgeShard.load(str(path))

    def upsert(self, points: Sequence[tuple[int, list[int], list[float], dict[str, Any]]]) -> None:
        from qdrant_edge import Point, SparseVector, UpdateOperation

        self.shard.update(
            UpdateOperation.upsert_points(
                [Point(pid, {"bm25": SparseVector(idx, val)}, payload) for pid, idx, val, payload in points]
            )
        )

    def delete(self, ids: Sequence[int]) -> None:
        from qdrant_edge import UpdateOperation

        self.shard.update(UpdateOperation.delete_points(list(ids)))

    def search(self, indices: list[int], values: list[float], k: int, payload: bool = False) -> list[Any]:
        from qdrant_edge import Query, QueryRequest, SparseVector

        request = QueryRequest(
            limit=k, query=Query.Nearest(SparseVector(indices, values), using="bm25"), with_payload=payload
        )
        return [(int(p.id), p.payload) for p in self.shard.query(request)]


class LocalSparse:
    """The same in qdrant-client's local mode (in memory), which keeps IDF statistics exact on delete."""

    def __init__(self) -> None:
        from qdrant_client import QdrantClient, models

        self.models = models
        self.client = QdrantClient(":memory:")
        self.client.create_collection(
            "bm25",
            vectors_config={},
            sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )

    def upsert(self, points: Sequence[tuple[int, list[int], list[float], dict[str, Any]]]) -> None:
        m = self.models
        self.client.upsert(
            "bm25",
            [m.PointStruct(id=pid, vector={"bm25": m.SparseVector(indices=i, values=v)}, payload=p)
             for pid, i, v, p in points],
        )  # fmt: skip

    def search(self, indices: list[int], values: list[float], k: int, payload: bool = False) -> list[Any]:
        m = self.models
        hits = self.client.query_points(
            "bm25", query=m.SparseVector(indices=indices, values=values), using="bm25", limit=k
        ).points
        return [(int(h.id), None) for h in hits]


# -- recall on the eval data -----------------------------------------------------------------------------


@dataclass
class RecallRow:
    name: str
    overlap_exact: float
    overlap_rank_bm25: float
    recall5: float
    recall10: float


def recall_table(database_url: str, tmp: Path) -> list[RecallRow]:
    from pydantic import SecretStr
    from rank_bm25 import BM25Okapi

    from benchmarks.retrieval_quality import load_corpora, load_questions, score
    from unichunk.chunking.config import ChunkStrategy
    from unichunk.chunking.packing import token_starts
    from unichunk.chunking.service import ChunkingService
    from unichunk.sinks.config import SinkSettings
    from unichunk.sinks.keywords.bm25 import BM25Sink

    eval_dir = evaldata.require_eval_dir("keyword_backends")
    corpora = load_corpora(eval_dir / "corpora")
    questions = load_questions(eval_dir / "questions.csv", corpora)
    service, strategy = ChunkingService(), ChunkStrategy()
    chunked = {name: service.chunk(doc, strategy) for name, doc in corpora.items()}
    chunks = [c for cs in chunked.values() for c in cs]
    doc_ids = {name: d.document_id for name, d in corpora.items()}
    starts = {d.document_id: token_starts(d.text)[:-1] for d in corpora.values()}
    print(f"recall: {len(chunks)} chunks of {len(corpora)} corpora, {len(questions)} questions", flush=True)

    exact = BM25Sink(path=tmp / "exact.sqlite")
    server = BM25Sink(SinkSettings(data_dir=tmp / "data", database_url=SecretStr(database_url)))
    for name, doc in corpora.items():
        exact.upsert(doc, chunked[name])
        server.upsert(doc, chunked[name])
    analyzer = exact.analyzer
    counts = analyzer.count_many([c.content for c in chunks])
    rank = BM25Okapi(analyzer.analyze_many([c.content for c in chunks]))
    position = {c.chunk_id: i for i, c in enumerate(chunks)}
    query_counts = [Counter(analyzer(q.text)) for q in questions]

    def top_exact(i: int) -> list[int]:
        return [position[h.chunk_id] for h in exact.search(questions[i].text, k=10)]

    def top_server(i: int) -> list[int]:
        return [position[h.chunk_id] for h in server.search(questions[i].text, k=10)]

    def top_rank(i: int) -> list[int]:
        scores = rank.get_scores(list(query_counts[i].elements()))
        return [int(j) for j in np.argsort(-scores, kind="stable")[:10] if scores[j] > 0]

    def sparse(store: EdgeSparse | LocalSparse) -> Callable[[int], list[int]]:
        def top(i: int) -> list[int]:
            if not query_counts[i]:
                return []
            return [pid for pid, _ in store.search(*query_vector(query_counts[i]), k=10)]

        return top

    def build(store: EdgeSparse | LocalSparse, avglen: Callable[[int], float]) -> None:
        store.upsert([(i, *tf_weights(c, avglen(i)), {}) for i, c in enumerate(counts)])

    lengths = np.array([sum(c.values()) for c in counts], dtype=float)
    oracle = float(lengths.mean())
    # A writer knows the lengths written so far: each corpus is one ingest batch, in order.
    running: dict[int, float] = {}
    seen = 0
    for cs in chunked.values():
        seen += len(cs)
        for i in range(seen - len(cs), seen):
            running[i] = float(lengths[:seen].mean())
    variants: list[tuple[str, Callable[[int], list[int]]]] = [
        ("(a) PostgreSQL term store + in-process BM25 (server mode)", top_server),
        ("rank_bm25 BM25Okapi (same tokens)", top_rank),
    ]
    local = LocalSparse()
    build(local, lambda i: oracle)
    variants.append(("(b) local mode, sparse+IDF, exact avg length", sparse(local)))
    for label, avglen in (
        ("exact avg length", lambda i: oracle),
        ("writer's running avg length", running.__getitem__),
        (f"Qdrant default avg length {QDRANT_DEFAULT_AVGLEN:.0f}", lambda i: QDRANT_DEFAULT_AVGLEN),
    ):
        edge = EdgeSparse(tmp / f"edge-{len(variants)}")
        build(edge, avglen)
        variants.append((f"(b) qdrant-edge, sparse+IDF, {label}", sparse(edge)))
    # Re-ingest the first corpus under new chunk IDs (a changed chunking): the exact store's content, and
    # so its answers, end the same; Qdrant keeps the deleted points in its statistics until optimised.
    churn = EdgeSparse(tmp / "edge-churn")
    build(churn, lambda i: oracle)
    first = len(next(iter(chunked.values())))
    offset = len(chunks)
    churn.delete(list(range(first)))
    churn.upsert([(offset + i, *tf_weights(counts[i], oracle), {}) for i in range(first)])

    def unshift(top: Callable[[int], list[int]]) -> Callable[[int], list[int]]:
        return lambda i: [p - offset if p >= offset else p for p in top(i)]

    variants.append(("(b) qdrant-edge, one corpus re-ingested", unshift(sparse(churn))))
    churn_opt = EdgeSparse(tmp / "edge-churn-opt", eager_vacuum=True)
    build(churn_opt, lambda i: oracle)
    churn_opt.delete(list(range(first)))
    churn_opt.upsert([(offset + i, *tf_weights(counts[i], oracle), {}) for i in range(first)])
    assert churn_opt.shard.optimize(), "nothing was vacuumed"
    variants.append(("(b) qdrant-edge, re-ingested, then vacuumed", unshift(sparse(churn_opt))))

    reference = [top_exact(i) for i in range(len(questions))]
    against_rank = [top_rank(i) for i in range(len(questions))]

    def overlap(a: list[int], b: list[int]) -> float:
        return len(set(a) & set(b)) / max(len(a), len(b), 1)

    def char_recall(tops: list[list[int]], k: int) -> float:
        values = []
        for q, top in zip(questions, tops, strict=True):
            spans = [(chunks[p].document_id, chunks[p].start_char, chunks[p].end_char) for p in top[:k]]
            values.append(score(q, doc_ids[q.corpus], spans, starts)[0])
        return float(np.mean(values))

    rows = [
        RecallRow(
            "exact: embedded SQLite + bm25s",
            1.0,
            float(np.mean([overlap(a, b) for a, b in zip(reference, against_rank, strict=True)])),
            char_recall(reference, 5),
            char_recall(reference, 10),
        )
    ]
    for name, top in variants:
        tops = [top(i) for i in range(len(questions))]
        rows.append(
            RecallRow(
                name,
                float(np.mean([overlap(a, b) for a, b in zip(tops, reference, strict=True)])),
                float(np.mean([overlap(a, b) for a, b in zip(tops, against_rank, strict=True)])),
                char_recall(tops, 5),
                char_recall(tops, 10),
            )
        )
    exact.close()
    server.drop()
    return rows


# -- the synthetic corpus --------------------------------------------------------------------------------


def vocabulary(size: int = VOCABULARY, seed: int = 7) -> list[str]:
    """Distinct lowercase words our analyzer keeps as they are (no stemming change, no stopword)."""
    from unichunk.sinks.keywords.analyzer import Analyzer

    analyzer, rng = Analyzer(), random.Random(seed)
    letters = "bcdfghjklmnpqrstvwxz" + "aeiou" * 2
    words: dict[str, None] = {}
    while len(words) < size:
        batch = ["".join(rng.choices(letters, k=rng.randint(4, 10))) for _ in range(20_000)]
        for word, terms in zip(batch, analyzer.analyze_many(batch), strict=True):
            if terms == [word]:
                words[word] = None
    return list(words)[:size]


@dataclass
class Page:
    first: int  # global number of the page's first chunk
    indptr: np.ndarray  # chunk i's distinct terms are terms[indptr[i]:indptr[i + 1]]
    terms: np.ndarray
    tfs: np.ndarray
    lengths: np.ndarray


def pages(n_chunks: int, n_words: int, seed: int = 11) -> Iterator[Page]:
    """The synthetic corpus, a page at a time (deterministic: both designs get the same chunks)."""
    weights = 1.0 / np.arange(1, n_words + 1) ** 1.07
    cumulative = np.cumsum(weights / weights.sum())
    for first in range(0, n_chunks, PAGE):
        rng = np.random.default_rng([seed, first])
        n = min(PAGE, n_chunks - first)
        lengths = np.maximum(rng.poisson(MEAN_TERMS, n), 5)
        tokens = np.searchsorted(cumulative, rng.random(int(lengths.sum())))
        tokens = np.minimum(tokens, n_words - 1)
        chunk = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keys, tfs = np.unique(chunk * n_words + tokens, return_counts=True)
        owners = keys // n_words
        indptr = np.searchsorted(owners, np.arange(n + 1))
        yield Page(first, indptr, (keys % n_words).astype(np.int64), tfs.astype(np.int64), lengths)


def chunk_id(n: int) -> str:
    return f"syn_{n // CHUNKS_PER_DOCUMENT:07d}::chunk::{n % CHUNKS_PER_DOCUMENT:03d}::{n & 0xFFFFFFFF:08x}"


def queries(words: list[str], n: int, seed: int = 5) -> list[list[str]]:
    """1-4 terms each, from ranks 20-5000 of the Zipf vocabulary (words a user would search for)."""
    rng = random.Random(seed)
    return [rng.sample(words[20:5000], rng.randint(1, 4)) for _ in range(n)]


def load_postgres(url: str, n_chunks: int, words: list[str]) -> float:
    """The synthetic rows into server mode's keyword schema by COPY; returns seconds."""
    import psycopg
    from pydantic import SecretStr

    from unichunk.sinks.config import SinkSettings
    from unichunk.sinks.keywords.bm25 import BM25Sink

    BM25Sink(SinkSettings(database_url=SecretStr(url))).close()  # creates the schema and tables
    started = time.perf_counter()
    columns = "chunk_id, document_id, chunk_index, start_char, end_char, content, heading_chain, terms, tfs, doc_len, rev"
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE unichunk_keywords.chunks, unichunk_keywords.removed")
        with conn.cursor().copy(f"COPY unichunk_keywords.chunks ({columns}) FROM STDIN") as copy:
            for page in pages(n_chunks, len(words)):
                for i in range(len(page.lengths)):
                    a, b = page.indptr[i], page.indptr[i + 1]
                    terms = " ".join([words[t] for t in page.terms[a:b].tolist()])
                    n = page.first + i
                    copy.write_row(
                        (chunk_id(n), chunk_id(n).split("::")[0], n % CHUNKS_PER_DOCUMENT, 0, len(terms),
                         terms.encode(), "[]", terms, page.tfs[a:b].astype("<u4").tobytes(),
                         int(page.lengths[i]), 1)
                    )  # fmt: skip
        conn.execute("UPDATE unichunk_keywords.state SET revision = 1, log_floor = 0")
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE unichunk_keywords.chunks")
    return time.perf_counter() - started


def load_edge(path: Path, n_chunks: int, words: list[str]) -> float:
    """The same chunks as sparse vectors (exact average length) into a qdrant-edge shard; seconds."""
    hashed = np.array([term_index(w) for w in words], dtype=np.int64)
    store = EdgeSparse(path)
    started = time.perf_counter()
    avglen = float(MEAN_TERMS)
    for page in pages(n_chunks, len(words)):
        points = []
        for i in range(len(page.lengths)):
            a, b = page.indptr[i], page.indptr[i + 1]
            tfs = page.tfs[a:b]
            values = tfs / (tfs + K1 * (1 - B + B * page.lengths[i] / avglen))
            n = page.first + i
            content = " ".join([words[t] for t in page.terms[a:b].tolist()])
            points.append(
                (
                    n,
                    hashed[page.terms[a:b]].tolist(),
                    values.tolist(),
                    {"chunk_id": chunk_id(n), "content": content},
                )
            )
            if len(points) == 5000:
                store.upsert(points)
                points = []
        if points:
            store.upsert(points)
    store.shard.flush()
    seconds = time.perf_counter() - started
    store.shard.close()
    return seconds


# -- serving processes -----------------------------------------------------------------------------------


def _new_document(words: list[str], n: int) -> tuple[Any, Any]:
    from unichunk.chunking.base import Span, chunks_from_spans
    from unichunk.chunking.models import Document

    rng = random.Random(n)
    pieces = [" ".join(rng.choices(words[:20000], k=MEAN_TERMS)) for _ in range(CHUNKS_PER_DOCUMENT)]
    text = "\n\n".join(pieces)
    document = Document(text=text, source_system="bench", source_id=f"new-{n}")
    spans, start = [], 0
    for piece in pieces:
        spans.append(Span(start, start + len(piece), len(piece.split())))
        start += len(piece) + 2
    return document, chunks_from_spans(document, spans)


def _serving_figures(
    search: Callable[[str], list[Any]],
    prepare_change: Callable[[], Callable[[], None]],
    words: list[str],
    n_queries: int,
    baseline: float,
    started: float,
) -> dict[str, float]:
    """The figures both serving processes report, measured alike: open to first answer (from `started`),
    query latency, one new document written (`prepare_change` readies the write untimed and returns it)
    then the next query, and memory above `baseline`."""
    first = search(" ".join(queries(words, 1, seed=99)[0]))
    opened = time.perf_counter() - started
    assert first, "the store answered nothing"
    rss = _rss_mb()
    times = []
    for q in queries(words, n_queries):
        t = time.perf_counter()
        search(" ".join(q))
        times.append(time.perf_counter() - t)
    write = prepare_change()
    t = time.perf_counter()
    write()
    search(" ".join(queries(words, 1, seed=98)[0]))
    changed = time.perf_counter() - t
    p50, p95 = _percentiles(times)
    return {
        "open_s": opened,
        "p50_ms": p50,
        "p95_ms": p95,
        "change_s": changed,
        "rss_mb": rss,
        "rss_index_mb": rss - baseline,
        "peak_mb": _rss_mb("VmHWM"),
    }


def serve_postgres(url: str, words: list[str], n_queries: int) -> dict[str, float]:
    from pydantic import SecretStr

    from unichunk.sinks.config import SinkSettings
    from unichunk.sinks.keywords.bm25 import BM25Sink

    baseline = _rss_mb()  # after the imports: the rest is the store's
    started = time.perf_counter()
    sink = BM25Sink(SinkSettings(database_url=SecretStr(url)))

    def search(text: str) -> list[Any]:
        hits = sink.search(text, k=10)
        assert all(h.content for h in hits)
        return hits

    def prepare_change() -> Callable[[], None]:
        prepared = sink.prepare([_new_document(words, 1)])
        return lambda: sink.write(prepared)

    return _serving_figures(search, prepare_change, words, n_queries, baseline, started)


def serve_edge(path: str, words: list[str], n_queries: int) -> dict[str, float]:
    import qdrant_edge  # noqa: F401 - imported before the baseline, as the other side's modules are

    from unichunk.sinks.keywords.analyzer import Analyzer

    analyzer = Analyzer()
    baseline = _rss_mb()
    started = time.perf_counter()
    store = EdgeSparse(Path(path), create=False)

    def search(text: str) -> list[Any]:
        hits = store.search(*query_vector(Counter(analyzer(text))), k=10, payload=True)
        assert all(p["content"] for _, p in hits)
        return hits

    def prepare_change() -> Callable[[], None]:
        _, chunks = _new_document(words, 1)
        counts = analyzer.count_many([c.content for c in chunks])
        points = [(10**9 + i, *tf_weights(c, float(MEAN_TERMS)), {"content": ch.content})
                  for i, (c, ch) in enumerate(zip(counts, chunks, strict=True))]  # fmt: skip
        return lambda: store.upsert(points)

    return _serving_figures(search, prepare_change, words, n_queries, baseline, started)


def serve_client() -> dict[str, float]:
    """A serving process of (b) with a Qdrant server: it holds a client, no index."""
    from qdrant_client import QdrantClient

    QdrantClient(location=":memory:").close()
    return {"rss_mb": _rss_mb()}


def write_rates(url: str, tmp: Path, words: list[str], batches: int = 8) -> dict[str, float]:
    """Chunks/s of 640-chunk batches through BM25Sink.write on PostgreSQL and the edge shard's upsert."""
    from pydantic import SecretStr

    from unichunk.sinks.config import SinkSettings
    from unichunk.sinks.keywords.bm25 import BM25Sink

    sink = BM25Sink(SinkSettings(data_dir=tmp / "rates", database_url=SecretStr(url), generation="rates"))
    edge = EdgeSparse(tmp / "edge-rates")
    prepared, vectors = [], []
    for b in range(batches):
        batch = [_new_document(words, 1000 * b + d) for d in range(640 // CHUNKS_PER_DOCUMENT)]
        prepared.append(sink.prepare(batch))
        counts = sink.analyzer.count_many([c.content for _, cs in batch for c in cs])
        vectors.append([(b * 1000 + i, *tf_weights(c, float(MEAN_TERMS)), {}) for i, c in enumerate(counts)])
    t = time.perf_counter()
    for p in prepared:
        sink.write(p)
    pg = time.perf_counter() - t
    t = time.perf_counter()
    for v in vectors:
        edge.upsert(v)
    edge.shard.flush()
    qe = time.perf_counter() - t
    sink.drop()
    return {"postgres": 640 * batches / pg, "edge": 640 * batches / qe}


def _child(args: list[str]) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.keyword_backends", "--child", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _postgres_url(given: str | None) -> tuple[str, Callable[[], None]]:
    """An admin URL, and how to stop what was started for it."""
    if given or os.environ.get("POSTGRES_URL"):
        return str(given or os.environ["POSTGRES_URL"]), lambda: None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import servers  # the tests' throw-away cluster (initdb + pg_ctl on a free port)

    server = servers.start_postgres()
    return server.url, server.stop


def _fresh_database(admin_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--database-url", help="a PostgreSQL admin URL (default: POSTGRES_URL, else start one)"
    )
    parser.add_argument("--skip-recall", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20k chunks, 50 queries")
    parser.add_argument("--vocabulary", type=int, default=VOCABULARY, help="words in the synthetic corpora")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, target, n = args.child[0], args.child[1] if len(args.child) > 1 else "", int(args.child[-1])
        words = json.loads(Path(args.child[2]).read_text()) if kind != "client" else []
        result = {
            "postgres": lambda: serve_postgres(target, words, n),
            "edge": lambda: serve_edge(target, words, n),
            "client": serve_client,
        }[kind]()
        print(json.dumps(result))
        return

    sizes = [20_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    n_queries = 50 if args.quick else args.queries
    admin_url, stop = _postgres_url(args.database_url)
    print(
        f"keyword backends, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="unichunk-keywords-") as tmp_dir:
            tmp = Path(tmp_dir)
            if not args.skip_recall:
                rows = recall_table(_fresh_database(admin_url, "bench_keywords_recall"), tmp)
                print(
                    "\n| recall on the eval data (top-10) | overlap with exact | overlap with rank_bm25 | char recall@5 | char recall@10 |"
                )
                print("|---|---:|---:|---:|---:|")
                for r in rows:
                    print(
                        f"| {r.name} | {r.overlap_exact:.3f} | {r.overlap_rank_bm25:.3f} | {r.recall5:.3f} | {r.recall10:.3f} |"
                    )
            if not args.skip_latency:
                latency(admin_url, tmp, sizes, n_queries, args.vocabulary)
    finally:
        stop()


def latency(admin_url: str, tmp: Path, sizes: list[int], n_queries: int, n_words: int = VOCABULARY) -> None:
    words = vocabulary(n_words)
    words_file = tmp / "words.json"
    words_file.write_text(json.dumps(words))
    url = _fresh_database(admin_url, "bench_keywords_latency")
    rates = write_rates(url, tmp, words)
    client = _child(["client", "0"])
    table: dict[int, dict[str, dict[str, float]]] = {}
    for size in sizes:
        copy_s = load_postgres(url, size, words)
        edge_dir = tmp / f"edge-{size}"
        edge_s = load_edge(edge_dir, size, words)
        print(
            f"{size} chunks: COPY into PostgreSQL {copy_s:.0f} s, qdrant-edge upsert {edge_s:.0f} s",
            flush=True,
        )
        table[size] = {
            "postgres": _child(["postgres", url, str(words_file), str(n_queries)]),
            "edge": _child(["edge", str(edge_dir), str(words_file), str(n_queries)]),
        }
        print(f"{size}: {table[size]}", flush=True)
    print(f"\nwrites, 640-chunk batches: (a) BM25Sink.write on PostgreSQL {rates['postgres']:.0f} chunks/s, "
          f"(b) qdrant-edge upsert {rates['edge']:.0f} chunks/s (same analysed chunks)")  # fmt: skip
    rows = [
        ("open: load + first query (s)", "open_s", "{:.1f}"),
        ("query p50 (ms)", "p50_ms", "{:.2f}"),
        ("query p95 (ms)", "p95_ms", "{:.2f}"),
        ("write 20 chunks + next query (s)", "change_s", "{:.2f}"),
        ("RSS of the serving process (MB)", "rss_mb", "{:.0f}"),
        ("of which the index (MB)", "rss_index_mb", "{:.0f}"),
        ("peak RSS (MB)", "peak_mb", "{:.0f}"),
    ]
    print(
        "\n| synthetic, k=10 | "
        + " | ".join(
            f"{s // 1000}k: (a) PostgreSQL + in-process BM25 | {s // 1000}k: (b) qdrant-edge sparse+IDF"
            for s in sizes
        )
        + " |"
    )
    print("|---" * (1 + 2 * len(sizes)) + "|")
    for label, key, fmt in rows:
        cells = [fmt.format(table[s][d][key]) for s in sizes for d in ("postgres", "edge")]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(f"\n(b) with a Qdrant server: the serving process holds a client only, RSS {client['rss_mb']:.0f} MB;"
          " the index memory above is then the server's.")  # fmt: skip


if __name__ == "__main__":
    main()
