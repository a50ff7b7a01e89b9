"""benchmarks.ranker_tuning's pieces: cached lists keyed by the rankers' constants, variants swapped into the
fused lists, the graph list cut, the grids."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import fusion_tuning
from benchmarks.fusion_tuning import Lists, lists_key
from benchmarks.ranker_tuning import capped, combine, grid
from unichunk.retrieval.graph_search import GraphScoring
from unichunk.sinks.base import ScoredChunk


def _hit(name: str) -> ScoredChunk:
    return ScoredChunk(name, "doc", 0, 0, 1, "", score=1.0)


def test_cached_lists_are_keyed_by_the_rankers_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.md").write_text("text", encoding="utf-8")
    questions = tmp_path / "q.csv"
    questions.write_text("question,references,corpus_id\n", encoding="utf-8")
    key = lists_key(tmp_path, questions, ["keywords"])
    assert lists_key(tmp_path, questions, ["keywords"]) == key
    monkeypatch.setattr(fusion_tuning, "K1", 0.9)
    assert lists_key(tmp_path, questions, ["keywords"]) != key  # a k1 change ranks the lists again
    monkeypatch.undo()
    monkeypatch.setattr(fusion_tuning, "GRAPH_SCORING", GraphScoring(tie_by_terms=False))
    assert lists_key(tmp_path, questions, ["keywords"]) != key


def test_a_variant_replaces_its_list_and_the_graph_cut_keeps_the_others() -> None:
    base = Lists(
        [],
        {},
        [{"keywords": [_hit("k")], "vectors": [_hit("v")], "graph": [_hit(f"g{i}") for i in range(5)]}],
    )
    variants = [{"bm25 x": [_hit("k2")], "graph y": [_hit("g9")]}]
    swapped = combine(base, variants, {"keywords": "bm25 x"})
    assert [h.chunk_id for h in swapped.ranked[0]["keywords"]] == ["k2"]
    assert swapped.ranked[0]["vectors"] == base.ranked[0]["vectors"]
    assert swapped.ranked[0]["graph"] == base.ranked[0]["graph"]
    cut = capped(base, 2)
    assert [h.chunk_id for h in cut.ranked[0]["graph"]] == ["g0", "g1"]
    assert cut.ranked[0]["keywords"] == base.ranked[0]["keywords"]
    assert capped(base, None) is base


def test_the_keyword_grid_leaves_the_graph_out_and_the_graph_grid_weighs_it() -> None:
    without = grid(False)
    assert without and all(dict(c.weights)["graph"] == 0 for c in without)
    weighted = {dict(c.weights)["graph"] for c in grid(True)}
    assert 0.0 in weighted and max(weighted) > 0
