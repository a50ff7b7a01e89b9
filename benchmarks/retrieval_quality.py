"""Retrieval quality of our chunking strategies against named baselines, in one run: the strict metric.

    python -m benchmarks.retrieval_quality [--corpora DIR] [--questions FILE] [--quick] [--half all|tune|report]
        [--configs default,sweep,auto,semantic,sentence:390/58,...] [--plots-dir DIR] [--json FILE]
        [--model-input segments|chunks]

Each corpus is ingested as one document through the real sinks (BM25Sink on a temp file, QdrantSink on an
in-memory Qdrant client with the default MiniLM embedder). Our chunkings'
vectors are made as the shipped pipeline makes them (`model_input=segments`: each piece between chunk
boundaries embedded once, a chunk's vector the normalised sum of its pieces' token states; `--model-input
chunks` embeds them whole); a baseline's chunks are always embedded whole, as its framework would. Every
question is then ranked by:

- **fixed-bm25**, the headline: one fixed BM25 (`budget_metric.FixedBM25`) over each configuration's chunk
  spans, so its figures differ only by where the boundaries are;
- **keywords**, **vectors**, **hybrid**: `unichunk.retrieval.ranking.retrieve`, the ranking step of
  `unichunk.retrieval.search` (the read path of the CLI and the HTTP API) over our BM25 sink, Qdrant, or both fused;
- **context ±1** and **context ±0**: the hybrid hits assembled by `unichunk.retrieval.context.assemble_context`, the
  read path's own small-to-big step (each hit with its neighbour chunks, merged by offsets, headed by its
  source, cut at sentence ends to a token budget), and the same without neighbours. Budgets are in
  tokens there, headers included: what a prompt of that size would hold.

The ranked chunks fill a budget of characters (and of cl100k tokens, the same budgets divided by the
corpora's characters per token), and the filled text is scored against the exact reference spans
(`benchmarks.budget_metric`: recall, precision and IoU over characters). `benchmarks.strict_report`
prints the tables per retriever, budget and corpus, the default paired question by question against every
other row (bootstrap CI and sign test), a leave-one-corpus-out check, and writes recall-vs-budget PNGs.
The lenient top-k table (recall of whatever the top k chunks touch, and the tokens they cost) is printed
first for comparison with earlier runs.

The corpora and questions are the evaluation data found by `benchmarks.evaldata` (UNICHUNK_EVAL_DIR, else
../shared/eval); `--corpora` and `--questions` name others. Without either, it stops with a message
saying where it looked. Embeddings (chunks, sentence windows of `semantic`, chonkie's semantic baseline)
and segments' token sums are cached by sha256 of the text in memory and under `--cache-dir`, so a warm
run embeds nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from qdrant_client import QdrantClient

from benchmarks import evaldata, strict_report
from benchmarks.baselines import LOST, Chunker, Config, Embed, baselines
from benchmarks.budget_metric import (
    GRID,
    FixedBM25,
    Interval,
    Span,
    TokenMeter,
    interval_scores,
    merge,
    strict_grid,
)
from benchmarks.strict_report import Results
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.packing import token_starts
from unichunk.chunking.service import ChunkingService
from unichunk.retrieval import Readers
from unichunk.retrieval.context import assemble_context
from unichunk.retrieval.evaluation.questions import QuestionsError, split_halves
from unichunk.retrieval.evaluation.questions import load_questions as read_questions
from unichunk.retrieval.fusion import Hit
from unichunk.retrieval.ranking import RetrievalSettings, retrieve
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.vectors.base import Embedder
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink
from unichunk.sinks.vectors.sink import logger as vector_sink_logger

KS = (1, 3, 5, 10)
MODES = ("keywords", "vectors", "hybrid")
RANKERS = ("fixed-bm25", *MODES)
CONTEXTS = {
    "context ±1": 1,
    "context ±0": 0,
}  # hybrid hits through unichunk.retrieval.context, by neighbour radius
STRATEGIES = ("token_window", "fixed_chars", "sentence", "paragraph", "markdown", "semantic")
# `--configs sweep`: every strategy at these sizes (tokens) and overlaps (shares of the size); with
# `--headline-only` about 150 configurations in half a minute, and its verdict's last line the ceiling.
SIZES = (128, 160, 200, 256, 320, 400, 512)
OVERLAPS = (0.0, 0.15, 0.5, 0.75)
CANDIDATES = 40  # per retriever before fusion, so the top-k of every k is a prefix of the top-DEPTH
DEPTH = 40  # hits kept per question: more than the largest budget holds, even of small chunks
HALVES = ("tune", "report")  # `--half`: split_halves' order


class CachedEmbedder(Embedder):
    """Wraps an embedder with a sha256(text) cache in memory and, optionally, SQLite on disk: of its vectors
    (`embed`) and, apart from them, of its token-state sums (`embed_sums`, where the inner embedder
    `composes`), so a sink given it composes chunk vectors from segments exactly as the shipped sink does
    with the inner embedder."""

    def __init__(self, inner: Embedder, cache_dir: Path | None = None) -> None:
        self.inner, self.name, self.max_tokens = inner, inner.name, inner.max_tokens
        self.composes = inner.composes  # the vector sink composes from segments only where this holds
        self.memory: dict[str, list[float]] = {}
        self.sums_memory: dict[str, list[float]] = {}
        self.embedded = 0  # distinct texts the inner embedder was asked for, vectors and sums alike
        self.db = None
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            # keyed by the vectors' fingerprint where the embedder has one (int8 MiniLM is not torch's)
            key = re.sub(r"[^\w.@+-]", "_", getattr(inner, "fingerprint", inner.name))
            self.db = sqlite3.connect(cache_dir / f"{key}.sqlite")
            self.db.execute("CREATE TABLE IF NOT EXISTS v (sha TEXT PRIMARY KEY, vec BLOB NOT NULL)")
            # token sums: another table, as a text's sum is not its vector
            self.db.execute("CREATE TABLE IF NOT EXISTS s (sha TEXT PRIMARY KEY, vec BLOB NOT NULL)")

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._cached(texts, "v", self.memory, self.inner.embed)

    def embed_sums(self, texts: list[str]) -> list[list[float]]:
        return self._cached(texts, "s", self.sums_memory, self.inner.embed_sums)

    def _cached(
        self,
        texts: list[str],
        table: str,
        memory: dict[str, list[float]],
        compute: Callable[[list[str]], list[list[float]]],
    ) -> list[list[float]]:
        """`compute` of each text, from `memory`, then the disk `table`, then `compute` for the rest (each
        distinct text once), which both then keep."""
        keys = [sha256_hex(t) for t in texts]
        missing = [k for k in dict.fromkeys(keys) if k not in memory]
        if missing and self.db is not None:
            marks = ",".join("?" * len(missing))
            for sha, blob in self.db.execute(f"SELECT sha, vec FROM {table} WHERE sha IN ({marks})", missing):
                memory[sha] = np.frombuffer(blob, dtype=np.float32).tolist()
            missing = [k for k in missing if k not in memory]
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            vectors = compute([text_of[k] for k in missing])
            self.embedded += len(missing)
            for sha, vec in zip(missing, vectors, strict=True):
                memory[sha] = vec
            if self.db is not None:
                rows = [
                    (s, np.asarray(v, dtype=np.float32).tobytes())
                    for s, v in zip(missing, vectors, strict=True)
                ]
                self.db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?)", rows)
                self.db.commit()
        return [memory[k] for k in keys]


def model_input(baseline: bool, ours_: str | None = None) -> str:
    """What the vector sink's model reads for a configuration (`SinkSettings.model_input`): a baseline's
    chunks whole, as its framework would embed them; ours as `ours_` says, by default as shipped
    (`segments`: each piece between chunk boundaries once, a chunk's vector composed from its pieces')."""
    if baseline:
        return "chunks"
    return ours_ or SinkSettings.model_fields["model_input"].default


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


def load_questions(path: Path, corpora: dict[str, Document], half: str = "all") -> list[Question]:
    """Questions whose references are checked against the corpus text (a mismatch is a data error); the
    CSV is read by the shipped evaluation's parser (`unichunk.retrieval.evaluation.questions`). `half`:
    all of them, or the `tune` or `report` half of `split_halves` (issue 27: settings are chosen on the
    tune half, figures reported on the other)."""
    out = []
    try:
        parsed = read_questions(path)
    except QuestionsError as exc:
        raise SystemExit(str(exc)) from exc
    if half != "all":
        parsed = split_halves(parsed)[HALVES.index(half)]
    for question in parsed:
        refs = []
        corpus = question.references[0].document if question.references else ""
        for ref in question.references:
            doc = corpora.get(ref.document)
            if doc is None:
                raise SystemExit(f"question refers to unknown corpus {ref.document!r}")
            start, end = ref.start, ref.end
            if start is None or end is None or doc.text[start:end] != ref.content:
                raise SystemExit(f"reference [{start}:{end}] does not match corpus {ref.document}")
            refs.append((start, end))
        if not refs:
            raise SystemExit(f"question {question.text!r} has no references")
        out.append(Question(question.text, corpus, tuple(refs)))
    return out


# -- our configurations ------------------------------------------------------------------------------------


def ours(strategy: ChunkStrategy, embed: Embed) -> Chunker:
    """Our chunking service with `strategy`; `embed` is what `semantic` measures sentences with (the same
    cached MiniLM the vector sink uses, as the pipeline passes the configured embedder)."""
    service = ChunkingService()
    return lambda document: service.chunk(document, strategy, embed)


def auto_label() -> str:
    name, size, overlap = ChunkStrategy().effective()["markdown"]  # type: ignore[misc]
    return f"auto ({name} {size}/{overlap}, fitted)"


# `strategy[:size/overlap][:field=value...]`, e.g. `sentence:390/58`, `semantic:220/0:semantic_window=0`
_ITEM = re.compile(r"(\w+)(?::(\d+)/(\d+))?((?::\w+=[\w.]+)*)")


def parse_item(item: str, embed: Embed) -> Config:
    """One of ours from its `--configs` item (its own defaults where no size is named; `auto:S/O` is auto
    with those sizes, still fitted to the embedder)."""
    match = _ITEM.fullmatch(item)
    if match is None or match[1] not in (*STRATEGIES, "auto"):
        raise SystemExit(
            f"bad --configs item {item!r}: want default, sweep, quick, or STRATEGY[:SIZE/OVERLAP][:FIELD=VALUE...] "
            f"with STRATEGY one of auto, {', '.join(STRATEGIES)}"
        )
    name, extra = match[1], dict(part.split("=", 1) for part in match[4].split(":")[1:])
    sizes = {} if match[2] is None else {"chunk_size": int(match[2]), "chunk_overlap": int(match[3])}
    try:
        strategy = ChunkStrategy(name=name, **sizes, **extra)
    except ValueError as exc:
        raise SystemExit(f"bad --configs item {item!r}: {exc}") from exc
    if name == "auto" and not sizes and not extra:
        label = auto_label()
    else:
        unit = "c" if name == "fixed_chars" else ""
        size, overlap = strategy.for_kind("markdown").sizes_for(strategy.for_kind("markdown").name)
        label = f"{name} {size}{unit}/{overlap}" + "".join(f" {k}={v}" for k, v in extra.items())
    return label, False, ours(strategy, embed)


def default_items() -> list[str]:
    """`auto` as shipped, and every strategy of ours at `auto`'s fitted size for these (Markdown) corpora,
    so boundaries are compared at equal size: fixed_chars at 4 characters a token, semantic at its own
    fitted cap without overlap."""
    _, size, overlap = ChunkStrategy().effective()["markdown"]  # type: ignore[misc]
    same = [f"{name}:{size}/{overlap}" for name in ("sentence", "paragraph", "markdown", "token_window")]
    return ["auto", *same, f"fixed_chars:{4 * size}/{4 * overlap}", "semantic"]


def sweep_items(quick: bool) -> list[str]:
    """Every strategy x size x overlap (fixed_chars in characters: 4 per token, capped at 2048; overlaps
    capped at the setting's own limit)."""
    if quick:
        return ["sentence:400/60", "token_window:400/60"]
    most = next(m.le for m in ChunkStrategy.model_fields["chunk_overlap"].metadata if hasattr(m, "le"))
    items = []
    for name in STRATEGIES:
        for size in SIZES:
            for share in OVERLAPS:
                unit_size = min(4 * size, 2048) if name == "fixed_chars" else size
                overlap = 0 if name == "semantic" else min(round(unit_size * share), most)
                items.append(f"{name}:{unit_size}/{overlap}")
    return list(dict.fromkeys(items))


def parse_configs(spec: str, embed: Embed, quick: bool = False) -> list[Config]:
    """`default`, `sweep`, `quick` or single items, comma-separated; duplicates dropped."""
    items: list[str] = []
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        if item == "default":
            items += default_items()
        elif item in {"sweep", "quick"}:
            items += sweep_items(item == "quick" or quick)
        else:
            items.append(item)
    configs = [parse_item(item, embed) for item in dict.fromkeys(items)]
    return list({label: (label, b, c) for label, b, c in configs}.values())


def configurations(quick: bool, spec: str | None, embed: Embed, with_baselines: bool = True) -> list[Config]:
    """(label, is_baseline, chunker): ours (`spec`, by default `default`; `--quick`: auto and semantic),
    then the baselines (always from the command line; `benchmarks.embedder_speed` compares embedders
    on ours alone)."""
    configs = parse_configs(spec or ("auto,semantic" if quick else "default"), embed, quick)
    return configs + (baselines(quick, embed) if with_baselines else [])


# -- scoring -----------------------------------------------------------------------------------------------


def by_document(spans: Sequence[Span]) -> dict[str, list[Interval]]:
    """Retrieved spans merged per document (overlapping windows count once)."""
    grouped: dict[str, list[Interval]] = {}
    for doc, s, e in spans:
        grouped.setdefault(doc, []).append((s, e))
    return {doc: merge(v) for doc, v in grouped.items()}


def score(question: Question, doc_id: str, hits: Sequence[Span], meter: TokenMeter) -> tuple:
    """The lenient view: (recall, precision, IoU, tokens) of everything `hits` touch, no budget."""
    taken = by_document(hits)
    tokens = sum(meter.cost(d, s, e) for d, spans in taken.items() for s, e in spans)
    return (*interval_scores(question.references, doc_id, taken), tokens)


def context_scores(question: Question, doc_id: str, hits: list[Hit], store: BM25Sink, budgets: Sequence[int],
                   radius: int) -> np.ndarray:  # fmt: skip
    """(len(budgets), 3): the assembled context's document characters scored, one assembly per budget."""
    out = np.zeros((len(budgets), 3))
    for i, budget in enumerate(budgets):
        context = assemble_context(hits, store, radius=radius, budget=budget)
        spans = [(s.document_id, a, b) for s in context.spans for _, a, b in s.segments]
        out[i] = interval_scores(question.references, doc_id, by_document(spans))
    return out


# -- the run ------------------------------------------------------------------------------------------------


@dataclass
class Setting:
    """What every configuration is scored against, built once per run."""

    questions: list[Question]
    doc_ids: dict[str, str]  # corpus name -> document ID
    meter: TokenMeter
    tokens: tuple[int, ...]  # the token budgets (GRID in tokens)
    embedder: CachedEmbedder
    client: QdrantClient
    tmp: Path
    headline_only: bool = False
    ours_input: str | None = None  # `model_input` of our configurations (None: as shipped)


def score_config(setting: Setting, number: int, label: str, baseline: bool, chunked: dict[str, list[Chunk]],
                 corpora: dict[str, Document]) -> tuple[dict[tuple[str, str], np.ndarray], list[dict]]:  # fmt: skip
    """Per-question strict scores of one configuration's chunks by every retriever, and its lenient top-k
    means. With `headline_only`, the fixed BM25 alone: no store is written and nothing embedded."""
    all_chunks = [c for cs in chunked.values() for c in cs]
    fixed = FixedBM25([(c.document_id, c.start_char, c.end_char) for c in all_chunks],
                      [c.content for c in all_chunks])  # fmt: skip
    keywords = searchers = None
    if not setting.headline_only:
        settings = SinkSettings(
            data_dir=setting.tmp,
            qdrant_collection=f"bench_{number}",
            model_input=model_input(baseline, setting.ours_input),
        )
        keywords = BM25Sink(settings, path=setting.tmp / f"bm25_{number}.sqlite")
        vectors = QdrantSink(settings, embedder=setting.embedder, client=setting.client)
        for name, doc in corpora.items():
            keywords.upsert(doc, chunked[name])
            vectors.upsert(doc, chunked[name])
        searchers = Readers.of({"keywords": keywords, "vectors": vectors}).searchers()
    per: dict[tuple[str, str], list[np.ndarray]] = {}
    lenient: dict[str, list[list[tuple]]] = {m: [] for m in MODES}
    for q in setting.questions:
        doc_id = setting.doc_ids[q.corpus]
        ranked = {"fixed-bm25": fixed.ranked(q.text, DEPTH)}
        hybrid_hits: list[Hit] = []
        for mode in MODES if searchers is not None else ():
            hits = retrieve(
                searchers, q.text, DEPTH, RetrievalSettings(mode=mode, candidates=CANDIDATES)
            ).hits
            ranked[mode] = [(h.document_id, h.start_char, h.end_char) for h in hits]
            lenient[mode].append([score(q, doc_id, ranked[mode][:k], setting.meter) for k in KS])
            hybrid_hits = hits  # hybrid comes last
        for retriever, spans in ranked.items():
            per.setdefault((retriever, "chars"), []).append(strict_grid(q.references, doc_id, spans, GRID))
            per.setdefault((retriever, "tokens"), []).append(
                strict_grid(q.references, doc_id, spans, setting.tokens, setting.meter))  # fmt: skip
        for context, radius in CONTEXTS.items() if keywords is not None else ():
            per.setdefault((context, "tokens"), []).append(
                context_scores(q, doc_id, hybrid_hits, keywords, setting.tokens, radius))  # fmt: skip
    rows = []
    for mode, values in lenient.items():
        if values:
            means = np.asarray(values, dtype=float).mean(axis=0)
            for k, (r, p, iou, tok) in zip(KS, means.tolist(), strict=True):
                rows.append({"config": label, "baseline": baseline, "retriever": mode, "k": k,
                             "recall": r, "precision": p, "iou": iou, "tokens": tok})  # fmt: skip
    if keywords is not None:
        keywords.close()
        setting.client.delete_collection(f"bench_{number}")
    return {key: np.stack(arrays) for key, arrays in per.items()}, rows


def run(
    corpora_dir: Path,
    questions_file: Path,
    quick: bool,
    cache_dir: Path | None,
    spec: str | None = None,
    headline_only: bool = False,
    embedder: Embedder | None = None,
    with_baselines: bool = True,
    half: str = "all",
    ours_input: str | None = None,
) -> Results:
    """Every configuration scored; `embedder` (default: MiniLM as configured by default) embeds chunks
    and questions; `half`: all questions, or the `tune` or `report` half; `ours_input`: what the model
    reads of our chunkings (`model_input`: None as shipped), the baselines' chunks always whole."""
    corpora = load_corpora(corpora_dir)
    questions = load_questions(questions_file, corpora, half)
    if quick:
        questions = questions[::6]
    starts = {d.document_id: token_starts(d.text) for d in corpora.values()}
    results = Results([], corpus=[q.corpus for q in questions])
    results.chars_per_token = sum(len(d.text) for d in corpora.values()) / sum(
        len(s) - 1 for s in starts.values()
    )
    embedder = CachedEmbedder(embedder or MiniLMEmbedder(), cache_dir)
    seen: dict[tuple, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench_retrieval_") as tmp:
        setting = Setting(questions, {name: d.document_id for name, d in corpora.items()}, TokenMeter(starts),
                          results.token_grid, embedder, QdrantClient(":memory:"), Path(tmp), headline_only,
                          ours_input)  # fmt: skip
        for number, (label, baseline, chunker) in enumerate(
            configurations(quick, spec, embedder.embed, with_baselines)
        ):
            started = time.perf_counter()
            chunked = {name: chunker(doc) for name, doc in corpora.items()}
            chunking_seconds = time.perf_counter() - started
            all_chunks = [c for cs in chunked.values() for c in cs]
            results.configs.append(label)
            results.baseline[label] = baseline
            results.info[label] = {"chunks": len(all_chunks), "chunking_seconds": chunking_seconds,
                                   "chunk_tokens": float(np.mean([c.token_count for c in all_chunks] or [0])),
                                   "model_input": model_input(baseline, ours_input)}  # fmt: skip
            # same chunks read the same way, same scores (e.g. markdown on heading-less text = auto)
            signature = (
                model_input(baseline, ours_input),
                tuple((c.start_char, c.end_char) for c in all_chunks),
            )
            if signature in seen:
                twin = seen[signature]
                results.info[label]["same_as"] = twin
                results.rows += [r | {"config": label, "baseline": baseline} for r in results.rows
                                 if r["config"] == twin]  # fmt: skip
                for (cfg, retriever, unit), arr in list(results.strict.items()):
                    if cfg == twin:
                        results.strict[(label, retriever, unit)] = arr
                print(f"[{number + 1}] {label}: same chunks as {twin}", file=sys.stderr)
                continue
            strict, rows = score_config(setting, number, label, baseline, chunked, corpora)
            results.strict.update(
                {(label, retriever, unit): arr for (retriever, unit), arr in strict.items()}
            )
            results.rows += rows
            seen[signature] = label
            print(
                f"[{number + 1}] {label}: {len(all_chunks)} chunks, chunked in {chunking_seconds:.1f}s, "
                f"{time.perf_counter() - started:.0f}s in all (embedded so far: {embedder.embedded})",
                file=sys.stderr,
                flush=True,
            )
    return results


def print_topk(results: Results, k_main: int = 5) -> None:
    """The lenient view, for comparison with earlier runs: recall of whatever the top k touch, and the
    tokens that cost (bigger chunks always look better here; the strict tables correct for it)."""
    by = {(r["config"], r["retriever"], r["k"]): r for r in results.rows}
    print(
        f"\n### lenient top-k (not budgeted): recall / precision / IoU (%) at k = {k_main}, tokens retrieved\n"
    )
    print(
        "| chunking | chunks | mean tokens | "
        + " | ".join(f"{m} R / P / IoU | {m} tokens" for m in MODES)
        + " |"
    )
    print("|" + "---|" * (3 + 2 * len(MODES)))
    for c in results.configs:
        cells = []
        for m in MODES:
            r = by[(c, m, k_main)]
            cells += [f"{100 * r['recall']:.1f} / {100 * r['precision']:.1f} / {100 * r['iou']:.1f}",
                      f"{r['tokens']:.0f}"]  # fmt: skip
        info = results.info[c]
        print(f"| {strict_report.name_cell(c, results.baseline)} | {info['chunks']} | {info['chunk_tokens']:.0f} | "
              + " | ".join(cells) + " |")  # fmt: skip


@contextmanager
def _truncation_warnings_off() -> Iterator[None]:
    """The vector sink's truncation warnings off for the run (512+-token baselines exceed MiniLM's 256, by
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
    parser.add_argument(
        "--quick", action="store_true", help="auto, semantic and two baselines on every 6th question"
    )
    parser.add_argument(
        "--configs",
        default=None,
        help="ours, comma-separated: default (auto and each strategy at auto's size), sweep, quick, or "
        "STRATEGY[:SIZE/OVERLAP][:FIELD=VALUE...] (e.g. auto,sentence:390/58,semantic:220/0:semantic_window=0); "
        "the baselines always run",
    )
    parser.add_argument("--cache-dir", default=str(Path(".unichunk") / "bench_embeddings"),
                        help="on-disk embedding cache ('' to disable)")  # fmt: skip
    parser.add_argument("--plots-dir", default=str(Path("benchmarks") / "results"),
                        help="where the recall-vs-budget PNGs are written ('' to skip)")  # fmt: skip
    parser.add_argument("--strict-only", action="store_true", help="print only the strict tables")
    parser.add_argument("--headline-only", action="store_true",
                        help="the fixed BM25 alone (no stores, nothing embedded but semantic's sentences): "
                        "a fast sweep of boundaries")  # fmt: skip
    parser.add_argument(
        "--json", type=Path, default=None, help="also write every mean figure to this JSON file"
    )
    parser.add_argument("--half", choices=("all", *HALVES), default="all",
                        help="all questions, or one half of the deterministic split (split_halves): fusion "
                        "is tuned on `tune`, figures reported on `report`")  # fmt: skip
    parser.add_argument("--model-input", choices=("segments", "chunks"), default=None,
                        help="what MiniLM reads of our chunkings (default: as shipped, segments); the "
                        "baselines' chunks are always embedded whole, as their frameworks do")  # fmt: skip
    args = parser.parse_args(argv)
    if args.configs:
        parse_configs(args.configs, lambda texts: [], args.quick)  # fail on a typo before loading anything
    started = time.perf_counter()
    cache = Path(args.cache_dir) if args.cache_dir else None
    corpora = args.corpora or evaldata.corpora_dir("retrieval_quality")
    questions = args.questions or evaldata.questions_file("retrieval_quality")
    with _truncation_warnings_off():
        results = run(corpora, questions, args.quick, cache, args.configs, args.headline_only, half=args.half,
                      ours_input=args.model_input)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(strict_report.as_json(results), indent=1))
    if not args.strict_only and results.rows:
        print_topk(results)
    strict_report.print_strict(results)
    if args.plots_dir:
        for path in strict_report.write_plots(results, Path(args.plots_dir)):
            print(f"plot: {path}")
    if LOST[0]:
        print(f"note: {LOST[0]} SentenceSplitter chunks could not be located in the text and were dropped")
    print(
        f"\n{len(results.configs)} configurations, {len(results.corpus)} questions ({args.half}) in {time.perf_counter() - started:.0f}s"
    )


if __name__ == "__main__":
    main()
