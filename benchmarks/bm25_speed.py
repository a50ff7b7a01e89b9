"""Benchmark the BM25 sink against rank_bm25.BM25Okapi on the same tokens: `python -m benchmarks.bm25_speed`.

Chunks are windows of real sentences from the shared eval corpora (found by `benchmarks.evaldata`;
without them, the bundled sample corpus, saying so), recombined at random so no two chunks are the same
text. Both sides score the same analyzer output; rank_bm25 gets the token lists already made (its build
and queries are timed without analysis), ours is timed end to end through the sink (analysis, SQLite,
index, fetching the hits' rows), which only flatters the baseline. Build times are given as wall and CPU
time (this process's), and as a ratio to rank_bm25's in the same run: the machine is shared, so CPU time
is the steadier figure. Opening is measured twice: from the index saved beside the store (what a reopen
does) and with that file removed (a rebuild from the stored terms).
Options: --chunks N (default 100000), --quick (20000 chunks), --queries, --baseline-queries, --repeats,
--corpora DIR.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from rank_bm25 import BM25Okapi

from benchmarks.evaldata import corpora_or_sample, corpus_files
from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.sentences import sentence_spans
from unichunk.sinks.keywords.analyzer import Analyzer
from unichunk.sinks.keywords.bm25 import BM25Sink

CHUNKS_PER_DOCUMENT = 20


def load_sentences(corpora: Path) -> list[str]:
    sentences = []
    for path in corpus_files(corpora):
        text = path.read_text(encoding="utf-8")
        sentences += [" ".join(text[s:e].split()) for s, e in sentence_spans(text)]
    return [s for s in sentences if len(s) > 20]


def make_document(name: str, pieces: list[str]) -> tuple[Document, list[Chunk]]:
    """A document made of `pieces` separated by blank lines, chunked exactly at them."""
    doc = Document(text="\n\n".join(pieces), source_system="bench", source_id=name)
    spans, start = [], 0
    for piece in pieces:
        spans.append(Span(start, start + len(piece), token_count=0))
        start += len(piece) + 2
    return doc, chunks_from_spans(doc, spans)


def build_batch(n_chunks: int, sentences: list[str], rng: random.Random, prefix: str = "doc"):
    """Documents of 20 chunks; each chunk is 3-6 random sentences, so chunks are varied and distinct."""
    batch = []
    for d in range(0, n_chunks, CHUNKS_PER_DOCUMENT):
        size = min(CHUNKS_PER_DOCUMENT, n_chunks - d)
        pieces = [" ".join(rng.sample(sentences, rng.randint(3, 6))) for _ in range(size)]
        batch.append(make_document(f"{prefix}{d // CHUNKS_PER_DOCUMENT}", pieces))
    return batch


def make_queries(n: int, sentences: list[str], rng: random.Random) -> list[str]:
    words_of = Analyzer(stemming=False).words
    queries = []
    while len(queries) < n:
        words = [w for w in words_of(rng.choice(sentences)) if len(w) > 3]
        if words:
            queries.append(" ".join(rng.sample(words, min(rng.randint(1, 4), len(words)))))
    return queries


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed_cpu(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def rank_bm25_top10(model: BM25Okapi, tokens: list[str]) -> list[int]:
    scores = model.get_scores(tokens)
    return [int(i) for i in np.argsort(-scores)[:10] if scores[i] > 0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="20000 chunks")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--baseline-queries", type=int, default=30, help="rank_bm25 is slow per query")
    parser.add_argument("--repeats", type=int, default=3, help="incremental add/delete rounds")
    parser.add_argument(
        "--corpora",
        type=Path,
        help="directory of *.md/*.txt texts (default: the eval corpora, else the sample)",
    )
    args = parser.parse_args(argv)
    n_chunks = 20_000 if args.quick else args.chunks

    rng = random.Random(42)
    sentences = load_sentences(args.corpora or corpora_or_sample("bm25_speed"))
    batch = build_batch(n_chunks, sentences, rng)
    queries = make_queries(args.queries, sentences, rng)
    rows: list[tuple[str, str, str]] = []
    print(f"corpus: {n_chunks} chunks in {len(batch)} documents from {len(sentences)} sentences")

    with tempfile.TemporaryDirectory() as tmp:
        sink = BM25Sink(path=Path(tmp) / "bm25.sqlite")
        analyzer = sink.analyzer

        held: dict[str, Any] = {}
        t_prepare, c_prepare = timed_cpu(lambda: held.setdefault("prepared", sink.prepare(batch)))
        t_write, c_write = timed_cpu(lambda: sink.write(held["prepared"]))
        t_first, c_first = timed_cpu(lambda: sink.search("warm up"))  # builds the index, then saves it
        reopened = BM25Sink(path=sink.path)
        t_open = timed(lambda: reopened._current())
        from_saved = reopened.stats()["last_refresh"].get("from_saved_index") == 1
        reopened.close()
        saved = sink.path.with_name("bm25.index.npz")
        saved.unlink(missing_ok=True)
        rebuilt = BM25Sink(path=sink.path)
        t_cold = timed(lambda: rebuilt._current())  # and saves it again
        rebuilt.close()

        chunks = [c for _, cs in batch for c in cs]
        tokens = [analyzer(c.content) for c in chunks]  # the same tokens for the baselines
        model: BM25Okapi | None = None

        def build_rank() -> None:
            nonlocal model
            model = BM25Okapi(tokens)

        t_rank_build, c_rank_build = timed_cpu(build_rank)
        stock = bm25s.BM25()
        t_bm25s_build = timed(lambda: stock.index(tokens, show_progress=False))
        print(
            f"built: ours {t_prepare + t_write + t_first:.1f}s, rank_bm25 {t_rank_build:.1f}s, "
            f"bm25s {t_bm25s_build:.1f}s"
        )

        ours = [timed(lambda q=q: sink.search(q, k=10)) for q in queries]
        baseline_queries = queries[: args.baseline_queries]
        theirs = [timed(lambda q=q: rank_bm25_top10(model, analyzer(q))) for q in baseline_queries]

        add_ours, del_ours, add_rank, del_rank = [], [], [], []
        for r in range(args.repeats):
            doc, doc_chunks = build_batch(CHUNKS_PER_DOCUMENT, sentences, rng, prefix=f"new{r}-")[0]
            query_tokens = analyzer(queries[r])
            start = time.perf_counter()
            sink.upsert(doc, doc_chunks)
            sink.search(queries[r])  # pays the lazy index refresh
            add_ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            sink.delete(doc.document_id)
            sink.search(queries[r])
            del_ours.append(time.perf_counter() - start)
            new_tokens = [analyzer(c.content) for c in doc_chunks]  # analysed outside the baseline's clock
            start = time.perf_counter()
            rank_bm25_top10(BM25Okapi(tokens + new_tokens), query_tokens)
            add_rank.append(time.perf_counter() - start)
            start = time.perf_counter()
            rank_bm25_top10(BM25Okapi(tokens), query_tokens)
            del_rank.append(time.perf_counter() - start)
        stats = sink.stats()
        sink.close()

    p50, p95 = percentiles(ours)
    r50, r95 = percentiles(theirs)
    build, build_cpu = t_prepare + t_write + t_first, c_prepare + c_write + c_first
    ratio, ratio_cpu = build / t_rank_build, build_cpu / c_rank_build
    rows += [
        ("query latency p50", f"{p50:.2f} ms ({len(ours)} q)", f"{r50:.1f} ms ({len(theirs)} q)"),
        ("query latency p95", f"{p95:.2f} ms", f"{r95:.1f} ms"),
        (
            "index build (full corpus)",
            f"{build:.1f} s: analyse {t_prepare:.1f} + SQLite {t_write:.1f} + index {t_first:.1f}; CPU {build_cpu:.1f} s",
            f"{t_rank_build:.1f} s, CPU {c_rank_build:.1f} s (tokens given)",
        ),
        ("build / rank_bm25's (target <= 5x)", f"{ratio:.1f}x wall, {ratio_cpu:.1f}x CPU", "1x"),
        (
            "index open: saved index" + ("" if from_saved else " (NOT LOADED)"),
            f"{t_open:.2f} s",
            "n/a (in memory only)",
        ),
        ("index open: rebuilt from stored terms", f"{t_cold:.2f} s", "n/a"),
        ("add 1 document (20 chunks) + next query", f"{statistics.median(add_ours) * 1000:.0f} ms", f"{statistics.median(add_rank):.1f} s (rebuild)"),
        ("delete 1 document + next query", f"{statistics.median(del_ours) * 1000:.0f} ms", f"{statistics.median(del_rank):.1f} s (rebuild)"),
        ("stock bm25s.index (same tokens)", f"{t_bm25s_build:.1f} s", ""),
    ]  # fmt: skip
    print(
        f"\nBM25 at {stats['chunks']} chunks, vocabulary {stats['vocabulary']}, {stats['avg_chunk_terms']:.0f} terms/chunk"
    )
    widths = [
        max(len(r[i]) for r in [*rows, ("", "ours (BM25Sink)", "rank_bm25.BM25Okapi")]) for i in range(3)
    ]
    for row in [("", "ours (BM25Sink)", "rank_bm25.BM25Okapi"), *rows]:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(f"\ntarget p50 <= 10 ms: {'met' if p50 <= 10 else 'MISSED'}")
    print(f"target build <= 5x rank_bm25 (CPU): {'met' if ratio_cpu <= 5 else 'MISSED'}")
    print(f"saved index loaded on open: {'yes' if from_saved else 'NO'}")


if __name__ == "__main__":
    main()
