"""unichunk's benchmarks: measurements of the shipped packages against named baselines, run from a checkout.

Run each from the repo root with `.venv/bin/python -m benchmarks.<name> [--quick]`: `chunking_speed`
(splitter throughput against tiktoken, chonkie and LlamaIndex), `bm25_speed` (the BM25 sink against
rank_bm25), `retrieval_quality` (recall/precision/IoU of each chunking strategy against LlamaIndex's
SentenceSplitter and a plain token window) and `pipeline_speed` (the real `ingest` flow against its model
work alone). They find the third-party evaluation data through `benchmarks.evaldata` (UNICHUNK_EVAL_DIR,
else ../shared/eval), read it in place and never copy it; all but `retrieval_quality` fall back to the
bundled sample corpus without it. This package is not shipped: it is not in pyproject's package list, and
it needs the dev extras (rank-bm25, chonkie). Results and their discussion: benchmarks/README.md.
"""
