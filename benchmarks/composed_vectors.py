"""Overlapping chunks embedded once per character (issue 25): `python -m benchmarks.composed_vectors`.

`auto` overlaps neighbouring chunks by half, so MiniLM reads every character twice, and that, not our code,
is most of why the default ingest is slower than LlamaIndex's (benchmarks/README.md). This measures the one
way to keep the overlap and embed each character once: cut each document at every chunk boundary into
non-overlapping *segments*, embed each segment once, and give each chunk the normalised sum of its
segments' token embeddings (MiniLM pools by the mean, so this is the mean over the chunk's tokens, each read
in its segment's context only), or the normalised mean of its segments' vectors. Printed side by side in one
run: the time to embed the segments against the chunks (torch fp32, interleaved rounds), the cosine of the
composed vectors to the chunks' own, and strict recall on `../shared/eval` (tune half, report half, all
276) of vectors alone and of the shipped fusion with BM25, each way.

    python -m benchmarks.composed_vectors [--rounds 3] [--cache-dir DIR]

The measurement that led to shipping it (`model_input=segments`, `unichunk.chunking.segments`); the
shipped pipeline's own figures, both ways in one run, come from `benchmarks.model_input`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np

from benchmarks.fusion_tuning import HITS, LIST_DEPTH, Lists, build_lists, recall_grid, shipped
from benchmarks.ranker_tuning import eval_halves
from benchmarks.retrieval_quality import CachedEmbedder, ours
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Chunk
from unichunk.retrieval.evaluation.metric import BUDGETS
from unichunk.sinks.base import ScoredChunk
from unichunk.sinks.vectors.minilm import MiniLMEmbedder, load_minilm

MODEL_BATCH = 8  # the shipped model batch (`UNICHUNK_EMBEDDING_MODEL_BATCH_SIZE`)


def segments(chunks: Sequence[Chunk]) -> list[tuple[int, int]]:
    """The non-overlapping pieces between consecutive chunk boundaries of one document that some chunk
    covers, in text order."""
    cuts = sorted({c.start_char for c in chunks} | {c.end_char for c in chunks})
    return [(s, e) for s, e in pairwise(cuts) if any(c.start_char <= s and e <= c.end_char for c in chunks)]


def token_states(model: object, texts: list[str]) -> list[np.ndarray]:
    """Each text's last hidden states, one row per word piece ([CLS] and [SEP] included), unpadded."""
    out = model.encode(
        texts, batch_size=MODEL_BATCH, output_value="token_embeddings", show_progress_bar=False
    )
    return [np.asarray(t, dtype=np.float64) for t in out]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def composed(
    chunks: Sequence[Chunk], pieces: list[tuple[int, int]], states: list[np.ndarray]
) -> dict[str, np.ndarray]:
    """Per chunk ID, the two composed vectors: "tokens" (normalised sum of its segments' token states)
    and "segments" (normalised mean of its segments' own normalised mean-pooled vectors)."""
    sums = [s.sum(axis=0) for s in states]
    counts = [len(s) for s in states]
    out: dict[str, np.ndarray] = {}
    for c in chunks:
        inside = [i for i, (s, e) in enumerate(pieces) if c.start_char <= s and e <= c.end_char]
        tokens = _unit(sum(sums[i] for i in inside) / sum(counts[i] for i in inside))
        seg = _unit(sum(_unit(sums[i] / counts[i]) for i in inside))
        out[c.chunk_id] = np.stack([tokens, seg])
    return out


def ranked_lists(chunks: list[Chunk], vectors: np.ndarray, queries: np.ndarray) -> list[list[ScoredChunk]]:
    """Each query's `LIST_DEPTH` nearest chunks by cosine (exact, as a small collection is searched)."""
    scores = queries @ vectors.T
    out = []
    for row in scores:
        top = np.argsort(-row, kind="stable")[:LIST_DEPTH]
        out.append(
            [
                ScoredChunk(
                    chunks[i].chunk_id,
                    chunks[i].document_id,
                    chunks[i].chunk_index,
                    chunks[i].start_char,
                    chunks[i].end_char,
                    "",
                    score=float(row[i]),
                )
                for i in top
            ]
        )
    return out


def with_vectors(lists: Lists, vectors: list[list[ScoredChunk]]) -> Lists:
    return Lists(
        lists.questions,
        lists.doc_ids,
        [{**per, "vectors": v} for per, v in zip(lists.ranked, vectors, strict=True)],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=Path(".unichunk") / "bench_embeddings")
    args = parser.parse_args(argv)
    corpora_dir, _, corpora, questions, tune, report = eval_halves("benchmarks.composed_vectors")
    lists = build_lists(corpora_dir, questions, ["keywords", "vectors"], args.cache_dir)
    embedder = CachedEmbedder(MiniLMEmbedder(), args.cache_dir)
    chunker = ours(ChunkStrategy(), embedder.embed)
    model = load_minilm()
    all_chunks: list[Chunk] = []
    chunk_texts: list[str] = []
    piece_texts: list[str] = []
    per_doc = []
    for doc in corpora.values():
        chunks = chunker(doc)
        pieces = segments(chunks)
        per_doc.append((chunks, pieces, len(piece_texts)))
        all_chunks.extend(chunks)
        chunk_texts.extend(c.content for c in chunks)
        piece_texts.extend(doc.text[s:e] for s, e in pieces)
    words = embedder.count_tokens
    print(
        f"{len(all_chunks)} chunks ({sum(words(chunk_texts)):,} word pieces) against {len(piece_texts)} "
        f"segments ({sum(words(piece_texts)):,} word pieces)",
        flush=True,
    )
    timings: dict[str, list[float]] = {"chunks": [], "segments": []}
    for _ in range(args.rounds):
        for name, texts in (("chunks", chunk_texts), ("segments", piece_texts)):
            started = time.perf_counter()
            model.encode(texts, batch_size=MODEL_BATCH, normalize_embeddings=True, show_progress_bar=False)
            timings[name].append(time.perf_counter() - started)
    ratio = [s / c for s, c in zip(timings["segments"], timings["chunks"], strict=True)]
    print(
        f"embedding time, torch fp32, model batch {MODEL_BATCH}: chunks "
        f"{statistics.median(timings['chunks']):.1f} s, segments {statistics.median(timings['segments']):.1f} s, "
        f"segments / chunks {statistics.median(ratio):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratio)})",
        flush=True,
    )
    states = token_states(model, piece_texts)
    made: dict[str, np.ndarray] = {}
    for chunks, pieces, first in per_doc:
        made |= composed(chunks, pieces, states[first : first + len(pieces)])
    whole = np.asarray(embedder.embed(chunk_texts), dtype=np.float64)
    queries = np.asarray(embedder.embed([q.text for q in questions]), dtype=np.float64)
    ways = {"whole chunks (model_input=chunks)": whole}
    for n, label in enumerate(("composed: token states summed", "composed: segment vectors averaged")):
        ways[label] = np.stack([made[c.chunk_id][n] for c in all_chunks])
        cosines = np.sum(ways[label] * whole, axis=1)
        print(
            f"{label}: cosine to the chunks' own vectors mean {cosines.mean():.4f}, min {cosines.min():.4f}"
        )
    halves = {"tune": tune, "report": report, "all": list(range(len(questions)))}
    fusion = shipped(["keywords", "vectors"])
    print(f"\nstrict recall (%) at {' / '.join(f'{b:,}' for b in BUDGETS)} characters, {HITS} hits")
    print("| vectors | half | vectors alone | shipped fusion with BM25 |")
    print("|---|---|---|---|")
    for label, vectors in ways.items():
        swapped = with_vectors(lists, ranked_lists(all_chunks, vectors, queries))
        for half, rows in halves.items():
            alone = recall_grid(swapped, rows, "vectors", BUDGETS).mean(axis=0) * 100
            fused = recall_grid(swapped, rows, fusion, BUDGETS).mean(axis=0) * 100
            cells = [" / ".join(f"{v:.1f}" for v in x) for x in (alone, fused)]
            print(f"| {label} | {half} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
