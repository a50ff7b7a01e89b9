"""Retrieval quality of each chunking strategy and size, next to two baselines measured in the same run.

    python -m benchmarks.retrieval_quality [--corpora DIR] [--questions FILE] [--quick]
        [--configs sweep,sentence:390/58,markdown:400/60] [--budgets 1000,2000,4000]

Each corpus is ingested as one document through the real sinks (BM25Sink on a temp file, QdrantSink on an
in-memory Qdrant client with the default MiniLM embedder) and every question is answered by
`retrieval.search` (the read path the CLI and the HTTP API use) with BM25, vector and hybrid ranking.
Scores are over **characters** of the retrieved chunks against the reference spans (the eval README's
definition; the chroma "token-level" metrics are computed over character ranges too): recall, precision
and IoU, with the retrieved chunks' spans merged by offsets first (overlapping windows count once,
as `retrieval.context` assembles them). The retrieved-token budget per question is the tiktoken count of
that merged text. Embeddings are cached by sha256 of the text (memory and `--cache-dir`), so configs
sharing chunks embed them once.

The corpora and questions are the evaluation data found by `benchmarks.evaldata` (UNICHUNK_EVAL_DIR, else
../shared/eval); `--corpora` and `--questions` name others. Without either, it stops with a message
saying where it looked: the questions with reference offsets cannot be replaced by a sample.

Recall@k alone favours whoever retrieves more text, so the budget-matched view also takes each config's
hits in rank order while the merged retrieved text stays within a fixed token budget (1000/2000/4000 and
the reference baseline's own tokens@5) and reports the recall bought with it. `--configs` runs only named
configurations (the baselines always run), so candidate sizes are cheap to compare.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from llama_index.core.node_parser import SentenceSplitter
from qdrant_client import QdrantClient

from benchmarks import evaldata, strict_report
from benchmarks.budget_metric import FixedBM25, Interval, Span, merge, overlap, small_to_big, strict_scores
from chunking.config import ChunkStrategy
from chunking.ids import make_chunk_id, sha256_hex
from chunking.models import Chunk, Document
from chunking.packing import token_starts
from chunking.service import ChunkingService
from chunking.tokenizer import TokenCounter, get_encoding
from retrieval import Readers, SearchOptions, search
from sinks.config import SinkSettings
from sinks.keywords.bm25 import BM25Sink
from sinks.vectors.base import Embedder
from sinks.vectors.minilm import MiniLMEmbedder
from sinks.vectors.qdrant import QdrantSink
from sinks.vectors.sink import logger as vector_sink_logger

KS = (1, 3, 5, 10)
MODES = ("keywords", "vectors", "hybrid")
STRATEGIES = ("token_window", "fixed_chars", "sentence", "paragraph", "markdown")
SIZES = (200, 400, 800)
OVERLAPS = (0.0, 0.15)
CANDIDATES = 40  # fixed RRF depth, so the top-k of every k is a prefix of the top-DEPTH
DEPTH = 40  # hits kept per question: enough to fill a 4000-token budget with 200-token chunks
BUDGETS = (1000, 2000, 4000)
REFERENCE = "llama SentenceSplitter 400/60"  # the baseline whose tokens@5 is the matched budget
WINDOW = "fixed token window 800/400"


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


def ours(name: str, size: int | None, overlap: int | None) -> Callable[[Document], list[Chunk]]:
    service, strategy = ChunkingService(), ChunkStrategy(name=name, chunk_size=size, chunk_overlap=overlap)
    return lambda document: service.chunk(document, strategy)


Config = tuple[str, bool, Callable[[Document], list[Chunk]]]


def ours_config(name: str, size: int, overlap: int) -> Config:
    """One of our strategies at `size`/`overlap` (fixed_chars: characters, labelled with a "c"; `auto`:
    Markdown's strategy at these sizes, fitted to MiniLM's 256 word pieces)."""
    unit = "c" if name == "fixed_chars" else ""
    return f"{name} {size}{unit}/{overlap}", False, ours(name, size, overlap)


def auto_config() -> Config:
    """`auto` as shipped, for Markdown (the eval corpora): its default sizes under MiniLM's budget."""
    name, size, overlap = ChunkStrategy().effective()["markdown"]  # type: ignore[misc]
    return f"auto ({name} {size}/{overlap}, fitted)", False, ours("auto", None, None)


def sweep(quick: bool) -> list[Config]:
    """Every strategy x size x overlap. fixed_chars sizes are characters: 4 per token, capped at 2048."""
    sizes, strategies, overlaps = ((400,), ("sentence", "token_window"), (0.15,)) if quick else (
        SIZES, STRATEGIES, OVERLAPS)  # fmt: skip
    configs = []
    for name in strategies:
        for size in sizes:
            for share in overlaps:
                unit_size = min(4 * size, 2048) if name == "fixed_chars" else size
                configs.append(ours_config(name, unit_size, round(unit_size * share)))
    return configs


def parse_configs(spec: str) -> list[Config]:
    """`sweep`, `quick`, `auto` or `strategy:size/overlap` items, comma-separated (e.g. `sentence:390/58`;
    `auto:220/33` is auto with those sizes, still fitted to the embedder)."""
    configs: list[Config] = []
    for item in (part.strip() for part in spec.split(",")):
        if item in {"sweep", "quick"}:
            configs += sweep(item == "quick")
            continue
        if item == "auto":
            configs.append(auto_config())
            continue
        match = re.fullmatch(r"(\w+):(\d+)/(\d+)", item)
        if match is None or match[1] not in (*STRATEGIES, "auto"):
            raise SystemExit(
                f"bad --configs item {item!r}: want sweep, quick, auto or one of {STRATEGIES}:SIZE/OVERLAP"
            )
        configs.append(ours_config(match[1], int(match[2]), int(match[3])))
    return list({label: (label, b, c) for label, b, c in configs}.values())


def configurations(quick: bool, spec: str | None = None) -> list[Config]:
    """(label, is_baseline, chunker): ours (the sweep, or `spec`), then the baselines, always."""
    configs = parse_configs(spec) if spec else sweep(quick)
    for size in (400,) if quick else SIZES:
        overlap = round(size * 0.15)
        configs.append(
            (f"llama SentenceSplitter {size}/{overlap}", True, llama_sentence_splitter(size, overlap))
        )
    configs.append((WINDOW, True, fixed_token_window(800, 400)))
    configs += strict_report.issue_baselines(quick, _chunks_from_spans, llama_sentence_splitter)
    return configs


# -- scoring -----------------------------------------------------------------------------------------------


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
    hit_chars = overlap(refs, same)
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


def curve(question: Question, doc_id: str, hits: Sequence[tuple[str, int, int]], starts: dict) -> np.ndarray:
    """(DEPTH + 1, 4) array: row n = score() of the top-n hits (row 0 = nothing retrieved)."""
    out = np.zeros((DEPTH + 1, 4))
    for n in range(1, DEPTH + 1):
        out[n] = out[n - 1] if n > len(hits) else score(question, doc_id, hits[:n], starts)
    return out


@dataclass
class Results:
    """Mean figures per (config, retriever, k) in `rows`; per-question curves for budgets and pairing."""

    rows: list[dict]
    curves: dict[tuple[str, str], np.ndarray]  # (config, retriever) -> (questions, DEPTH + 1, 4)
    # (config, retriever) -> (questions, len(STRICT_GRID), 3): the strict character-budget scores
    strict: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    chars_per_token: float = 4.0  # of the corpora (cl100k), for the budgets' token equivalents


def strict_rows(question: Question, doc_id: str, ranked: Sequence[Span]) -> np.ndarray:
    """(len(STRICT_GRID), 3): strict (recall, precision, IoU) of `ranked` at each character budget."""
    return np.array([strict_scores(question.references, doc_id, ranked, b) for b in strict_report.GRID])


def neighbour_map(chunked: dict[str, list[Chunk]]) -> dict[Span, tuple[Span | None, Span | None]]:
    """Each chunk span -> (previous, next) chunk span of the same document, for small-to-big."""
    out: dict[Span, tuple[Span | None, Span | None]] = {}
    for chunks in chunked.values():
        spans = [
            (c.document_id, c.start_char, c.end_char) for c in sorted(chunks, key=lambda c: c.chunk_index)
        ]
        for i, span in enumerate(spans):
            out[span] = (spans[i - 1] if i else None, spans[i + 1] if i + 1 < len(spans) else None)
    return out


def run(
    corpora_dir: Path, questions_file: Path, quick: bool, cache_dir: Path | None, spec: str | None = None
) -> Results:
    corpora = load_corpora(corpora_dir)
    questions = load_questions(questions_file, corpora)
    if quick:
        questions = questions[::6]
    doc_ids = {name: d.document_id for name, d in corpora.items()}
    starts = {d.document_id: token_starts(d.text)[:-1] for d in corpora.values()}
    embedder = CachedEmbedder(MiniLMEmbedder(), cache_dir)
    client = QdrantClient(":memory:")
    results = Results([], {})
    results.chars_per_token = sum(len(d.text) for d in corpora.values()) / sum(
        len(s) for s in starts.values()
    )
    seen: dict[tuple, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench_retrieval_") as tmp:
        for number, (label, baseline, chunker) in enumerate(configurations(quick, spec)):
            started = time.perf_counter()
            chunked = {name: chunker(doc) for name, doc in corpora.items()}
            n_chunks = sum(len(c) for c in chunked.values())
            mean_tokens = sum(c.token_count for cs in chunked.values() for c in cs) / max(n_chunks, 1)
            signature = tuple((c.start_char, c.end_char) for cs in chunked.values() for c in cs)
            base = {"config": label, "baseline": baseline, "chunks": n_chunks, "chunk_tokens": mean_tokens}
            if signature in seen:  # a strategy that ignores overlap: same chunks, same scores
                twin = seen[signature]
                results.rows += [r | base | {"same_as": twin} for r in results.rows if r["config"] == twin]
                for mode in MODES:
                    results.curves[(label, mode)] = results.curves[(twin, mode)]
                for (cfg, retriever), arr in list(results.strict.items()):
                    if cfg == twin:
                        results.strict[(label, retriever)] = arr
                print(f"[{number + 1}] {label}: same chunks as {twin}", file=sys.stderr)
                continue
            settings = SinkSettings(data_dir=Path(tmp), qdrant_collection=f"bench_{number}")
            keywords = BM25Sink(settings, path=Path(tmp) / f"bm25_{number}.sqlite")
            vectors = QdrantSink(settings, embedder=embedder, client=client)
            for name, doc in corpora.items():
                keywords.upsert(doc, chunked[name])
                vectors.upsert(doc, chunked[name])
            readers = Readers.of({"keywords": keywords, "vectors": vectors})
            all_chunks = [c for cs in chunked.values() for c in cs]
            fixed = FixedBM25([(c.document_id, c.start_char, c.end_char) for c in all_chunks],
                              [c.content for c in all_chunks])  # fmt: skip
            near = neighbour_map(chunked)
            ranked = [fixed.ranked(q.text, DEPTH) for q in questions]
            results.strict[(label, "fixed-bm25")] = np.stack(
                [strict_rows(q, doc_ids[q.corpus], r) for q, r in zip(questions, ranked, strict=True)]
            )
            results.strict[(label, "fixed-bm25+s2b")] = np.stack(
                [strict_rows(q, doc_ids[q.corpus], small_to_big(r, near))
                 for q, r in zip(questions, ranked, strict=True)])  # fmt: skip
            for mode in MODES:
                # ranking only: the context and the graph are not scored, so not assembled
                options = SearchOptions(mode=mode, candidates=CANDIDATES, context=False, graph=False)
                per_question, strict = [], []
                for q in questions:
                    result = search(readers, q.text, DEPTH, options)
                    spans = [(h.document_id, h.start_char, h.end_char) for h in result.hits]
                    per_question.append(curve(q, doc_ids[q.corpus], spans, starts))
                    strict.append(strict_rows(q, doc_ids[q.corpus], spans))
                results.strict[(label, mode)] = np.stack(strict)
                curves = results.curves[(label, mode)] = np.stack(per_question)
                for k in KS:
                    r, p, iou, tok = curves[:, k].mean(axis=0).tolist()
                    results.rows.append(base | {"retriever": mode, "k": k, "recall": r, "precision": p,
                                                "iou": iou, "tokens": tok})  # fmt: skip
            seen[signature] = label
            keywords.close()
            client.delete_collection(f"bench_{number}")
            print(
                f"[{number + 1}] {label}: {n_chunks} chunks, {time.perf_counter() - started:.0f}s "
                f"(embedded so far: {embedder.embedded})",
                file=sys.stderr,
                flush=True,
            )
    return results


def within_budget(curves: np.ndarray, budget: float) -> tuple[float, float]:
    """Mean (recall, tokens) when each question takes its ranked hits while they fit in `budget` tokens.

    Hits are added in rank order and the first one that would push the merged text over the budget stops
    the list, so no question ever reads more than `budget` tokens.
    """
    chosen = budget_pick(curves, budget)
    return float(chosen[:, 0].mean()), float(chosen[:, 3].mean())


def budget_pick(curves: np.ndarray, budget: float) -> np.ndarray:
    """Per question, the score row of the longest ranked prefix whose merged text fits in `budget`."""
    tokens = curves[:, :, 3]
    fits = tokens <= budget  # row 0 (nothing) always fits; tokens only grow with n
    last = np.where(fits, np.arange(tokens.shape[1]), 0).max(axis=1)
    return curves[np.arange(len(curves)), last]


def paired(
    ours_curves: np.ndarray, base_curves: np.ndarray, k: int | None = None, budget: float | None = None
) -> tuple[float, int, int]:
    """(recall difference summed over questions, questions ours covers better, questions it covers worse),
    at top-k or, with `budget`, at that token budget."""
    if budget is not None:
        diff = budget_pick(ours_curves, budget)[:, 0] - budget_pick(base_curves, budget)[:, 0]
    else:
        diff = ours_curves[:, k, 0] - base_curves[:, k, 0]
    return float(diff.sum()), int((diff > 1e-9).sum()), int((diff < -1e-9).sum())


def print_tables(results: Results, budgets: Sequence[int] = BUDGETS, k_main: int = 5) -> None:
    """The k=5 table (every config x retriever), hybrid recall/tokens at each k, the budget-matched view,
    and each of ours against the baselines, paired by question."""
    rows = results.rows
    by = {(r["config"], r["retriever"], r["k"]): r for r in rows}
    configs = list(dict.fromkeys(r["config"] for r in rows))
    info = {r["config"]: r for r in rows}
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
    print_budget_table(results, configs, info, budgets, k_main)
    print_paired(results, configs, info, k_main)
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


def print_budget_table(
    results: Results, configs: list[str], info: dict, budgets: Sequence[int], k_main: int
) -> None:
    """Recall (%) when every question reads at most B tokens of ranked hits; B includes the reference
    baseline's own tokens@k (per retriever), so that column is its recall@k against everyone at its budget."""
    matched = {
        m: next(
            (
                r["tokens"]
                for r in results.rows
                if (r["config"], r["retriever"], r["k"]) == (REFERENCE, m, k_main)
            ),
            None,
        )
        for m in MODES
    }
    print("\n### budget-matched recall (%): ranked hits taken while the merged text fits in B tokens\n")
    cols = [("hybrid", float(b)) for b in budgets]
    cols += [(m, matched[m]) for m in ("hybrid", "keywords", "vectors") if matched[m] is not None]
    print(
        "| chunking | "
        + " | ".join(f"{m} B={b:.0f}" + (" (ref)" if b == matched[m] else "") for m, b in cols)
        + " |"
    )
    print("|" + "---|" * (1 + len(cols)))
    for c in configs:
        cells = [f"{100 * within_budget(results.curves[(c, m)], b)[0]:.1f}" for m, b in cols]
        name = f"**{c}** (baseline)" if info[c]["baseline"] else c
        print(f"| {name} | " + " | ".join(cells) + " |")
    if matched["hybrid"] is not None:
        print(f"\n(ref) = {REFERENCE}'s own tokens@{k_main} for that retriever: the budget it spent.")


def print_paired(results: Results, configs: list[str], info: dict, k_main: int) -> None:
    """Each of ours against each baseline at R@k, question by question: the recall difference expressed in
    questions (sum of per-question differences) and how many questions it covers better / worse."""
    baselines = [c for c in configs if info[c]["baseline"] and c in (REFERENCE, WINDOW)]
    n = len(next(iter(results.curves.values())))
    print(
        f"\n### paired by question, R@k vs baselines: recall difference in questions (of {n}), better / worse\n"
    )
    ref_budget = next(r["tokens"] for r in results.rows if (r["config"], r["retriever"], r["k"]) == (
        REFERENCE, "hybrid", k_main))  # fmt: skip
    cols = [(m, k, b) for b in baselines for m, k in (("hybrid", 3), ("hybrid", k_main), ("hybrid", 10),
            ("keywords", k_main), ("vectors", k_main), ("hybrid", None))]  # fmt: skip
    short = {REFERENCE: "SS", WINDOW: "win"}
    print(
        "| chunking | "
        + " | ".join(
            f"{short[b]} {m[0]}@{k}" if k else f"{short[b]} h B={ref_budget:.0f}" for m, k, b in cols
        )
        + " |"
    )
    print("|" + "---|" * (1 + len(cols)))
    for c in configs:
        if info[c]["baseline"]:
            continue
        cells = []
        for m, k, b in cols:
            budget = None if k else ref_budget
            diff, better, worse = paired(results.curves[(c, m)], results.curves[(b, m)], k, budget)
            cells.append(f"{diff:+.1f} ({better}/{worse})")
        print(f"| {c} | " + " | ".join(cells) + " |")
    print(
        f"\nSS = {REFERENCE}, win = {WINDOW}; h/k/v = hybrid/keywords/vectors; B = SS's hybrid tokens@{k_main}"
    )
    print("as a per-question budget. A cell is the sum over questions of (our recall - its recall), then")
    print("(questions we cover better / worse).")


@contextmanager
def _truncation_warnings_off() -> Iterator[None]:
    """The vector sink's truncation warnings off for the run (800-token chunks exceed MiniLM's 256, by
    design), and back as they were after: `main` also runs inside other processes (the test suite), where
    a logger left at ERROR silenced the CLI's truncation summary in a later test."""
    level = vector_sink_logger.level
    vector_sink_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        vector_sink_logger.setLevel(level)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpora", type=Path, help="directory of corpus files (default: corpora/ of the eval data)"
    )
    parser.add_argument(
        "--questions", type=Path, help="questions CSV (default: questions.csv of the eval data)"
    )
    parser.add_argument("--quick", action="store_true", help="2 strategies, 1 size, every 6th question")
    parser.add_argument(
        "--configs",
        default=None,
        help="only these of ours, comma-separated: sweep, quick, auto or STRATEGY:SIZE/OVERLAP "
        "(e.g. sentence:390/58,markdown:400/60,auto:220/33); the baselines always run",
    )
    parser.add_argument(
        "--budgets", default=",".join(map(str, BUDGETS)), help="token budgets of the budget-matched view"
    )
    parser.add_argument("--cache-dir", default=str(Path(".unichunk") / "bench_embeddings"),
                        help="on-disk embedding cache ('' to disable)")  # fmt: skip
    parser.add_argument("--plots-dir", type=Path, default=Path("benchmarks") / "results",
                        help="where the recall-vs-budget PNGs are written ('' to skip)")  # fmt: skip
    parser.add_argument(
        "--strict-only", action="store_true", help="print only the strict character-budget tables"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    if args.configs:
        parse_configs(args.configs)  # fail on a typo before loading anything
    started = time.perf_counter()
    cache = Path(args.cache_dir) if args.cache_dir else None
    corpora = args.corpora or evaldata.corpora_dir("retrieval_quality")
    questions = args.questions or evaldata.questions_file("retrieval_quality")
    with _truncation_warnings_off():
        results = run(corpora, questions, args.quick, cache, args.configs)
    if args.json:  # one row per (config, retriever, k); the budget view rides along per (config, retriever)
        for row in results.rows:
            curves = results.curves[(row["config"], row["retriever"])]
            spent = {str(b): within_budget(curves, b) for b in budgets}
            row["budget_recall"] = {b: r for b, (r, _) in spent.items()}
            row["budget_tokens"] = {b: t for b, (_, t) in spent.items()}
        args.json.write_text(json.dumps(results.rows, indent=1))
    if not args.strict_only:
        print_tables(results, budgets)
    configs = list(dict.fromkeys(r["config"] for r in results.rows))
    baseline = {r["config"]: r["baseline"] for r in results.rows}
    strict_report.print_strict(results.strict, configs, baseline, results.chars_per_token)
    if str(args.plots_dir):
        for path in strict_report.write_plots(results.strict, configs, baseline, args.plots_dir):
            print(f"plot: {path}")
    if LOST[0]:
        print(f"note: {LOST[0]} SentenceSplitter chunks could not be located in the text and were dropped")
    print(f"\n{len(results.rows)} rows in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
