"""`unichunk eval` over the shared evaluation set reproduces the benchmark's strict figures for `auto`.

The corpora are ingested as a user would (`unichunk ingest ../shared/eval/corpora`: default settings,
`auto`), then the questions CSV is evaluated with the shipped search; character recall of the hybrid
search at 1,000 / 2,000 / 4,000 characters, its passages poured first, must be what
`benchmarks.passage_tuning` measured for the shipped passages (benchmarks/README.md, "Passages") within
half a point. Skipped where the third-party data is absent (it is
read in place, never copied into the repository).
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from unichunk import Pipeline
from unichunk.deployments.cli.main import app

# benchmarks/README.md, strict metric, hybrid with the fusion measured for issue 27 on segment vectors (min-max,
# keywords 0.4, vectors 0.6; BM25 k1 1.2: `benchmarks.ranker_tuning`), the top 3 hits' passages poured first
# (`benchmarks.passage_tuning`), `auto (markdown 176/88, fitted)`, vectors composed from segments
# (`model_input=segments`, "Overlapping chunks read once"): recall at each budget, all 276 questions. MiniLM in
# fp32 gave these; in bfloat16 (`auto`'s backend on a CPU with bf16 instructions) the same steps gave 76.21 /
# 86.39 / 94.04 (2026-11-28), so both backends are held to half a point.
BENCHMARK_AUTO_HYBRID = {"1000": 0.762, "2000": 0.864, "4000": 0.940}
TOLERANCE = 0.005


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
    measured = {budget: overall["chars"][budget]["recall"] for budget in BENCHMARK_AUTO_HYBRID}
    for budget, expected in BENCHMARK_AUTO_HYBRID.items():
        assert abs(measured[budget] - expected) <= TOLERANCE, (budget, measured)
