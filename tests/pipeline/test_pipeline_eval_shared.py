"""`unichunk eval` over the shared evaluation set reproduces the benchmark's strict figures for `auto`.

The corpora are ingested as a user would (`unichunk ingest ../shared/eval/corpora`: default settings,
`auto`), then the questions CSV is evaluated with the shipped search; character recall of the hybrid
search at 1,000 / 2,000 / 4,000 characters must be the `benchmarks.retrieval_quality` hybrid row for
`auto` (benchmarks/README.md) within half a point. Skipped where the third-party data is absent (it is
read in place, never copied into the repository).
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from unichunk import Pipeline
from unichunk.deployments.cli.main import app
from unichunk.sinks.config import SinkSettings

# benchmarks/README.md, strict metric, hybrid with the fusion measured for issue 27 on segment vectors (min-max,
# keywords 0.4, vectors 0.6; BM25 k1 1.2: `benchmarks.ranker_tuning`), `auto (markdown 176/88, fitted)`, vectors
# composed from segments (`model_input=segments`, "Overlapping chunks read once"): recall at each budget, all
# 276 questions (`benchmarks.fusion_tuning`'s lists fused the same way give the same 72.6 / 86.7 / 94.0), with
# MiniLM in fp32; in bfloat16 (`auto`'s backend on a CPU with bf16 instructions) 72.2 / 86.7 / 94.0
# (`benchmarks.default_embedder`, "Embedder backends").
BENCHMARK_AUTO_HYBRID = {
    "torch": {"1000": 0.726, "2000": 0.867, "4000": 0.940},
    "torch-bf16": {"1000": 0.722, "2000": 0.867, "4000": 0.940},
}


def test_eval_of_the_shared_set_gives_the_benchmarks_figures(
    pipeline_env: Path, shared_eval_dir: Path
) -> None:
    ingested = CliRunner().invoke(app, ["ingest", str(shared_eval_dir / "corpora")])
    assert ingested.exit_code == 0, ingested.output
    with Pipeline(data_dir=pipeline_env) as pipeline:
        report = pipeline.eval(shared_eval_dir / "questions.csv")
    assert report["unlocated"] == []
    overall = report["overall"]["live"]
    assert overall["questions"] == overall["scored"] == 276
    figures = BENCHMARK_AUTO_HYBRID[SinkSettings().minilm_backend()]
    measured = {budget: overall["chars"][budget]["recall"] for budget in figures}
    for budget, expected in figures.items():
        assert abs(measured[budget] - expected) <= 0.005, (budget, measured)
