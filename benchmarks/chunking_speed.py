"""Chunking throughput against named baselines, measured side by side in one run.

    python -m benchmarks.chunking_speed [--corpora DIR] [--repeat N] [--quick] [--clock wall|cpu]

Three cases. *Many small documents*: the Rust book's chapters and appendices (`benchmarks.rust_book`),
each page's text as our HTML loader extracts it, chunked one document at a time, the shape of a real
corpus where per-document overhead counts (without the book: the sample corpus's documents, saying so).
*Corpora*: the evaluation corpora (found by `benchmarks.evaldata`; without them, the bundled sample
corpus, saying so), joined into one text. *Varied*: a large text built from them in which every copy of a
paragraph is varied (words rotated per copy), because repeated identical paragraphs flatter splitters that
cache. token_window tokenizes long texts on 2 threads by default (tiktoken releases the GIL); its 1-thread
row is the like-for-like figure when the machine has no idle core. Each splitter is timed best-of-N,
interleaved (one run of every splitter per round), on the wall clock or, with `--clock cpu`, on this
process's CPU time (steadier on a loaded machine; it counts both tokenizing threads, so it shows no gain
from the second one), and reported as MB/s and as speed relative to tiktoken `encode` of the same texts
(>1 = faster than tokenizing alone). Our
strategies are timed end to end (`chunk(document)`: spans, exact token counts, IDs, hashes, models);
fixed_chars is also shown cutting only (`spans`), the part that does not depend on tiktoken. `auto` is timed
through `ChunkingService` as the pipeline runs it, with the final pass that fits every chunk to MiniLM's
256 word pieces (counting them is part of the time), next to markdown 360/54, what `auto` ran before.
Peak memory of token_window on a 20 MB text is measured in a fresh subprocess.

`semantic` embeds every sentence, so it is not timed in the MB/s table: `ingest_model_cost` runs it once on
the corpora (MiniLM, nothing cached) next to `auto` and to `auto` at 220/33 (the default before its
half-overlapping windows), each with what an ingest pays anyway, embedding the chunks, so the figure that
matters is the ratio of ingest model work (chunking + embedding the chunks) to that with `auto`
(`--no-model-cost` skips it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from chonkie import TokenChunker
from llama_index.core.node_parser import SentenceSplitter, TokenTextSplitter

from benchmarks.evaldata import REPO_ROOT, SAMPLE_CORPUS, corpora_or_sample, corpus_files
from benchmarks.rust_book import NOT_INSTALLED, book_pages, rust_book
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.loaders import load_document
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService, chunker_class
from unichunk.chunking.tokenizer import get_encoding
from unichunk.sinks.vectors.minilm import MiniLMEmbedder, load_minilm


def read_corpora(directory: Path) -> str:
    return "\n\n".join(p.read_text(encoding="utf-8") for p in corpus_files(directory))


def small_documents() -> tuple[str, list[str]]:
    """(name, texts) of the many-small-documents case: the Rust book's pages as our loader extracts their
    text (main content, as the pipeline reads them), else the sample corpus's documents."""
    book = rust_book()
    if book is not None:
        return "Rust book pages", [load_document(page).text for page in book_pages(book, 10_000)]
    print(f"chunking_speed: {NOT_INSTALLED}; the many-documents case uses the sample corpus", file=sys.stderr)
    paths = sorted(p for p in SAMPLE_CORPUS.iterdir() if p.is_file())
    return "sample corpus", [load_document(path).text for path in paths]


def varied_text(seed: str, target_bytes: int) -> str:
    """`seed`'s paragraphs repeated until target_bytes, each copy with its words rotated differently."""
    paragraphs = seed.split("\n")  # blank lines kept: paragraph structure is part of the text
    out: list[str] = []
    size, copy = 0, 0
    while size < target_bytes:
        copy += 1
        for index, paragraph in enumerate(paragraphs):
            words = paragraph.split(" ")
            shift = (copy * 7 + index) % max(1, len(words))
            varied = " ".join(words[shift:] + words[:shift])
            out.append(varied)
            size += len(varied.encode()) + 1
            if size >= target_bytes:
                break
    return "\n".join(out)


def splitters(quick_markdown: bool = True) -> dict[str, Callable[[str], object]]:
    """name -> function chunking a text; built once, so per-call setup is not timed."""
    encoding = get_encoding("cl100k_base")
    llama_token = TokenTextSplitter(chunk_size=900, chunk_overlap=100, tokenizer=encoding.encode)
    llama_sentence = SentenceSplitter(chunk_size=512, chunk_overlap=128, tokenizer=encoding.encode)
    chonkie_token = TokenChunker(tokenizer=encoding, chunk_size=900, chunk_overlap=100)

    documents: dict[int, Document] = {}  # built once per text: hashing the text is not chunking

    def document_for(text: str) -> Document:
        if id(text) not in documents:
            documents[id(text)] = Document(text=text, document_id="bench")
        return documents[id(text)]

    def ours(name: str, **options: int) -> Callable[[str], object]:
        chunker = chunker_class(name)(ChunkStrategy(name=name), **options)
        return lambda text: chunker.chunk(document_for(text))

    service = ChunkingService()

    def auto(path: str) -> Callable[[str], object]:
        """`auto` as shipped, through the service: the kind's strategy plus the fit to MiniLM's 256 word pieces."""
        named: dict[int, Document] = {}
        settings = ChunkStrategy()  # read once, as a run does (reading the environment is not chunking)

        def run(text: str) -> object:
            if id(text) not in named or len(named[id(text)].text) != len(text):
                named[id(text)] = Document(text=text, document_id="bench", path=path)
            return service.chunk(named[id(text)], settings)

        return run

    previous_auto = chunker_class("markdown")(
        ChunkStrategy(name="markdown", chunk_size=360, chunk_overlap=54)
    )
    fixed = chunker_class("fixed_chars")(ChunkStrategy(name="fixed_chars"))
    table: dict[str, Callable[[str], object]] = {
        "tiktoken encode (baseline)": encoding.encode,
        "ours token_window 900/100": ours("token_window"),
        "ours token_window 900/100, 1 thread": ours("token_window", workers=1),
        "chonkie TokenChunker 900/100": chonkie_token.chunk,
        "llama TokenTextSplitter 900/100": llama_token.split_text,
        "ours sentence 512/128": ours("sentence"),
        "llama SentenceSplitter 512/128": llama_sentence.split_text,
        "ours paragraph 512": ours("paragraph"),
        "ours fixed_chars 900/120": ours("fixed_chars"),
        "ours fixed_chars spans only": lambda text: fixed.spans(text, None),  # type: ignore[arg-type]
    }
    try:
        table["ours markdown 512"] = ours("markdown")
    except ImportError as exc:  # written by another engineer; optional here
        print(f"(markdown strategy not importable: {exc})", file=sys.stderr)
    auto_markdown = ChunkStrategy().effective()["markdown"]
    table["ours markdown 360/54 (auto until issue 15)"] = lambda text: previous_auto.chunk(document_for(text))
    table[f"ours auto, Markdown ({auto_markdown[1]}/{auto_markdown[2]} + fit to MiniLM)"] = auto("bench.md")  # type: ignore[index]
    table["ours auto, plain text (sentence + fit to MiniLM)"] = auto("bench.txt")
    return table


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def measure(cases: dict[str, list[str]], repeat: int, clock: str = "wall") -> dict[str, dict[str, float]]:
    """Best time per (case, splitter) to chunk every text of the case, one call per text; runs
    interleaved so machine noise hits every splitter alike."""
    table = splitters()
    now = CLOCKS[clock]
    best: dict[str, dict[str, float]] = {label: {} for label in cases}
    for label, texts in cases.items():
        for fn in table.values():  # warm-up: encoding tables, lazy imports
            fn(texts[0][:20000])
        for _ in range(repeat):
            for name, fn in table.items():
                gc.collect()
                started = now()
                for text in texts:
                    fn(text)
                elapsed = now() - started
                best[label][name] = min(elapsed, best[label].get(name, float("inf")))
    return best


def print_table(
    cases: dict[str, list[str]], best: dict[str, dict[str, float]], repeat: int, clock: str
) -> None:
    labels = list(cases)
    header = "| splitter | " + " | ".join(f"{label}: MB/s | × tiktoken" for label in labels) + " |"
    print(header)
    print("|---|" + "---:|---:|" * len(labels))
    names = list(best[labels[0]])
    for name in names:
        cells = []
        for label in labels:
            megabytes = sum(len(text.encode()) for text in cases[label]) / 1e6
            seconds = best[label][name]
            cells.append(
                f"{megabytes / seconds:.2f} | {best[label]['tiktoken encode (baseline)'] / seconds:.2f}"
            )
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        f"\nbest of {repeat} interleaved runs, {clock} clock, load average {os.getloadavg()[0]:.1f}; "
        "× tiktoken = tiktoken encode time / splitter time (higher is faster)"
    )


def _rss_child(corpora: Path, megabytes: int) -> None:
    """Run in a fresh process: peak RSS added by token_window chunking a text of `megabytes` MB."""
    text = varied_text(read_corpora(corpora), megabytes * 1_000_000)
    document = Document(text=text, document_id="bench")
    chunker = chunker_class("token_window")(ChunkStrategy(name="token_window"))
    chunker.chunk(Document(text=text[:200000]))  # load the encoding and its byte-length table first
    gc.collect()
    before = _current_rss()
    reset = _reset_peak()
    peak_before = _peak_rss()
    started = time.perf_counter()
    chunks = chunker.chunk(document)
    elapsed = time.perf_counter() - started
    peak = _peak_rss()
    result = {
        "bytes": len(text.encode()),
        "str_bytes": sys.getsizeof(text),
        "chunks": len(chunks),
        "seconds": elapsed,
        "peak_increase": peak - (before if reset else peak_before),
        "peak_reset": reset,
    }
    print(json.dumps(result))


def _current_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _peak_rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux clear_refs 5) so only chunking's peak is measured."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def rss_report(corpora: Path, megabytes: int) -> None:
    command = [
        sys.executable,
        "-m",
        "benchmarks.chunking_speed",
        "--corpora",
        str(corpora.resolve()),
        "--rss-child",
        str(megabytes),
    ]
    # from the repo root, so `-m benchmarks...` resolves wherever this benchmark was started from
    output = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO_ROOT).stdout
    result = json.loads(output.strip().splitlines()[-1])
    size = result["bytes"]
    print(
        f"\ntoken_window on a {size / 1e6:.1f} MB text (fresh process): peak RSS increase "
        f"{result['peak_increase'] / 1e6:.1f} MB = {result['peak_increase'] / size:.2f}x the document size "
        f"(limit 6x); {result['chunks']} chunks in {result['seconds']:.2f} s = {size / 1e6 / result['seconds']:.2f} MB/s"
        + ("" if result["peak_reset"] else " (peak not resettable: includes text construction)")
    )


# What `ingest_model_cost` compares: the shipped default, the default it replaced (issue 15: half-overlapping
# 176/88 windows cut twice the chunks of 220/33), and `semantic`.
MODEL_COST_STRATEGIES = {
    "auto": ChunkStrategy(),
    "auto at 220/33 (the default before)": ChunkStrategy(chunk_size=220, chunk_overlap=33),
    "semantic": ChunkStrategy(name="semantic"),
}


def ingest_model_cost(text: str, strategies: dict[str, ChunkStrategy] = MODEL_COST_STRATEGIES) -> None:
    """Seconds to chunk `text` (one Markdown document) with each strategy through the service, and to embed
    the chunks it made (MiniLM, as the vector sink does), all uncached; the ratios against `auto`."""
    load_minilm()  # loading the model is no one's cost here
    embed = MiniLMEmbedder().embed
    document = Document(text=text, document_id="bench", path="bench.md")
    service = ChunkingService()
    rows = {}
    for name, strategy in strategies.items():
        started = time.perf_counter()
        chunks = service.chunk(document, strategy, embed)
        chunking = time.perf_counter() - started
        started = time.perf_counter()
        embed([c.embed_text for c in chunks])
        rows[name] = (len(chunks), chunking, time.perf_counter() - started)
    print(f"\ningest model work on {len(text.encode()) / 1e6:.2f} MB (MiniLM, nothing cached, one run):\n")
    print("| strategy | chunks | chunking s | embedding its chunks s | ingest model work s | × auto's |")
    print("|---|---:|---:|---:|---:|---:|")
    base = rows["auto"][1] + rows["auto"][2]
    for name, (count, chunking, embedding) in rows.items():
        print(f"| {name} | {count} | {chunking:.1f} | {embedding:.1f} | {chunking + embedding:.1f} | "
              f"{(chunking + embedding) / base:.2f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--corpora",
        type=Path,
        help="directory of *.md/*.txt texts (default: the eval corpora, else the sample)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall time (default) or this process's CPU time",
    )
    parser.add_argument("--quick", action="store_true", help="2 MB instead of 10 MB; 5 MB memory check")
    parser.add_argument("--no-model-cost", action="store_true", help="skip the ingest model work table")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        _rss_child(args.corpora, args.rss_child)
        return
    args.corpora = args.corpora or corpora_or_sample("chunking_speed")
    corpora = read_corpora(args.corpora)
    big = varied_text(corpora, (2 if args.quick else 10) * 1_000_000)
    name, pages = small_documents()
    cases = {
        f"{name}: {len(pages)} documents, {sum(len(p.encode()) for p in pages) / 1e6:.2f} MB": pages,
        f"corpora {len(corpora.encode()) / 1e6:.2f} MB": [corpora],
        f"varied {len(big.encode()) / 1e6:.1f} MB": [big],
    }
    best = measure(cases, args.repeat, args.clock)
    print_table(cases, best, args.repeat, args.clock)
    rss_report(args.corpora, 5 if args.quick else 20)
    if not args.no_model_cost:
        ingest_model_cost(corpora[:50_000] if args.quick else corpora)


if __name__ == "__main__":
    main()
