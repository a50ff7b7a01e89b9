"""Retrieval quality of each chunking strategy and size, next to two baselines measured in the same run.

    python -m sinks.bench_retrieval [--corpora DIR] [--questions FILE] [--quick]

Each corpus is ingested as one document through the real sinks (BM25Sink on a temp file, QdrantSink on an
in-memory Qdrant client with the default MiniLM embedder) and every question is answered by
`sinks.retrieval.retrieve` (the code the CLI and the HTTP API use) with BM25, vector and hybrid ranking.
Scores are over **characters** of the retrieved chunks against the reference spans (the eval README's
definition; the chroma "token-level" metrics are computed over character ranges too): recall, precision
and IoU, with the retrieved chunks' spans merged by offsets first (overlapping windows count once,
as `sinks.context` assembles them). The retrieved-token budget per question is the tiktoken count of
that merged text. Embeddings are cached by sha256 of the text (memory and `--cache-dir`), so configs
sharing chunks embed them once.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunking.config import ChunkStrategy
from chunking.ids import make_chunk_id, sha256_hex
from chunking.models import Chunk, Document
from chunking.packing import token_starts
from chunking.tokenizer import TokenCounter, get_encoding
from sinks.embedders import Embedder

REPO_ROOT = Path(__file__).resolve().parents[1]
EVAL_DIR = REPO_ROOT.parent / "shared" / "eval"
KS = (1, 3, 5, 10)
MODES = ("keywords", "vectors", "hybrid")
STRATEGIES = ("token_window", "fixed_chars", "sentence", "paragraph", "markdown")
SIZES = (200, 400, 800)
OVERLAPS = (0.0, 0.15)
CANDIDATES = 40  # fixed RRF depth, so the top-k of every k is a prefix of the top-10
Interval = tuple[int, int]


class CachedEmbedder(Embedder):
    """Wraps an embedder with a sha256(text) -> vector cache in memory and, optionally, SQLite on disk."""

    def __init__(self, inner: Embedder, cache_dir: Path | None = None) -> None:
        self.inner, self.name, self.max_tokens = inner, inner.name, inner.max_tokens
        self.memory: dict[str, list[float]] = {}
        self.embedded = 0
        self.db = None
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(cache_dir / f"{inner.name}.sqlite")
            self.db.execute("CREATE TABLE IF NOT EXISTS v (sha TEXT PRIMARY KEY, vec BLOB NOT NULL)")

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def embed(self, texts: list[str]) -> list[list[float]]:
        keys = [sha256_hex(t) for t in texts]
        missing = [k for k in dict.fromkeys(keys) if k not in self.memory]
        if missing and self.db is not None:
            marks = ",".join("?" * len(missing))
            for sha, blob in self.db.execute(f"SELECT sha, vec FROM v WHERE sha IN ({marks})", missing):
                self.memory[sha] = np.frombuffer(blob, dtype=np.float32).tolist()
            missing = [k for k in missing if k not in self.memory]
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            vectors = self.inner.embed([text_of[k] for k in missing])
            self.embedded += len(missing)
            for sha, vec in zip(missing, vectors, strict=True):
                self.memory[sha] = vec
            if self.db is not None:
                rows = [
                    (s, np.asarray(v, dtype=np.float32).tobytes())
                    for s, v in zip(missing, vectors, strict=True)
                ]
                self.db.executemany("INSERT OR REPLACE INTO v VALUES (?, ?)", rows)
                self.db.commit()
        return [self.memory[k] for k in keys]


# -- data ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    text: str
    corpus: str
    references: tuple[Interval, ...]


def load_corpora(directory: Path) -> dict[str, Document]:
    """Each corpus file as one Document keyed by its stem (offsets are into the file decoded as UTF-8)."""
    docs = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.suffix in {".md", ".txt", ".markdown"}:
            text = path.read_bytes().decode("utf-8")
            docs[path.stem] = Document(
                text=text, source_system="eval", source_id=path.name, title=path.stem, path=path.name,
                mime_type="text/markdown" if path.suffix != ".txt" else "text/plain",
            )  # fmt: skip
    if not docs:
        raise SystemExit(f"no corpora (*.md, *.txt) in {directory}")
    return docs


def load_questions(path: Path, corpora: dict[str, Document]) -> list[Question]:
    """Questions whose references are checked against the corpus text (a mismatch is a data error)."""
    out = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            doc = corpora.get(row["corpus_id"])
            if doc is None:
                raise SystemExit(f"question refers to unknown corpus {row['corpus_id']!r}")
            refs = []
            for ref in json.loads(row["references"]):
                start, end = int(ref["start_index"]), int(ref["end_index"])
                if doc.text[start:end] != ref["content"]:
                    raise SystemExit(f"reference [{start}:{end}] does not match corpus {row['corpus_id']}")
                refs.append((start, end))
            out.append(Question(row["question"], row["corpus_id"], tuple(refs)))
    return out


# -- chunkers ----------------------------------------------------------------------------------------------


def _chunks_from_spans(document: Document, spans: Iterable[Interval], counter: TokenCounter) -> list[Chunk]:
    chunks = []
    for index, (start, end) in enumerate(spans):
        content = document.text[start:end]
        chunks.append(
            Chunk(
                chunk_id=make_chunk_id(document.document_id, index, content),
                document_id=document.document_id, chunk_index=index, content=content,
                start_char=start, end_char=end, token_count=counter.count(content),
                content_hash=sha256_hex(content),
            )
        )  # fmt: skip
    return chunks


def fixed_token_window(size: int, overlap: int) -> Callable[[Document], list[Chunk]]:
    """The plain baseline: windows of `size` tokens every `size - overlap` tokens, nothing else."""
    counter = TokenCounter()

    def chunk(document: Document) -> list[Chunk]:
        starts = token_starts(document.text)
        n = len(starts) - 1
        spans = []
        for first in range(0, max(n, 1), size - overlap):
            spans.append((int(starts[first]), int(starts[min(first + size, n)])))
            if first + size >= n:
                break
        return _chunks_from_spans(document, spans, counter)

    return chunk


def llama_sentence_splitter(size: int, overlap: int) -> Callable[[Document], list[Chunk]]:
    """LlamaIndex SentenceSplitter (cl100k tokens); its chunks are located in the text to get offsets.

    It may rejoin sentences with normalised whitespace; a chunk not found verbatim is located by its first
    and last 40 characters, and one not found at all is dropped (counted in the printed note).
    """
    from llama_index.core.node_parser import SentenceSplitter

    splitter = SentenceSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=get_encoding().encode)
    counter = TokenCounter()

    def chunk(document: Document) -> list[Chunk]:
        text, spans, cursor = document.text, [], 0
        for piece in splitter.split_text(text):
            at = text.find(piece, cursor)
            if at < 0:
                at = text.find(piece, 0)
            if at >= 0:
                spans.append((at, at + len(piece)))
            else:
                head, tail = piece[:40], piece[-40:]
                s = text.find(head, cursor)
                e = text.find(tail, max(s, 0))
                if s < 0 or e < 0:
                    LOST[0] += 1
                    continue
                at, end = s, e + len(tail)
                spans.append((at, end))
            cursor = max(cursor, at + 1)
        return _chunks_from_spans(document, spans, counter)

    return chunk


LOST = [0]


def ours(name: str, size: int, overlap: int) -> Callable[[Document], list[Chunk]]:
    from chunking.service import ChunkingService

    service, strategy = ChunkingService(), ChunkStrategy(name=name, chunk_size=size, chunk_overlap=overlap)
    return lambda document: service.chunk(document, strategy)


def configurations(quick: bool) -> list[tuple[str, bool, Callable[[Document], list[Chunk]]]]:
    """(label, is_baseline, chunker). fixed_chars sizes are characters: 4 per token, capped at 2048."""
    sizes, strategies, overlaps = ((400,), ("sentence", "token_window"), (0.15,)) if quick else (
        SIZES, STRATEGIES, OVERLAPS)  # fmt: skip
    configs: list[tuple[str, bool, Callable[[Document], list[Chunk]]]] = []
    for name in strategies:
        for size in sizes:
            for share in overlaps:
                unit_size = min(4 * size, 2048) if name == "fixed_chars" else size
                overlap = round(unit_size * share)
                unit = "c" if name == "fixed_chars" else ""
                configs.append((f"{name} {unit_size}{unit}/{overlap}", False, ours(name, unit_size, overlap)))
    for size in sizes:
        overlap = round(size * 0.15)
        configs.append(
            (f"llama SentenceSplitter {size}/{overlap}", True, llama_sentence_splitter(size, overlap))
        )
    configs.append(("fixed token window 800/400", True, fixed_token_window(800, 400)))
    return configs


# -- scoring -----------------------------------------------------------------------------------------------


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def overlap_len(a: Sequence[Interval], b: Sequence[Interval]) -> int:
    """Characters shared by two merged, sorted interval lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def length(intervals: Sequence[Interval]) -> int:
    return sum(e - s for s, e in intervals)


def score(question: Question, doc_id: str, hits: Sequence[tuple[str, int, int]], starts: dict) -> tuple:
    """(recall, precision, iou, retrieved tokens) of hits = [(document_id, start, end)]."""
    refs = merge(question.references)
    by_doc: dict[str, list[Interval]] = {}
    for d, s, e in hits:
        by_doc.setdefault(d, []).append((s, e))
    merged = {d: merge(v) for d, v in by_doc.items()}
    same = merged.get(doc_id, [])
    hit_chars = overlap_len(refs, same)
    retrieved = sum(length(v) for v in merged.values())
    union = retrieved + length(refs) - hit_chars
    tokens = 0
    for d, spans in merged.items():
        arr = starts[d]
        for s, e in spans:
            tokens += int(np.searchsorted(arr, e) - np.searchsorted(arr, s))
    recall = hit_chars / length(refs) if refs else 0.0
    precision = hit_chars / retrieved if retrieved else 0.0
    return recall, precision, hit_chars / union if union else 0.0, tokens


# -- the run ------------------------------------------------------------------------------------------------


def run(corpora_dir: Path, questions_file: Path, quick: bool, cache_dir: Path | None) -> list[dict]:
    from qdrant_client import QdrantClient

    from sinks.bm25 import BM25Sink
    from sinks.config import SinkSettings
    from sinks.embedder_minilm import MiniLMEmbedder
    from sinks.qdrant import QdrantSink
    from sinks.retrieval import RetrievalSettings, retrieve

    corpora = load_corpora(corpora_dir)
    questions = load_questions(questions_file, corpora)
    if quick:
        questions = questions[::6]
    doc_ids = {name: d.document_id for name, d in corpora.items()}
    starts = {d.document_id: token_starts(d.text)[:-1] for d in corpora.values()}
    embedder = CachedEmbedder(MiniLMEmbedder(), cache_dir)
    client = QdrantClient(":memory:")
    results: list[dict] = []
    seen: dict[tuple, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_retrieval_") as tmp:
        for number, (label, baseline, chunker) in enumerate(configurations(quick)):
            started = time.perf_counter()
            chunked = {name: chunker(doc) for name, doc in corpora.items()}
            n_chunks = sum(len(c) for c in chunked.values())
            mean_tokens = sum(c.token_count for cs in chunked.values() for c in cs) / max(n_chunks, 1)
            signature = tuple((c.start_char, c.end_char) for cs in chunked.values() for c in cs)
            base = {"config": label, "baseline": baseline, "chunks": n_chunks, "chunk_tokens": mean_tokens}
            if signature in seen:  # a strategy that ignores overlap: same chunks, same scores
                results += [r | base | {"same_as": r["config"]} for r in seen[signature]]
                print(
                    f"[{number + 1}] {label}: same chunks as {seen[signature][0]['config']}", file=sys.stderr
                )
                continue
            settings = SinkSettings(data_dir=Path(tmp), qdrant_collection=f"bench_{number}")
            keywords = BM25Sink(settings, path=Path(tmp) / f"bm25_{number}.sqlite")
            vectors = QdrantSink(settings, embedder=embedder, client=client)
            for name, doc in corpora.items():
                keywords.upsert(doc, chunked[name])
                vectors.upsert(doc, chunked[name])
            sinks = {"keywords": keywords, "vectors": vectors}
            sums: dict[tuple[str, int], np.ndarray] = {}
            for q in questions:
                for mode in MODES:
                    found = retrieve(
                        sinks, q.text, max(KS), RetrievalSettings(mode=mode, candidates=CANDIDATES)
                    )
                    spans = [(h.document_id, h.start_char, h.end_char) for h in found.hits]
                    for k in KS:
                        figures = np.asarray(score(q, doc_ids[q.corpus], spans[:k], starts), dtype=float)
                        sums[(mode, k)] = sums.get((mode, k), 0.0) + figures
            rows = []
            for (mode, k), total in sums.items():
                r, p, iou, tok = (total / len(questions)).tolist()
                rows.append(base | {"retriever": mode, "k": k, "recall": r, "precision": p, "iou": iou,
                                    "tokens": tok})  # fmt: skip
            seen[signature] = rows
            results += rows
            keywords.close()
            client.delete_collection(f"bench_{number}")
            print(
                f"[{number + 1}] {label}: {n_chunks} chunks, {time.perf_counter() - started:.0f}s "
                f"(embedded so far: {embedder.embedded})",
                file=sys.stderr,
                flush=True,
            )
    return results


def print_tables(results: list[dict], k_main: int = 5) -> None:
    """A markdown table at k=5 (every config x retriever) and one of recall/tokens at each k for hybrid."""
    by = {(r["config"], r["retriever"], r["k"]): r for r in results}
    configs = list(dict.fromkeys(r["config"] for r in results))
    info = {r["config"]: r for r in results}
    print(f"\n### k = {k_main}: recall / precision / IoU (%), retrieved tokens per question\n")
    head = "| chunking | chunks | mean tokens | " + " | ".join(
        f"{m} R / P / IoU | {m} tokens" for m in MODES) + " |"  # fmt: skip
    print(head)
    print("|" + "---|" * (3 + 2 * len(MODES)))
    for c in configs:
        cells = []
        for m in MODES:
            r = by[(c, m, k_main)]
            cells += [f"{100 * r['recall']:.1f} / {100 * r['precision']:.1f} / {100 * r['iou']:.1f}",
                      f"{r['tokens']:.0f}"]  # fmt: skip
        name = f"**{c}** (baseline)" if info[c]["baseline"] else c
        print(f"| {name} | {info[c]['chunks']} | {info[c]['chunk_tokens']:.0f} | " + " | ".join(cells) + " |")
    print("\n### hybrid recall (%) and retrieved tokens at each k\n")
    print("| chunking | " + " | ".join(f"R@{k} | tok@{k}" for k in KS) + " |")
    print("|" + "---|" * (1 + 2 * len(KS)))
    for c in configs:
        cells = [
            f"{100 * by[(c, 'hybrid', k)]['recall']:.1f} | {by[(c, 'hybrid', k)]['tokens']:.0f}" for k in KS
        ]
        print(f"| {c} | " + " | ".join(cells) + " |")
    print()
    for m in MODES:
        baselines = [(c, by[(c, m, k_main)]) for c in configs if info[c]["baseline"]]
        ours_rows = [(c, by[(c, m, k_main)]) for c in configs if not info[c]["baseline"]]
        for bc, b in baselines:
            fair = [(c, r) for c, r in ours_rows if r["tokens"] <= b["tokens"]]
            if not fair:
                print(f"{m}: no config of ours retrieves <= {b['tokens']:.0f} tokens (vs {bc})")
                continue
            c, r = max(fair, key=lambda cr: cr[1]["recall"])
            verdict = "beats" if r["recall"] > b["recall"] else "does not beat"
            print(
                f"{m} R@{k_main}: best of ours within {bc}'s {b['tokens']:.0f} tokens is {c} "
                f"({100 * r['recall']:.1f}% at {r['tokens']:.0f} tokens), {verdict} {100 * b['recall']:.1f}%"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpora", type=Path, default=EVAL_DIR / "corpora", help="directory of corpus files"
    )
    parser.add_argument("--questions", type=Path, default=EVAL_DIR / "questions.csv", help="questions CSV")
    parser.add_argument("--quick", action="store_true", help="2 strategies, 1 size, every 6th question")
    parser.add_argument("--cache-dir", default=str(Path(".unichunk") / "bench_embeddings"),
                        help="on-disk embedding cache ('' to disable)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    logging.getLogger("sinks.qdrant").setLevel(logging.ERROR)  # 800-token chunks exceed MiniLM's 256
    started = time.perf_counter()
    cache = Path(args.cache_dir) if args.cache_dir else None
    results = run(args.corpora, args.questions, args.quick, cache)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print_tables(results)
    if LOST[0]:
        print(f"note: {LOST[0]} SentenceSplitter chunks could not be located in the text and were dropped")
    print(f"\n{len(results)} rows in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
