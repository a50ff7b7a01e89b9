"""spaCy once per character of overlapping chunks (issue 25): `python -m benchmarks.segment_extraction`.

The graph sink runs the extractor on every chunk, so `auto`'s half overlap has spaCy read each character about
twice, as MiniLM does (`benchmarks.composed_vectors` measures the vectors' side). This cuts each eval corpus at
every chunk boundary into non-overlapping segments (the same `segments`), extracts from each segment once,
and gives each chunk the union of its segments' entities and relations. Printed side by side in one run: the
extractor's time on the segments against the chunks (interleaved rounds, the model loaded untimed), and how
far each chunk's entities and relation pairs agree between the two ways.

    python -m benchmarks.segment_extraction [--rounds 2] [--cache-dir DIR]

The measurement that led to shipping it (`model_input=segments`: the graph sink merges each chunk's
segments' extractions with `merge_extractions`); the shipped pipeline's figures: `benchmarks.model_input`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.composed_vectors import segments
from benchmarks.ranker_tuning import eval_halves
from benchmarks.retrieval_quality import CachedEmbedder, ours
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk
from unichunk.sinks.graph.extraction import Extraction, SpacyExtractor, entity_key
from unichunk.sinks.vectors.minilm import MiniLMEmbedder


def _segment_chunk(document_id: str, index: int, text: str, start: int, end: int) -> Chunk:
    return Chunk(
        chunk_id=f"segment-{document_id}-{index}",
        document_id=document_id,
        chunk_index=index,
        content=text[start:end],
        start_char=start,
        end_char=end,
        token_count=0,
        content_hash=sha256_hex(text[start:end]),
    )


def _keys(extraction: Extraction) -> tuple[set[str], set[tuple[str, str]]]:
    entities = {entity_key(e.name) for e in extraction.entities}
    pairs = {tuple(sorted((entity_key(r.source), entity_key(r.target)))) for r in extraction.relations}
    return entities, pairs  # type: ignore[return-value]


def _agreement(chunk_way: list[set], segment_way: list[set]) -> str:
    both = sum(len(a & b) for a, b in zip(chunk_way, segment_way, strict=True))
    only_chunks = sum(len(a - b) for a, b in zip(chunk_way, segment_way, strict=True))
    only_segments = sum(len(b - a) for a, b in zip(chunk_way, segment_way, strict=True))
    total = sum(len(a) for a in chunk_way)
    return (
        f"{total} per chunk; {both} found both ways ({both / total:.1%}), {only_chunks} only per chunk, "
        f"{only_segments} only per segment"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache-dir", type=Path, default=Path(".unichunk") / "bench_embeddings")
    args = parser.parse_args(argv)
    _, _, corpora, _, _, _ = eval_halves("benchmarks.segment_extraction")
    chunker = ours(ChunkStrategy(), CachedEmbedder(MiniLMEmbedder(), args.cache_dir).embed)
    chunks: list[Chunk] = []
    pieces: list[Chunk] = []
    inside: list[list[int]] = []  # per chunk, the positions of its segments in `pieces`
    for doc in corpora.values():
        doc_chunks = chunker(doc)
        first = len(pieces)
        cut = segments(doc_chunks)
        pieces.extend(_segment_chunk(doc.document_id, i, doc.text, s, e) for i, (s, e) in enumerate(cut))
        for c in doc_chunks:
            inside.append(
                [first + i for i, (s, e) in enumerate(cut) if c.start_char <= s and e <= c.end_char]
            )
        chunks.extend(doc_chunks)
    characters = sum(len(c.content) for c in chunks), sum(len(p.content) for p in pieces)
    print(
        f"{len(chunks)} chunks ({characters[0]:,} characters) against {len(pieces)} segments ({characters[1]:,})"
    )
    extractor = SpacyExtractor()
    extractor.extract(chunks[:8])  # the model loads here, untimed
    timings: dict[str, list[float]] = {"chunks": [], "segments": []}
    results: dict[str, list[Extraction]] = {}
    for _ in range(args.rounds):
        for name, items in (("chunks", chunks), ("segments", pieces)):
            started = time.perf_counter()
            results[name] = extractor.extract(items)
            timings[name].append(time.perf_counter() - started)
    ratio = [s / c for s, c in zip(timings["segments"], timings["chunks"], strict=True)]
    print(
        f"spaCy time: chunks {statistics.median(timings['chunks']):.1f} s, segments "
        f"{statistics.median(timings['segments']):.1f} s, segments / chunks {statistics.median(ratio):.2f}x "
        f"(rounds: {', '.join(f'{r:.2f}' for r in ratio)})"
    )
    per_chunk = [_keys(e) for e in results["chunks"]]
    per_segment = [_keys(e) for e in results["segments"]]
    union = [
        (
            set().union(*(per_segment[i][0] for i in positions)),
            set().union(*(per_segment[i][1] for i in positions)),
        )
        for positions in inside
    ]
    print("entities: " + _agreement([p[0] for p in per_chunk], [u[0] for u in union]))
    print("relation pairs: " + _agreement([p[1] for p in per_chunk], [u[1] for u in union]))


if __name__ == "__main__":
    main()
