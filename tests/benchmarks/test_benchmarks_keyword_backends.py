"""`benchmarks.keyword_backends` runs both designs end to end on a tiny synthetic corpus and prints them side
by side (the recall half needs the eval data and runs in the benchmark itself)."""

from __future__ import annotations

import re

import pytest

from benchmarks.keyword_backends import main, query_vector, tf_weights


def test_tf_weights_are_bm25s_term_part_and_query_repeats_count() -> None:
    from collections import Counter

    indices, values = tf_weights(Counter({"fox": 2, "dog": 1}), avglen=3.0)
    # length 3 = average: norm = k1 = 1.5, so tf / (tf + 1.5)
    assert sorted(values) == pytest.approx(sorted([2 / 3.5, 1 / 2.5]))
    assert len(set(indices)) == 2
    q_indices, q_values = query_vector(Counter({"fox": 2}))
    assert q_values == [2.0] and q_indices[0] in indices


def test_both_designs_are_measured_side_by_side(
    postgres_server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--sizes", "3000", "--queries", "5", "--vocabulary", "3000", "--skip-recall",
          "--database-url", postgres_server_url])  # fmt: skip
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| synthetic"))
    assert "3k: (a) PostgreSQL + in-process BM25" in header and "3k: (b) qdrant-edge sparse+IDF" in header
    for label in ("query p50 (ms)", "write 20 chunks + next query (s)", "RSS of the serving process (MB)"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {label} |"))
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert len(cells) == 2 and all(re.fullmatch(r"\d+(\.\d+)?", c) for c in cells), row
    assert re.search(r"\(a\) BM25Sink.write on PostgreSQL \d+ chunks/s", out)
    assert re.search(r"serving process holds a client only, RSS \d+ MB", out)
