"""How many chunks a one-paragraph edit re-embeds, per chunking strategy (issue 25's target: <= 3 with `auto`).

The document is the start of the eval set's `state_of_the_union.md` (read in place, never copied), cut at a
paragraph boundary where `auto` makes 40 chunks: Markdown without headings, so no section boundary
anchors the windows, the hardest case for `auto`'s half-overlapping windows (`--document operations`:
the start of this repository's docs/operations.md instead, Markdown with headings). Nine edits, each of one
paragraph: at 10 %, 50 % and 90 % of the document, a few words changed, a sentence added, or its last
sentence removed.

Two measurements:
- chunk texts: for every strategy and edit, the distinct embedded texts (`Chunk.embed_text`) of the edited
  document that the original's chunks did not have: exactly what the embedding cache leaves to embed;
- real runs: for every strategy, `ingest` (vectors only, embedded defaults, MiniLM), the middle
  sentence-added edit, `ingest` again: the second run's `embedded` and `reused` from its summary.

`python -m benchmarks.edit_reembed [--chunks 40] [--no-runs] [--document speech|operations]`
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.evaldata import find_eval_dir
from unichunk.chunking.config import default_strategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService

STRATEGIES = ("auto", "markdown", "sentence", "paragraph", "token_window", "fixed_chars", "semantic")
POSITIONS = (0.1, 0.5, 0.9)
EDITS = ("reword", "add sentence", "drop sentence")
SOURCE_ID = "speech.md"


def base_text(source: Path, chunks: int) -> str:
    """The start of `source`, cut at the first paragraph boundary where `auto` makes `chunks` chunks."""
    text = source.read_text(encoding="utf-8")
    paragraphs = text.split("\n\n")
    service = ChunkingService()
    for end in range(1, len(paragraphs) + 1):
        piece = "\n\n".join(paragraphs[:end]) + "\n"
        if len(service.chunk(_document(piece), default_strategy("auto"))) >= chunks:
            return piece
    raise SystemExit(f"{source} makes fewer than {chunks} auto chunks")


def edited(text: str, position: float, edit: str) -> str:
    """`text` with one paragraph (the one at `position` of the paragraphs with two sentences or more)
    edited by `edit`."""
    paragraphs = text.split("\n\n")
    candidates = [i for i, p in enumerate(paragraphs) if p.count(". ") >= 1]
    index = candidates[min(len(candidates) - 1, int(position * len(candidates)))]
    paragraph = paragraphs[index]
    if edit == "reword":
        words = paragraph.split(" ")
        middle = len(words) // 2
        words[middle : middle + 3] = ["indeed", "quite", "plainly"]
        paragraph = " ".join(words)
    elif edit == "add sentence":
        paragraph = (
            paragraph.rstrip() + " And we will say so again, plainly, to every family in this country."
        )
    else:
        paragraph = paragraph[: paragraph.rstrip().rstrip(".").rfind(". ") + 1]
    paragraphs[index] = paragraph
    return "\n\n".join(paragraphs)


def _document(text: str) -> Document:
    return Document(text=text, source_system="bench", source_id=SOURCE_ID)


def chunk_figures(text: str) -> dict[str, list[tuple[int, int]]]:
    """Per strategy, for every edit: (chunks of the edited document, its distinct embedded texts the
    original's chunks lacked)."""
    from unichunk.sinks.vectors.minilm import MiniLMEmbedder

    embed = MiniLMEmbedder().embed  # what `semantic` measures sentences with
    service = ChunkingService()
    figures: dict[str, list[tuple[int, int]]] = {}
    for strategy in STRATEGIES:
        settings = default_strategy(strategy)
        old = {c.embed_text for c in service.chunk(_document(text), settings, embed)}
        figures[strategy] = []
        for position in POSITIONS:
            for edit in EDITS:
                new = service.chunk(_document(edited(text, position, edit)), settings, embed)
                figures[strategy].append((len(new), len({c.embed_text for c in new} - old)))
    return figures


def anchored_windows(text: str, size: int = 176, overlap: int = 88, *, one_in: int = 1) -> list[str]:
    """A what-if, not shipped: `auto`'s half-overlapping windows made of content-anchored blocks.

    Sentences are packed into blocks of at most `size - overlap` tokens; a block also ends after a
    sentence that closes a paragraph, once it holds half a block (with `one_in` n > 1: only after the
    paragraphs whose text hashes to 0 mod n, for larger blocks). Where a block
    ends depends only on the text since the last such anchor, so after an edit the blocks fall back in
    step at the next anchor. Each window is two consecutive blocks: every stretch of text still lies in
    two windows, and an edit inside one block changes the two windows holding it (more only where it
    moves an anchor)."""
    import hashlib

    from unichunk.chunking.sentences import sentence_spans
    from unichunk.chunking.tokenizer import TokenCounter

    counter = TokenCounter("cl100k_base")
    units = sentence_spans(text)
    counts = counter.count_many([text[a:b] for a, b in units])
    limit, least = size - overlap, (size - overlap) // 2
    blocks: list[tuple[int, int]] = []
    start, held = 0, 0
    for n, ((a, b), count) in enumerate(zip(units, counts, strict=True)):
        if held and held + count > limit:
            blocks.append((start, n))
            start, held = n, 0
        held += count
        closes = n + 1 == len(units) or "\n\n" in text[b : units[n + 1][0]]
        paragraph = text[text.rfind("\n\n", 0, a) + 2 : b] if closes else ""
        if closes and held >= least and hashlib.sha256(paragraph.encode()).digest()[0] % one_in == 0:
            blocks.append((start, n + 1))
            start, held = n + 1, 0
    if start < len(units):
        blocks.append((start, len(units)))
    pairs = [(blocks[i][0], blocks[i + 1][1]) for i in range(len(blocks) - 1)] or blocks
    return [text[units[first][0] : units[last - 1][1]] for first, last in pairs]


def anchored_figures(text: str, one_in: int) -> list[tuple[int, int]]:
    """(windows of the edited text, windows it has that the original lacked), for every edit."""
    old = set(anchored_windows(text, one_in=one_in))
    figures = []
    for position in POSITIONS:
        for edit in EDITS:
            new = anchored_windows(edited(text, position, edit), one_in=one_in)
            figures.append((len(new), len(set(new) - old)))
    return figures


def run_figures(text: str) -> dict[str, tuple[int, int, int, float]]:
    """Per strategy: (chunks after the edit, embedded, reused, seconds of the second ingest)."""
    from unichunk import Pipeline
    from unichunk.settings import SinkSettings

    found: dict[str, tuple[int, int, int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="edit-reembed-") as tmp:
        for strategy in STRATEGIES:
            corpus = Path(tmp) / strategy / "corpus"
            corpus.mkdir(parents=True)
            (corpus / SOURCE_ID).write_text(text, encoding="utf-8")
            settings = SinkSettings(data_dir=Path(tmp) / strategy / "data")
            with Pipeline(settings, strategy=default_strategy(strategy), sinks=("vectors",)) as pipeline:
                pipeline.ingest(corpus)
                (corpus / SOURCE_ID).write_text(edited(text, 0.5, "add sentence"), encoding="utf-8")
                started = time.perf_counter()
                summary = pipeline.ingest(corpus)
                seconds = time.perf_counter() - started
            written = summary.chunks_written.get("vectors", 0)
            assert summary.embedded + summary.reused == written, summary
            found[strategy] = (written, summary.embedded, summary.reused, seconds)
            print(f"  run {strategy}: {summary.line()}", file=sys.stderr)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=40, help="auto chunks of the document (default 40)")
    parser.add_argument("--no-runs", action="store_true", help="chunk texts only, no ingest runs")
    parser.add_argument(
        "--document",
        choices=("speech", "operations"),
        default="speech",
        help="speech: the eval set's state_of_the_union.md (no headings, the default); operations: this "
        "repository's docs/operations.md (Markdown with headings)",
    )
    args = parser.parse_args(argv)
    if args.document == "operations":
        source = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
    else:
        eval_dir = find_eval_dir()
        if eval_dir is None:
            raise SystemExit("the eval data is needed (UNICHUNK_EVAL_DIR or ../shared/eval)")
        source = eval_dir / "corpora" / "state_of_the_union.md"
    text = base_text(source, args.chunks)
    print(f"document: {len(text):,} characters, {text.count(chr(10) * 2) + 1} paragraphs")
    figures = chunk_figures(text)
    header = " | ".join(f"{p:.0%} {e}" for p in POSITIONS for e in EDITS)
    print(f"\n| strategy | chunks | {header} | mean | max |")
    print("|---|---:|" + "---:|" * (len(POSITIONS) * len(EDITS) + 2))
    for strategy, rows in figures.items():
        counts = [changed for _, changed in rows]
        print(
            f"| {strategy} | {rows[0][0]} | "
            + " | ".join(str(c) for c in counts)
            + f" | {statistics.mean(counts):.1f} | {max(counts)} |"
        )
    for one_in in (1, 2):
        anchored = anchored_figures(text, one_in)
        counts = [changed for _, changed in anchored]
        print(
            f"| what-if: paired blocks anchored at {'every' if one_in == 1 else f'1 in {one_in}'} paragraph "
            f"end | {anchored[0][0]} | "
            + " | ".join(str(c) for c in counts)
            + f" | {statistics.mean(counts):.1f} | {max(counts)} |"
        )
    if args.no_runs:
        return
    runs = run_figures(text)
    print("\n| strategy | vectors written | embedded | reused | second ingest, s |")
    print("|---|---:|---:|---:|---:|")
    for strategy, (written, embedded, reused, seconds) in runs.items():
        print(f"| {strategy} | {written} | {embedded} | {reused} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
