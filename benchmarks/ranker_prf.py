"""RM3-style pseudo-relevance feedback for the BM25 sink, measured on the tune half (issue 27; not shipped).

    python -m benchmarks.ranker_prf   (after `benchmarks.ranker_tuning`, whose cached lists it reads)

For each question the first `fb docs` BM25 hits give a relevance model (each stem's share of a hit's
stems, weighted by the hit's share of their scores); its top `fb terms` stems are mixed with the query's
own (their weight `orig`, the expansion's 1 - orig) and every chunk is scored again with those weights (the
sink's own query-time BM25, one term at a time). Each setting replaces the keyword list, the fusion is tuned
again on the tune half, and the report half is printed beside it. It reads the sink's private index
(`_current`, `_vocab`): a measurement, not an API. Every setting tried lost recall (benchmarks/README.md).
"""

import json
import tempfile
from collections import Counter
from itertools import product
from pathlib import Path

import numpy as np

from benchmarks.budget_metric import BUDGETS
from benchmarks.fusion_tuning import Lists, lists_key, recall_grid
from benchmarks.ranker_tuning import _hits, _rows, best, combine, eval_halves, fmt, grid, kw_name
from benchmarks.retrieval_quality import CachedEmbedder, ours
from unichunk.chunking.config import ChunkStrategy
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.vectors.minilm import MiniLMEmbedder


def main() -> None:
    cd, qf, corpora, qs, tune, report = eval_halves("ranker_prf")
    base = Lists.load(
        Path(".unichunk/fusion_lists.json"), lists_key(cd, qf, ["keywords", "vectors", "graph"]), qs
    )
    v = [
        {n: _hits(r) for n, r in per.items()}
        for per in json.loads(Path(".unichunk/ranker_lists.json").read_text())["ranked"]
    ]
    chunker = ours(
        ChunkStrategy(), CachedEmbedder(MiniLMEmbedder(), Path(".unichunk/bench_embeddings")).embed
    )
    SETS = list(product((3, 5, 10), (5, 10, 20), (0.3, 0.5, 0.7)))  # fb docs, fb terms, original weight
    with tempfile.TemporaryDirectory() as tmp:
        sink = BM25Sink(SinkSettings(data_dir=Path(tmp)), path=Path(tmp) / "b.sqlite")
        for doc in corpora.values():
            sink.upsert(doc, chunker(doc))
        snap = sink._current()
        for i, q in enumerate(qs):
            toks = sink.analyzer(q.text)
            ids = [sink._vocab[t] for t in toks if t in sink._vocab]
            first = sink.search(q.text, 10)
            for fd, ft, ow in SETS:
                name = f"prf {fd}/{ft}/{ow}"
                if not ids or not first:
                    v[i][name] = v[i][kw_name(1.2, 0.75)]
                    continue
                hits = first[:fd]
                total = sum(h.score for h in hits)
                w = Counter()
                for h in hits:
                    stems = sink.analyzer(h.content)
                    if not stems:
                        continue
                    for t, tf in Counter(stems).items():
                        w[t] += tf / len(stems) * h.score / total
                qw = Counter(toks)
                qn = sum(qw.values())
                exp = [(t, x) for t, x in w.most_common() if t in sink._vocab][:ft]
                en = sum(x for _, x in exp) or 1.0
                mix = Counter({t: ow * c / qn for t, c in qw.items()})
                for t, x in exp:
                    mix[t] += (1 - ow) * x / en
                scores = np.zeros(len(snap.alive), dtype=np.float64)
                for t, x in mix.items():
                    if t in sink._vocab:
                        scores += x * snap.scores([sink._vocab[t]])
                top = np.argsort(-scores, kind="stable")[:100]
                top = [p for p in top if scores[p] > 0]
                rec = sink.get_chunks([snap.chunk_ids[p] for p in top])
                v[i][name] = _hits(
                    _rows(
                        [
                            type(first[0])(
                                r.chunk_id,
                                r.document_id,
                                r.chunk_index,
                                r.start_char,
                                r.end_char,
                                "",
                                score=float(scores[p]),
                            )
                            for p in top
                            if (r := rec.get(snap.chunk_ids[p])) is not None
                        ]
                    )
                )
        sink.close()
    print("| PRF docs/terms/orig | alone tune | fused tune | fusion | alone report | fused report |")
    for fd, ft, ow in [(None, None, None), *SETS]:
        name = kw_name(1.2, 0.75) if fd is None else f"prf {fd}/{ft}/{ow}"
        lists = combine(base, v, {"keywords": name})
        pick, tv = best(lists, tune, grid(False))
        print(
            f"| {name} | {fmt(recall_grid(lists, tune, 'keywords', BUDGETS).mean(axis=0))} | {fmt(tv)} | {pick.label()} | "
            f"{fmt(recall_grid(lists, report, 'keywords', BUDGETS).mean(axis=0))} | {fmt(recall_grid(lists, report, pick, BUDGETS).mean(axis=0))} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
