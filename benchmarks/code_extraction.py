"""What spaCy makes of code: the graph's entities with and without the documents' code blocks.

    python -m benchmarks.code_extraction [--pages 40] [--rounds 2]

The Rust book's first `--pages` chapters (`benchmarks.rust_book`), chunked by `auto`, cut into the segments
the graph sink reads (`unichunk.chunking.segments`), once with their code blocks (what spaCy was given
before) and once without (`code=False`, what `SpacyExtractor.reads_code = False` makes the sink give it).
Each round extracts both, interleaved, with the model loaded untimed; per chunk the merged extraction, as
the sink writes it. Prints characters read, spaCy's seconds, (chunk, entity) mentions, distinct names,
relation pairs, the chunks left with nothing to read, and the names that lost the most mentions.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from benchmarks.rust_book import NOT_INSTALLED, book_pages, rust_book
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.loaders import load_bytes
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.segments import segment_batch, segment_chunk
from unichunk.chunking.service import shared_service
from unichunk.sinks.graph.extraction import SpacyExtractor, entity_key, merge_extractions


def measure(
    pairs: list[tuple[Document, list[Chunk]]], extractor: SpacyExtractor, *, code: bool
) -> tuple[dict[str, float], Counter[str]]:
    """One extraction of the batch's segments, with or without code: its figures, and mentions by name."""
    segments = segment_batch(pairs, headings=False, code=code)
    started = time.perf_counter()
    made = extractor.extract([segment_chunk(text) for text in segments.texts])
    seconds = time.perf_counter() - started
    per_chunk = [merge_extractions("chunk", [made[i] for i in own]) for own in segments.members]
    names = Counter(entity_key(e.name) for x in per_chunk for e in x.entities)
    figures = {
        "characters": sum(len(text) for text in segments.texts),
        "seconds": seconds,
        "mentions": sum(names.values()),
        "names": len(names),
        "relations": sum(len(x.relations) for x in per_chunk),
        "empty chunks": sum(1 for own in segments.members if not own),
    }
    return figures, names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=40, help="Rust book chapters (default 40)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    args = parser.parse_args(argv)
    book = rust_book()
    if book is None:
        raise SystemExit(NOT_INSTALLED)
    pairs = []
    for page in book_pages(book, args.pages):
        document = load_bytes(page.read_bytes(), page.name)
        pairs.append((document, shared_service().chunk(document, ChunkStrategy())))
    extractor = SpacyExtractor()
    extractor.extract([segment_chunk("Warm up spaCy in Paris.")])
    chunks = sum(len(own) for _, own in pairs)
    print(f"{len(pairs)} pages, {chunks} auto chunks")
    names: dict[bool, Counter[str]] = {}
    for round_ in range(1, args.rounds + 1):
        for code in (True, False):
            figures, names[code] = measure(pairs, extractor, code=code)
            shown = ", ".join(
                f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
            )
            print(f"round {round_}, {'with' if code else 'without'} code: {shown}", flush=True)
    gone = names[True] - names[False]
    print("most mentions gone:", ", ".join(f"{name!r} {n}" for name, n in gone.most_common(20)))
    print(
        "most mentioned without code:", ", ".join(f"{name!r} {n}" for name, n in names[False].most_common(15))
    )


if __name__ == "__main__":
    main()
