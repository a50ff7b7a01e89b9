"""Reciprocal-rank and normalised-score fusion on hand-made rankings, independent of the stores, through
`retrieve`."""

from __future__ import annotations

import pytest

from unichunk.retrieval.fusion import fuse, rrf_fuse, score_fuse
from unichunk.retrieval.ranking import RetrievalSettings, retrieve
from unichunk.sinks.base import ScoredChunk


def _Found(chunk_id: str, score: float) -> ScoredChunk:
    return ScoredChunk(chunk_id, "doc", 0, 0, 4, "text", score=score)


class _Ranked:
    """A retriever returning a fixed ranking, to test fusion independently of the stores."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.calls: list[int] = []

    def search(self, query, k=10, filter=None):
        self.calls.append(k)
        return [_Found(cid, 10.0 - i) for i, cid in enumerate(self.ids[:k])]


def test_rrf_fusion_order_on_a_hand_made_case():
    # keywords: a b c   vectors: c d a  -> rrf_k=60:
    # a: 1/61 + 1/63 = .032266   c: 1/63 + 1/61 (same as a)   b: 1/62   d: 1/62
    # a and c tie on score; a's best single rank is 1 as is c's, so the chunk ID decides: a first.
    textbook = RetrievalSettings(fusion="rrf", rrf_k=60, weights={"keywords": 1.0, "vectors": 1.0})
    hits = retrieve(
        {"keywords": _Ranked(["a", "b", "c"]), "vectors": _Ranked(["c", "d", "a"])},
        "q",
        k=4,
        settings=textbook,
    ).hits
    assert [h.chunk_id for h in hits] == ["a", "c", "b", "d"]
    assert hits[0].ranks == {"keywords": 1, "vectors": 3} and hits[2].ranks == {"keywords": 2}
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 63)
    assert hits[2].score == pytest.approx(1 / 62)


def test_the_shipped_fusion_weighs_scores_and_lets_agreement_rise():
    # The measured defaults (issue 27, on segment vectors: min-max, keywords 0.4, vectors 0.6). Scores 10,
    # 9, 8 in each list scale to 1, .5, 0: v1 .6; y, second in both, .4 * .5 + .6 * .5 = .5, above keywords'
    # first (.4); each list's last 0, tied, by rank then ID.
    hits = retrieve(
        {"keywords": _Ranked(["k1", "y", "k3"]), "vectors": _Ranked(["v1", "y", "v3"])}, "q", k=5
    ).hits
    assert [h.chunk_id for h in hits] == ["v1", "y", "k1", "k3", "v3"]
    assert [h.score for h in hits] == pytest.approx([0.6, 0.5, 0.4, 0.0, 0.0])
    # the RRF measured before (rrf_k 0, vectors 0.75) stays a setting: keywords lead, agreement rises
    rrf = RetrievalSettings(fusion="rrf", rrf_k=0, weights={"keywords": 1.0, "vectors": 0.75})
    hits = retrieve(
        {"keywords": _Ranked(["k1", "y", "k3"]), "vectors": _Ranked(["v1", "y", "v3"])},
        "q",
        k=5,
        settings=rrf,
    ).hits
    assert [h.chunk_id for h in hits] == ["k1", "y", "v1", "k3", "v3"]
    assert hits[1].score == pytest.approx(1 / 2 + 0.75 / 2)


def test_rrf_rewards_agreement_over_a_single_top_rank():
    # With the textbook rrf_k 60, x is first in one list only; y is second in both: 2/62 > 1/61.
    fused = rrf_fuse(
        {"keywords": [_Found("x", 9), _Found("y", 8)], "vectors": [_Found("z", 9), _Found("y", 8)]},
        rrf_k=60,
    )
    assert [h.chunk_id for h in fused][:1] == ["y"]


def test_rrf_weights_and_k_cut():
    rankings = {"keywords": [_Found("a", 1)], "vectors": [_Found("b", 1)]}
    assert [h.chunk_id for h in rrf_fuse(rankings, weights={"keywords": 1.0, "vectors": 2.0})] == ["b", "a"]
    assert [h.chunk_id for h in rrf_fuse(rankings, k=1, weights={"keywords": 3.0})] == ["a"]


def test_hybrid_search_asks_each_retriever_for_more_candidates_than_k():
    keywords, vectors = _Ranked(["a"]), _Ranked(["b"])
    retrieve({"keywords": keywords, "vectors": vectors}, "q", k=3)
    assert keywords.calls == [20] and vectors.calls == [20]
    with pytest.raises(ValueError, match="needs a 'keywords' or 'vectors' sink"):
        retrieve({"graph": object()}, "q")  # type: ignore[dict-item]


def test_minmax_fusion_through_retrieve_scales_each_lists_scores():
    # _Ranked scores 10, 9, 8: min-max gives 1, .5, 0 in each list. keywords a b c, vectors c d a:
    # a 0.4 * 1 + 0.6 * 0 = .4; c .4 * 0 + .6 * 1 = .6; b .4 * .5 = .2; d .6 * .5 = .3
    settings = RetrievalSettings(fusion="minmax", weights={"keywords": 0.4, "vectors": 0.6})
    rankings = {"keywords": _Ranked(["a", "b", "c"]), "vectors": _Ranked(["c", "d", "a"])}
    hits = retrieve(rankings, "q", k=4, settings=settings).hits
    assert [h.chunk_id for h in hits] == ["c", "a", "d", "b"]
    assert [h.score for h in hits] == pytest.approx([0.6, 0.4, 0.3, 0.2])
    assert hits[0].ranks == {"keywords": 3, "vectors": 1} and hits[0].scores == {
        "keywords": 8.0,
        "vectors": 10.0,
    }


def test_fuse_runs_the_method_it_is_named():
    rankings = {"keywords": [_Found("a", 5), _Found("b", 1)], "vectors": [_Found("b", 0.9), _Found("a", 0.1)]}
    weights = {"keywords": 0.6, "vectors": 0.4}
    assert fuse(rankings, weights=weights, method="rrf", rrf_k=60) == rrf_fuse(
        rankings, weights=weights, rrf_k=60
    )
    for method in ("minmax", "zscore"):
        fused = fuse(rankings, weights=weights, method=method)
        assert fused == score_fuse(rankings, weights=weights, normalise=method)
        assert [h.chunk_id for h in fused] == ["a", "b"]  # keywords weigh more


def test_a_lone_or_level_list_counts_its_chunks_as_its_best():
    # BM25 finds a rare word in one chunk only: that chunk is keywords' best (1), not its last (0), so it
    # is not left to the vectors' order alone
    rankings = {
        "keywords": [_Found("rare", 3.2)],
        "vectors": [_Found("v1", 0.9), _Found("v2", 0.5), _Found("rare", 0.1)],
    }
    for method in ("minmax", "zscore"):
        fused = score_fuse(rankings, weights={"keywords": 0.4, "vectors": 0.6}, normalise=method)
        assert fused[0].chunk_id in {"rare", "v1"} and fused[0].score == pytest.approx(
            max(h.score for h in fused)
        )
    minmax = score_fuse(rankings, weights={"keywords": 0.4, "vectors": 0.6})
    assert [(h.chunk_id, h.score) for h in minmax] == [
        ("v1", pytest.approx(0.6)),
        ("rare", pytest.approx(0.4)),
        ("v2", pytest.approx(0.3)),
    ]
    level = score_fuse(
        {"keywords": [_Found("a", 1.0), _Found("b", 1.0)], "vectors": [_Found("c", 0.9), _Found("d", 0.1)]}
    )
    assert [h.score for h in level] == pytest.approx([1.0, 1.0, 1.0, 0.0])  # a, b level with vectors' best


def test_a_list_weighted_zero_takes_no_part_in_score_fusion():
    # keywords: a (10) b (9): scaled 1 and 0; vectors: c d, weighted 0. Were c counted, it would tie with b
    # at 0 and win the tie by its vector rank 1: a keywords-only weighting must give the keywords' order.
    rankings = {
        "keywords": [_Found("a", 10.0), _Found("b", 9.0)],
        "vectors": [_Found("c", 0.9), _Found("d", 0.8)],
    }
    for method in ("minmax", "zscore"):
        hits = score_fuse(rankings, k=4, weights={"keywords": 1.0, "vectors": 0.0}, normalise=method)
        assert [h.chunk_id for h in hits] == ["a", "b"], method
