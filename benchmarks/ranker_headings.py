"""Whether heading chains in BM25's indexed text help on ../shared/eval (issue 27; `INDEXED_TEXT`).

    python -m benchmarks.ranker_headings   (after `benchmarks.ranker_tuning`, whose cached lists it reads)

The corpora are chunked as shipped and ingested into a BM25 sink twice: as shipped (each chunk's heading
chain before its content, `Chunk.embed_text`) and with the chains left out (content alone); every question
is ranked by both at the shipped k1/b, each list replaces the keyword list, the fusion is tuned again on the
tune half, and the report half is printed beside it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.budget_metric import BUDGETS
from benchmarks.fusion_tuning import LIST_DEPTH, Lists, lists_key, recall_grid
from benchmarks.ranker_tuning import best, combine, eval_halves, fmt, grid
from benchmarks.retrieval_quality import CachedEmbedder, ours
from unichunk.chunking.config import ChunkStrategy
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.vectors.minilm import MiniLMEmbedder


def main() -> None:
    cd, qf, corpora, qs, tune, report = eval_halves("ranker_headings")
    base = Lists.load(
        Path(".unichunk/fusion_lists.json"), lists_key(cd, qf, ["keywords", "vectors", "graph"]), qs
    )
    assert base is not None, "run benchmarks.fusion_tuning --retrievers keywords,vectors,graph first"
    variants: list[dict] = [{} for _ in qs]
    chunker = ours(
        ChunkStrategy(), CachedEmbedder(MiniLMEmbedder(), Path(".unichunk/bench_embeddings")).embed
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, keep in (("headings+content", True), ("content", False)):
            sink = BM25Sink(SinkSettings(data_dir=Path(tmp)), path=Path(tmp) / f"{name}.sqlite")
            chained = 0
            for doc in corpora.values():
                chunks = chunker(doc)
                chained += sum(bool(c.heading_chain) for c in chunks)
                sink.upsert(
                    doc, chunks if keep else [c.model_copy(update={"heading_chain": ()}) for c in chunks]
                )
            print(f"{name}: {chained} chunks have a heading chain")
            for i, q in enumerate(qs):
                variants[i][name] = sink.search(q.text, LIST_DEPTH)
            sink.close()
    print("| BM25 indexes | alone, tune | fused, tune | fusion | alone, report | fused, report |")
    print("|---|---|---|---|---|---|")
    for name in ("headings+content", "content"):
        lists = combine(base, variants, {"keywords": name})
        pick, tv = best(lists, tune, grid(False))
        alone_t = recall_grid(lists, tune, "keywords", BUDGETS).mean(axis=0)
        alone_r = recall_grid(lists, report, "keywords", BUDGETS).mean(axis=0)
        rep = recall_grid(lists, report, pick, BUDGETS).mean(axis=0)
        print(f"| {name} | {fmt(alone_t)} | {fmt(tv)} | {pick.label()} | {fmt(alone_r)} | {fmt(rep)} |")


if __name__ == "__main__":
    main()
