"""The BM25 sink on both term stores (a real SQLite file, a real PostgreSQL database), real bm25s scoring
and rank_bm25 as the reference ranking."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import pytest
import Stemmer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from rank_bm25 import BM25Okapi
from sqlalchemy import text

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.sentences import sentence_spans
from unichunk.sinks.base import InvalidRequest, ScoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, dispose_engines
from unichunk.sinks.keywords.analyzer import Analyzer
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.sinks.keywords.term_store import TermStore

CORPORA = Path(os.environ.get("UNICHUNK_EVAL_DIR") or Path(__file__).parents[3] / "shared/eval") / "corpora"


def make_doc(source_id: str, pieces: Sequence[str]) -> tuple[Document, list[Chunk]]:
    """A document whose chunks are exactly `pieces`, joined by blank lines, with real offsets and IDs."""
    doc = Document(text="\n\n".join(pieces), source_system="test", source_id=source_id)
    spans, start = [], 0
    for i, piece in enumerate(pieces):
        spans.append(Span(start, start + len(piece), len(piece.split()), ("Top", f"Section {i}")))
        start += len(piece) + 2
    return doc, chunks_from_spans(doc, spans)


def eval_corpus_batch(sentences_per_chunk: int = 4) -> list[tuple[Document, list[Chunk]]]:
    """The shared eval corpora cut into windows of sentences (~430 chunks)."""
    if not CORPORA.is_dir():
        pytest.skip(f"shared eval corpora not found at {CORPORA}")
    batch = []
    for path in sorted(CORPORA.glob("*.md")):
        doc = Document(text=path.read_text(encoding="utf-8"), source_system="eval", source_id=path.name)
        spans = sentence_spans(doc.text)
        windows = [
            Span(spans[i][0], spans[min(i + sentences_per_chunk, len(spans)) - 1][1], token_count=1)
            for i in range(0, len(spans), sentences_per_chunk)
        ]
        chunks = chunks_from_spans(doc, windows)
        batch.append((doc, chunks))
    return batch


@pytest.fixture
def sink(keyword_settings: SinkSettings):
    with BM25Sink(keyword_settings) as s:
        yield s


def revs(sink: BM25Sink) -> dict[str, int]:
    """chunk_id -> the revision that last wrote its row, read from the store's own table."""
    with sink.store.db.read() as conn:
        return {r[0]: int(r[1]) for r in conn.execute(text("SELECT chunk_id, rev FROM chunks"))}


class CountingAnalyzer(Analyzer):
    """Counts the texts it analyses, to prove stored chunks are never analysed again."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def analyze_many(self, texts):  # type: ignore[no-untyped-def]
        texts = list(texts)
        self.texts += texts
        return super().analyze_many(texts)

    def iter_counts(self, texts):  # type: ignore[no-untyped-def]
        texts = list(texts)
        self.texts += texts
        return super().iter_counts(texts)


FOX = make_doc(
    "fox", ["The quick brown fox jumps over the lazy dog.", "Foxes are running through the forest."]
)
CAT = make_doc("cat", ["A cat sleeps on the warm windowsill.", "Cats and dogs rarely share a bowl."])


# -- analyzer ------------------------------------------------------------------------------------------


def test_analyzer_normalises_case_width_and_punctuation() -> None:
    plain = Analyzer(stemming=False, stopwords=False)
    assert plain("ＦＯＸ Straße e-mail snake_case (x*y):z") == [
        "fox",
        "strasse",
        "e",
        "mail",
        "snake",
        "case",
        "x",
        "y",
        "z",
    ]
    assert plain("Ünïcödé café") == ["ünïcödé", "café"]


def test_analyzer_stopwords_and_stemming_follow_settings() -> None:
    assert Analyzer()("The foxes are running") == ["fox", "run"]
    assert Analyzer(stemming=False)("The foxes are running") == ["foxes", "running"]
    assert Analyzer(stopwords=False)("The foxes") == ["the", "fox"]


def test_analyzer_cuts_cjk_runs_into_bigrams() -> None:
    assert Analyzer()("東京タワー is tall") == ["東京", "京タ", "タワ", "ワー", "tall"]
    assert Analyzer()("猫") == ["猫"]
    assert Analyzer()("한국어 텍스트") == ["한국어", "텍스트"]  # Hangul is spaced: whole words


def _whole_text_terms(analyzer: Analyzer, text: str) -> list[str]:
    """The analyzer before batching, as the spec: the whole text's words, then stopwords, then stems."""
    words = [w for w in analyzer.words(text) if w not in analyzer.stopwords]
    return Stemmer.Stemmer(analyzer.language).stemWords(words) if analyzer.stemming and words else words


# Characters where splitting on whitespace first could go wrong if it could: spaces NFKC makes (U+00A8,
# U+2000, U+3000), marks that join the letter before them, CJK, a full-width letter, NUL, punctuation.
_TRICKY = " \t\n\u00a0\u00a8\u2000\u3000\u0301\u0308e\u0065\u00e9a\u6771\u4eac\u30bf\uff26\x00_-.'"
TEXTS = st.lists(
    st.text(st.sampled_from(_TRICKY) | st.characters(exclude_categories=["Cs"]), max_size=60), max_size=6
)


@settings(max_examples=100, deadline=None)
@given(texts=TEXTS)
def test_batched_analysis_equals_whole_text_analysis(texts: list[str]) -> None:
    for analyzer in (Analyzer(), Analyzer(stemming=False, stopwords=False)):
        expected = [_whole_text_terms(analyzer, t) for t in texts]
        assert analyzer.analyze_many(texts) == expected
        assert [analyzer(t) for t in texts] == expected
        # Same counts in the same order (order of first use): the stored row of a text never changes.
        counted = analyzer.count_many(texts)
        assert [list(c.items()) for c in counted] == [list(Counter(terms).items()) for terms in expected]


# -- sink behaviour --------------------------------------------------------------------------------------


def test_prepare_writes_nothing_and_write_stores_every_chunk(sink: BM25Sink) -> None:
    prepared = sink.prepare([FOX, CAT])
    assert sink.chunk_ids() == set()
    assert sink.write(prepared) == 4
    assert sink.chunk_ids() == {c.chunk_id for c in FOX[1] + CAT[1]}
    assert sink.chunk_ids(CAT[0].document_id) == {c.chunk_id for c in CAT[1]}
    stats = sink.stats()
    assert (stats["chunks"], stats["documents"]) == (4, 2)


def test_search_returns_chunks_with_offsets_and_bm25_order(sink: BM25Sink) -> None:
    sink.write(sink.prepare([FOX, CAT]))
    hits = sink.search("fox running")
    assert [h.chunk_id for h in hits] == [FOX[1][1].chunk_id, FOX[1][0].chunk_id]  # both terms beat one
    top = hits[0]
    assert isinstance(top, ScoredChunk) and top.score > hits[1].score > 0
    assert FOX[0].text[top.start_char : top.end_char] == top.content
    assert top.heading_chain == ("Top", "Section 1")
    assert sink.search("zebra") == []


def test_filter_restricts_to_documents_and_rejects_unknown_keys(sink: BM25Sink) -> None:
    sink.write(sink.prepare([FOX, CAT]))
    assert {h.document_id for h in sink.search("dog")} == {FOX[0].document_id, CAT[0].document_id}
    only_cat = sink.search("dog", filter={"document_id": CAT[0].document_id})
    assert [h.chunk_id for h in only_cat] == [CAT[1][1].chunk_id]
    assert len(sink.search("dog", filter={"document_id": [FOX[0].document_id, CAT[0].document_id]})) == 2
    assert sink.search("dog", filter={"document_id": "absent"}) == []
    with pytest.raises(ValueError, match="unsupported"):
        sink.search("dog", filter={"source": "x"})


@pytest.mark.parametrize(
    "query",
    ['"', "fox AND (dog OR NOT cat)", "fox*", "title:fox", "-fox +dog", "((((", "\\", "'; DROP TABLE chunks; --",
     "a" * 5000, "🦊", "\x00", "   ", ""],
)  # fmt: skip
def test_special_character_queries_never_raise(sink: BM25Sink, query: str) -> None:
    sink.write(sink.prepare([FOX, CAT]))
    hits = sink.search(query)
    assert all(h.score > 0 for h in hits)
    if "fox" in query:
        assert FOX[1][0].chunk_id in {h.chunk_id for h in hits}
    if not Analyzer()(query):
        assert hits == []
    assert len(sink.chunk_ids()) == 4


def test_empty_store_and_empty_query_return_nothing(sink: BM25Sink) -> None:
    assert sink.search("fox") == []
    sink.write(sink.prepare([FOX]))
    assert sink.search("") == []
    assert sink.search("the and of") == []  # stopwords only
    assert sink.search("fox", k=0) == []


def test_unicode_and_cjk_content_is_searchable(sink: BM25Sink) -> None:
    doc = make_doc("cjk", ["東京タワーは高いです。", "Die Straße ist lang.", "Ｆｕｌｌｗｉｄｔｈ letters"])
    sink.write(sink.prepare([doc]))
    assert [h.chunk_id for h in sink.search("東京")] == [doc[1][0].chunk_id]
    assert [h.chunk_id for h in sink.search("タワー")] == [doc[1][0].chunk_id]
    assert [h.chunk_id for h in sink.search("STRASSE")] == [doc[1][1].chunk_id]
    assert [h.chunk_id for h in sink.search("fullwidth")] == [doc[1][2].chunk_id]


def test_writing_the_same_batch_twice_keeps_one_copy_and_revision(sink: BM25Sink) -> None:
    sink.write(sink.prepare([FOX, CAT]))
    revision = sink.stats()["revision"]
    sink.write(sink.prepare([FOX, CAT]))
    assert sink.stats()["chunks"] == 4
    assert sink.stats()["revision"] == revision  # nothing changed: the index stays fresh
    assert [h.chunk_id for h in sink.search("quick")] == [FOX[1][0].chunk_id]


def test_changed_document_replaces_its_chunks(sink: BM25Sink) -> None:
    sink.write(sink.prepare([FOX, CAT]))
    assert sink.search("forest")
    new_fox = make_doc("fox", ["The quick brown fox jumps over a sleeping hedgehog."])
    assert new_fox[0].document_id == FOX[0].document_id
    sink.upsert(*new_fox)
    assert sink.chunk_ids(FOX[0].document_id) == {new_fox[1][0].chunk_id}
    assert sink.search("forest") == []
    assert [h.chunk_id for h in sink.search("hedgehog")] == [new_fox[1][0].chunk_id]
    assert sink.chunk_ids(CAT[0].document_id) == {c.chunk_id for c in CAT[1]}
    sink.write(sink.prepare([(new_fox[0], [])]))  # a document with no chunks keeps none
    assert sink.chunk_ids(FOX[0].document_id) == set()


def test_delete_removes_document_from_results(sink: BM25Sink) -> None:
    sink.write(sink.prepare([FOX, CAT]))
    assert {h.document_id for h in sink.search("dog")} == {FOX[0].document_id, CAT[0].document_id}
    assert sink.delete(FOX[0].document_id) == 2
    assert {h.document_id for h in sink.search("dog")} == {CAT[0].document_id}
    assert sink.search("fox") == []
    assert sink.delete(FOX[0].document_id) == 0
    assert sink.chunk_ids() == {c.chunk_id for c in CAT[1]}


def test_store_persists_across_reopen(keyword_settings: SinkSettings) -> None:
    settings = keyword_settings
    with BM25Sink(settings) as first:
        first.write(first.prepare(eval_corpus_batch()))
        before = [(h.chunk_id, h.score) for h in first.search("Valkyria tactical game")]
    # Server mode keeps nothing on disk; the embedded store is its file.
    assert (settings.bm25_path / "bm25.sqlite").is_file() == (settings.database_url is None)
    with BM25Sink(settings) as second:
        after = [(h.chunk_id, h.score) for h in second.search("Valkyria tactical game")]
    assert len(before) == 10
    assert after == before


def test_two_instances_on_one_store_see_each_others_writes(keyword_settings: SinkSettings) -> None:
    """As two processes would: the reader's index is rebuilt when the store's revision moves."""
    with BM25Sink(keyword_settings) as writer, BM25Sink(keyword_settings) as reader:
        writer.write(writer.prepare([FOX]))
        assert [h.chunk_id for h in reader.search("quick")] == [FOX[1][0].chunk_id]
        writer.upsert(*CAT)
        assert [h.chunk_id for h in reader.search("windowsill")] == [CAT[1][0].chunk_id]
        writer.delete(FOX[0].document_id)
        assert reader.search("fox") == []
        assert reader.stats()["last_refresh"] | {"seconds": 0} == {
            "loaded_rows": 0,
            "dropped_rows": 2,
            "seconds": 0,
            "from_saved_index": 0,
        }


def test_reader_behind_the_pruned_removal_log_reloads_in_full(
    keyword_settings: SinkSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("unichunk.sinks.keywords.term_store.REMOVAL_LOG_REVISIONS", 2)
    with BM25Sink(keyword_settings) as writer, BM25Sink(keyword_settings) as reader:
        writer.write(writer.prepare([FOX, CAT]))
        assert reader.search("quick")
        writer.delete(FOX[0].document_id)  # logged at revision 2, pruned by the later writes
        for i in range(3):
            writer.upsert(*make_doc(f"extra{i}", [f"extra document {i}"]))
        with writer.store.db.read() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM removed")).scalar() == 0
        assert reader.search("quick") == []
        assert reader.stats()["last_refresh"]["loaded_rows"] == 5  # everything, not just the changes
        assert len(reader.search("extra", k=10)) == 3


def test_incremental_add_does_not_reanalyse_or_reload_existing_chunks(keyword_settings: SinkSettings) -> None:
    analyzer = CountingAnalyzer()
    sink = BM25Sink(keyword_settings, analyzer=analyzer)
    batch = eval_corpus_batch()
    sink.write(sink.prepare(batch))
    assert sink.search("Valkyria")  # builds the index
    old_revs = revs(sink)
    analyzer.texts.clear()

    sink.upsert(*FOX)
    hits = sink.search("fox Valkyria")

    # The analyzer ran over the new document's chunks and the query, nothing else.
    assert analyzer.texts == [c.embed_text for c in FOX[1]] + ["fox Valkyria"]
    # Stored rows of other documents were not rewritten, and the index refresh loaded only the new rows.
    new_revs = revs(sink)
    assert {cid: new_revs[cid] for cid in old_revs} == old_revs
    assert sink.stats()["last_refresh"] | {"seconds": 0} == {
        "loaded_rows": 2,
        "dropped_rows": 0,
        "seconds": 0,
        "from_saved_index": 0,
    }
    assert FOX[1][0].chunk_id in {h.chunk_id for h in hits}
    assert sink.stats()["indexed_revision"] == sink.stats()["revision"]
    sink.close()


def test_incremental_updates_score_exactly_like_a_fresh_index(tmp_path: Path) -> None:
    """Adds, replacements and deletes patched into the live index give the scores of a cold rebuild."""
    batch = eval_corpus_batch()
    live = BM25Sink(path=tmp_path / "bm25.sqlite")
    live.write(live.prepare(batch[:2]))
    queries = ["president war congress", "game sega", "theme image", "fox running hedgehog"]
    for q in queries:
        live.search(q)
    live.upsert(*batch[2])  # add a document
    live.search("x")
    live.upsert(*FOX)
    live.search("x")
    live.upsert(*make_doc("fox", ["The quick brown fox meets a hedgehog.", "War and peace.", "Sega game."]))
    live.search("x")
    live.delete(batch[0][0].document_id)
    live.upsert(batch[0][0], batch[0][1][:10])  # back, shorter
    live.search("x")
    assert live.stats()["last_refresh"]["dropped_rows"] > 0
    (tmp_path / "bm25.index.npz").unlink()  # the live sink saved its index: this one must rebuild cold
    with BM25Sink(path=tmp_path / "bm25.sqlite") as fresh:
        fresh.search("x")
        assert fresh.stats()["last_refresh"]["from_saved_index"] == 0
        for q in queries:
            ours = {h.chunk_id: h.score for h in live.search(q, k=1000)}
            reference = {h.chunk_id: h.score for h in fresh.search(q, k=1000)}
            assert ours.keys() == reference.keys() and ours
            for chunk_id, score in reference.items():
                assert ours[chunk_id] == pytest.approx(score, rel=1e-5)
        # Really two build paths: the live vocabulary still holds IDs of terms only deleted chunks had.
        assert live._current().n_vocab > fresh._current().n_vocab
    live.close()


def test_changed_analyzer_settings_reanalyse_stored_chunks_once(keyword_settings: SinkSettings) -> None:
    with BM25Sink(keyword_settings) as stemmed:
        stemmed.write(stemmed.prepare([FOX]))
        assert stemmed.search("run")  # "running" stored as "run"
    with BM25Sink(keyword_settings.model_copy(update={"bm25_stemming": False})) as unstemmed:
        assert unstemmed.search("run") == []
        assert [h.chunk_id for h in unstemmed.search("running")] == [FOX[1][1].chunk_id]


def test_concurrent_writes_and_searches_from_threads(sink: BM25Sink) -> None:
    docs = [
        make_doc(f"t{i}", [f"thread {i} writes about apples", f"and pears number {i}"]) for i in range(20)
    ]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            sink.upsert(*docs[i])
            sink.search("apples pears")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(sink.chunk_ids()) == 40
    assert len(sink.search("apples", k=100)) == 20


class StatementsAlwaysDecide(TermStore):
    """The store as it was before the count shortcut: the stale-row statements run for every batch."""

    def _may_hold_stale(self, conn, rows, keep):  # type: ignore[no-untyped-def]
        return True


def _store_state(store: TermStore) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
    with store.db.read() as conn:
        chunks = conn.execute(text("SELECT chunk_id, document_id, terms, rev FROM chunks ORDER BY 1")).all()
        removed = conn.execute(text("SELECT chunk_id, rev FROM removed ORDER BY 1, 2")).all()
    return [tuple(r) for r in chunks], [tuple(r) for r in removed], store.revision()


# One write: documents (from a few) each keeping chunk IDs (from a few, so IDs move between documents,
# repeat and come back), and the rows written: usually the kept chunks, sometimes others or fewer.
_DOCS, _IDS = st.sampled_from("abc"), st.sampled_from(["c1", "c2", "c3", "c4", "c5"])
_WRITES = st.lists(
    st.tuples(
        st.dictionaries(_DOCS, st.lists(_IDS, max_size=4), max_size=3),
        st.lists(st.tuples(_IDS, _DOCS), max_size=3),  # extra rows, not (necessarily) kept
        st.booleans(),  # drop the last kept row from what is written
        st.integers(0, 2),  # the terms each row carries this time (so a row may or may not change)
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(writes=_WRITES)
def test_stale_rows_are_removed_exactly_as_without_the_count_shortcut(
    writes: list[tuple[dict[str, list[str]], list[tuple[str, str]], bool, int]], tmp_path_factory
) -> None:
    """The count that skips the stale-row statements changes nothing: the same rows, removal log and
    revisions as a store that always runs them, whatever the batches (IDs moving between documents,
    repeated, written without being kept, kept without being written)."""
    tmp = tmp_path_factory.mktemp("stores")
    stores = [
        cls(Database.sqlite(tmp / f"{cls.__name__}.sqlite")) for cls in (TermStore, StatementsAlwaysDecide)
    ]
    for store in stores:
        store.open("sig")
    for keep, extra, drop_last, version in writes:
        kept = [(c, doc) for doc, chunk_ids in keep.items() for c in chunk_ids]
        written = [*kept[: len(kept) - 1 if drop_last else None], *extra]
        rows = [
            (c, doc, 0, 0, 1, f"{c} text", "[]", f"t{version}", b"\x01\x00\x00\x00", 1) for c, doc in written
        ]
        for store in stores:
            store.replace(rows, keep)
        assert _store_state(stores[0]) == _store_state(stores[1])
    for store in stores:
        store.db.engine.dispose()


def test_ten_thousand_chunk_batch_is_one_write(keyword_settings: SinkSettings) -> None:
    rng = random.Random(3)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "omicron",
        "sigma",
        "omega",
    ]
    batch = [
        make_doc(f"bulk{d}", [f"row{d}x{i} " + " ".join(rng.choices(words, k=12)) for i in range(100)])
        for d in range(100)
    ]
    with BM25Sink(keyword_settings) as sink:
        assert sink.write(sink.prepare(batch)) == 10_000
        assert sink.stats()["revision"] == 1  # one transaction, one revision
        assert len(sink.chunk_ids()) == 10_000
        assert [h.chunk_id for h in sink.search("row42x7")] == [batch[42][1][7].chunk_id]
        assert len(sink.search("sigma omega", k=50)) == 50


# -- scoring ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
def test_query_time_scores_equal_stock_bm25s(tmp_path: Path, method: str) -> None:
    batch = eval_corpus_batch()
    sink = BM25Sink(path=tmp_path / "bm25.sqlite", method=method)
    sink.write(sink.prepare(batch))
    chunks = [c for _, cs in batch for c in cs]
    stock = bm25s.BM25(method=method, k1=sink.k1, b=sink.b)  # the sink's defaults, not bm25s'
    stock.index([sink.analyzer(c.content) for c in chunks], show_progress=False)
    snap = sink._current()
    assert snap is not None and snap.chunk_ids == [c.chunk_id for c in chunks]
    for query in ["president congress", "game developed sega", "image hover theme settings", "war war"]:
        tokens = sink.analyzer(query)
        ids = [sink._vocab[t] for t in tokens]
        np.testing.assert_allclose(snap.scores(ids), stock.get_scores(tokens), rtol=1e-5, atol=1e-6)
    sink.close()


@pytest.mark.parametrize("merge_fraction", [0.0, 1e9])  # merge after every change / never
def test_segments_and_dead_rows_score_like_one_fresh_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, merge_fraction: float
) -> None:
    """Random adds, rewrites and deletes, each followed by a query (so each is its own refresh): the live
    index, whether it merged its segments every time or never, scores exactly as a cold one."""
    monkeypatch.setattr("unichunk.sinks.keywords.postings.MERGE_FRACTION", merge_fraction)
    monkeypatch.setattr("unichunk.sinks.keywords.postings.MAX_SEGMENTS", 10**9 if merge_fraction else 0)
    monkeypatch.setattr("unichunk.sinks.keywords.bm25.RESAVE_FRACTION", 1e9)  # saving merges too
    rng = random.Random(17)
    docs = _sentences_batch(12)
    live = BM25Sink(path=tmp_path / "bm25.sqlite")
    for step in range(30):
        doc, chunks = rng.choice(docs)
        action = rng.random()
        if action < 0.5:
            live.upsert(doc, chunks)
        elif action < 0.8:
            live.upsert(doc, chunks[: rng.randint(0, len(chunks))])
        else:
            live.delete(doc.document_id)
        live.search(f"alpha {step}")
    snap = live._current()
    assert (len(snap.segments) == 1) == (merge_fraction == 0.0)
    assert (snap.n_live == len(snap.chunk_ids)) == (merge_fraction == 0.0)  # dead rows kept till a merge
    (tmp_path / "bm25.index.npz").unlink(missing_ok=True)
    with BM25Sink(path=tmp_path / "bm25.sqlite") as cold:
        for query in ["alpha", "beta gamma gamma", "omega doc3x1", "kappa sigma theta"]:
            ours, fresh = _scores(live, query), _scores(cold, query)
            assert ours.keys() == fresh.keys()
            assert all(ours[c] == pytest.approx(v, rel=1e-5) for c, v in fresh.items())
    live.close()


def test_top10_overlaps_rank_bm25_on_eval_corpora(sink: BM25Sink) -> None:
    batch = eval_corpus_batch()
    chunks = [c for _, cs in batch for c in cs]
    assert 300 <= len(chunks) <= 600
    sink.write(sink.prepare(batch))
    reference = BM25Okapi([sink.analyzer(c.content) for c in chunks], k1=sink.k1, b=sink.b)

    rng = random.Random(11)
    queries = [
        "Valkyria Chronicles tactical role playing game",
        "secondary product image hover collection pages",
        "inflation lower costs for families",
        "Ukraine Russia Putin sanctions",
        "Franklin Roosevelt address the nation",
        "infrastructure roads bridges broadband",
        "cancer research moonshot",
        "hurricane storm damage",
        "album released single chart",
        "Shopify theme settings customize",
    ]
    for _ in range(20):  # plus words sampled from random chunks
        words = [w for w in Analyzer(stemming=False).words(rng.choice(chunks).content) if len(w) > 3]
        queries.append(" ".join(rng.sample(words, min(3, len(words)))))

    overlaps = []
    for query in queries:
        ours = {h.chunk_id for h in sink.search(query, k=10)}
        scores = reference.get_scores(sink.analyzer(query))
        theirs = {chunks[i].chunk_id for i in np.argsort(-scores, kind="stable")[:10] if scores[i] > 0}
        assert theirs, f"query {query!r} matches nothing; pick queries from the corpus"
        overlaps.append(len(ours & theirs) / max(len(ours), len(theirs)))
    assert len(overlaps) == 30
    assert float(np.mean(overlaps)) >= 0.9, overlaps


def test_a_store_from_before_the_revision_rename_opens_and_keeps_its_rows(tmp_path: Path) -> None:
    """The write counter used to be called `generation`/`gen`: such a store is renamed in place on open."""
    path = tmp_path / "old.sqlite"
    with BM25Sink(path=path) as sink:
        sink.write(sink.prepare([FOX, CAT]))
        revision = sink.stats()["revision"]
    conn = sqlite3.connect(path)
    for table, new, old in (
        ("state", "revision", "generation"),
        ("chunks", "rev", "gen"),
        ("removed", "rev", "gen"),
    ):
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN {new} TO {old}")
    conn.executescript(
        "DROP INDEX chunks_rev; DROP INDEX removed_rev;"
        "CREATE INDEX chunks_gen ON chunks (gen); CREATE INDEX removed_gen ON removed (gen);"
    )
    conn.close()
    with BM25Sink(path=path) as sink:
        assert sink.stats()["revision"] == revision and sink.stats()["chunks"] == 4
        assert [h.chunk_id for h in sink.search("quick")] == [FOX[1][0].chunk_id]
        sink.delete(FOX[0].document_id)
        assert sink.search("quick") == [] and sink.stats()["revision"] == revision + 1
        with sink.store.db.read() as conn:
            indexes = {
                r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'index'")
            }
    assert {"chunks_rev", "removed_rev"} <= indexes and not {"chunks_gen", "removed_gen"} & indexes


# -- several writers, one reader -----------------------------------------------------------------------


def _write_documents(settings: SinkSettings, writer: int, rounds: int, start: Any) -> None:
    """One writer process: its own documents, each written, some rewritten shorter and some deleted, one
    transaction per call; all writers start together (so their transactions interleave)."""
    with BM25Sink(settings) as sink:
        start.wait(timeout=120)
        for i in range(rounds):
            name = f"w{writer}d{i}"
            sink.upsert(*make_doc(name, [f"{name} shared apples {i}", f"{name} pears {writer}"]))
            if i % 3 == 1:
                sink.upsert(*make_doc(name, [f"{name} shared apples rewritten"]))
            if i % 5 == 4:
                sink.delete(make_doc(name, ["x"])[0].document_id)


ROUNDS = 20


def test_several_writer_processes_and_a_following_reader_miss_no_change(
    keyword_settings: SinkSettings,
) -> None:
    """Writers in three processes commit at once; a reader refreshing all along (only ever from the
    change log, never reloading in full) ends with exactly the store's chunks and a cold index's scores.
    A revision committed out of order, or a change the log lost, would leave it short or stale."""
    import multiprocessing

    with BM25Sink(keyword_settings) as reader:
        reader.upsert(*make_doc("seed", ["seed shared apples"]))
        assert reader.search("apples")
        revisions: set[int] = set()
        context = multiprocessing.get_context("spawn")
        start = context.Barrier(4)
        writers = [
            context.Process(target=_write_documents, args=(keyword_settings, w, ROUNDS, start))
            for w in range(3)
        ]
        for process in writers:
            process.start()
        start.wait(timeout=120)
        while any(p.is_alive() for p in writers):
            snapshot = reader._current()
            assert snapshot is not None
            revisions.add(snapshot.revision)
            assert reader.stats()["last_refresh"].get("from_saved_index", 0) == 0
        for process in writers:
            process.join()
            assert process.exitcode == 0
        snapshot = reader._current()
        assert len(revisions) >= 3  # it really followed the writers, refresh after refresh
        assert sorted(snapshot.live_chunk_ids) == sorted(reader.chunk_ids())
        kept = [i for i in range(ROUNDS) if i % 5 != 4]  # two chunks each, one if rewritten
        assert snapshot.n_live == 1 + 3 * sum(1 if i % 3 == 1 else 2 for i in kept)
        with BM25Sink(keyword_settings) as cold:
            if cold._saved_path is not None:
                cold._saved_path.unlink(missing_ok=True)
            for query in ("shared apples", "pears rewritten", "w1d7"):
                ours = {h.chunk_id: h.score for h in reader.search(query, k=500)}
                fresh = {h.chunk_id: h.score for h in cold.search(query, k=500)}
                assert ours.keys() == fresh.keys()
                assert all(ours[c] == pytest.approx(s, rel=1e-5) for c, s in fresh.items())


# -- the saved index (embedded) and server mode ------------------------------------------------------------


def _sentences_batch(n_docs: int, prefix: str = "doc") -> list[tuple[Document, list[Chunk]]]:
    rng = random.Random(n_docs)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "sigma", "omega"]
    return [
        make_doc(f"{prefix}{d}", [f"{prefix}{d}x{i} " + " ".join(rng.choices(words, k=9)) for i in range(5)])
        for d in range(n_docs)
    ]


def _scores(sink: BM25Sink, query: str) -> dict[str, float]:
    return {h.chunk_id: h.score for h in sink.search(query, k=1000)}


def test_reopen_loads_the_saved_index_and_reads_only_later_changes(tmp_path: Path) -> None:
    settings = SinkSettings(data_dir=tmp_path)
    saved = settings.bm25_path / "bm25.index.npz"
    with BM25Sink(settings) as first:
        first.write(first.prepare(_sentences_batch(40)))
        assert first.search("alpha")  # the first index is built from the store, then saved
    assert saved.is_file()
    with BM25Sink(settings) as writer:  # changes after the save: one document added, one deleted
        writer.upsert(*FOX)
        writer.delete(make_doc("doc3", ["x"])[0].document_id)
    analyzer = CountingAnalyzer()
    with BM25Sink(settings, analyzer=analyzer) as reopened:
        resumed = _scores(reopened, "alpha fox")
        assert reopened.stats()["last_refresh"] | {"seconds": 0} == {
            "loaded_rows": 2,  # FOX's chunks, nothing else read from the store's rows
            "dropped_rows": 5,  # doc3's
            "seconds": 0,
            "from_saved_index": 1,
        }
        assert analyzer.texts == ["alpha fox"]  # no stored chunk analysed again
    saved.unlink()
    with BM25Sink(settings) as cold:
        assert _scores(cold, "alpha fox") == pytest.approx(resumed, rel=1e-5)
        assert cold.stats()["last_refresh"]["from_saved_index"] == 0
        assert cold.stats()["last_refresh"]["loaded_rows"] == 40 * 5 - 5 + 2


def test_a_damaged_or_foreign_saved_index_is_rebuilt_from_the_store(tmp_path: Path) -> None:
    ours, other = SinkSettings(data_dir=tmp_path / "ours"), SinkSettings(data_dir=tmp_path / "other")
    with BM25Sink(ours) as sink, BM25Sink(other) as foreign:
        sink.write(sink.prepare(_sentences_batch(10)))
        foreign.write(foreign.prepare(_sentences_batch(12, prefix="other")))
        expected = _scores(sink, "gamma omega")
        foreign.search("gamma")  # saves the foreign store's index (same revision, 1, as ours)
    ours_file, foreign_file = (s.bm25_path / "bm25.index.npz" for s in (ours, other))
    for damage in (b"not an index", foreign_file.read_bytes()):
        ours_file.write_bytes(damage)
        with BM25Sink(ours) as reopened:
            assert _scores(reopened, "gamma omega") == pytest.approx(expected, rel=1e-5)
            assert reopened.stats()["last_refresh"]["from_saved_index"] == 0
            assert reopened.stats()["last_refresh"]["loaded_rows"] == 50


def test_server_mode_keeps_nothing_on_disk_and_drop_removes_the_schema(
    database_url: str, tmp_path: Path
) -> None:
    keyword_settings = SinkSettings(data_dir=tmp_path / "data", database_url=SecretStr(database_url))
    live = BM25Sink(keyword_settings.for_generation("g1"))
    retired = BM25Sink(keyword_settings.for_generation("g2"))
    for sink in (live, retired):
        sink.upsert(*FOX)
        assert sink.search("fox")
    assert not keyword_settings.data_dir.exists() or not any(keyword_settings.data_dir.rglob("*"))
    assert (live.store.db.schema, retired.store.db.schema) == (
        "unichunk_keywords__g1",
        "unichunk_keywords__g2",
    )
    retired.drop()
    assert not retired.store.db.has_table("chunks") and not retired.store.db.has_table("state")
    assert [h.chunk_id for h in live.search("quick")] == [FOX[1][0].chunk_id]
    dispose_engines()  # before the per-test database is dropped


def test_headings_and_content_with_nul_round_trip_and_ids_with_nul_are_refused_on_postgresql(
    sink: BM25Sink,
) -> None:
    doc = Document(text="probe \x00 nul", source_system="test", source_id="nul")
    chunks = chunks_from_spans(doc, [Span(0, len(doc.text), 3, ("Head\x00ing", "é\x01"))])
    sink.upsert(doc, chunks)
    (hit,) = sink.search("probe")
    assert (hit.content, hit.heading_chain) == ("probe \x00 nul", ("Head\x00ing", "é\x01"))
    odd = Document(document_id="odd\x00id", text="probe odd")
    odd_chunks = chunks_from_spans(odd, [Span(0, 9, 2)])
    if sink.store.db.dialect == "postgresql":
        with pytest.raises(InvalidRequest, match="NUL"):
            sink.prepare([(odd, odd_chunks)])
    else:
        sink.upsert(odd, odd_chunks)
        assert odd_chunks[0].chunk_id in sink.chunk_ids()


def _backend_pid(sink: BM25Sink) -> int:
    """The PostgreSQL server process behind the sink's per-query connection."""
    return int(sink.store._query(lambda c: c.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()))


def _search_in_fork(sink: BM25Sink) -> tuple[list[str], int, int]:
    """Fork; the child searches and reports (hits, its backend's PID) through a pipe, then leaves with
    `os._exit` (a fork of a process that ran Prefect flows must not run the interpreter's exit machinery,
    whose inherited services end it with status 1). Returns what the child found and its exit status."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        status = 1
        try:
            found = ([h.chunk_id for h in sink.search("quick")], _backend_pid(sink))
            os.write(write, json.dumps(found).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        reported = pipe.read()
    _, status = os.waitpid(pid, 0)
    hits, child_pid = json.loads(reported or b"[[], 0]")
    return hits, child_pid, os.waitstatus_to_exitcode(status)


def test_a_forked_child_searches_on_connections_of_its_own(database_url: str, tmp_path: Path) -> None:
    """The per-query pool (PostgreSQL) is not shared across fork: the child opens its own connection (a
    shared socket would interleave two processes' protocol messages), and the parent keeps working."""
    settings = SinkSettings(data_dir=tmp_path / "data", database_url=SecretStr(database_url))
    with BM25Sink(settings) as sink:
        sink.upsert(*FOX)
        expected = [FOX[1][0].chunk_id]
        assert [h.chunk_id for h in sink.search("quick")] == expected  # the parent's pool is open
        parent_pid = _backend_pid(sink)
        hits, child_pid, exit_code = _search_in_fork(sink)
        assert (hits, exit_code) == (expected, 0) and child_pid not in (0, parent_pid)
        for _ in range(3):
            assert [h.chunk_id for h in sink.search("quick")] == expected
        assert _backend_pid(sink) == parent_pid
    dispose_engines()


def test_heading_chain_is_searchable_but_not_stored_as_content(tmp_path: Path) -> None:
    """BM25 reads what the vector is computed from (`Chunk.embed_text`: heading chain + content); the
    stored text stays the content, exact to its offsets."""
    text = "Logs every passing vessel in a book."
    doc = Document(text=text, source_system="test", source_id="keeper.md")
    (chunk,) = chunks_from_spans(doc, [Span(0, len(text), None, ("Lighthouse keeping",))])
    with BM25Sink(SinkSettings(data_dir=tmp_path)) as sink:
        sink.upsert(doc, [chunk])
        (hit,) = sink.search("lighthouse")
        assert hit.chunk_id == chunk.chunk_id and hit.content == text
        assert hit.heading_chain == ("Lighthouse keeping",)
    # A store indexed from content alone (an earlier release) is re-analysed once when opened.
    with sqlite3.connect(tmp_path / "bm25" / "bm25.sqlite") as conn:
        conn.execute("UPDATE state SET analyzer = ?", (Analyzer().signature,))
        conn.execute("UPDATE chunks SET terms = 'log everi pass vessel book', tfs = ?, doc_len = 5",
                     (np.ones(5, dtype="<u4").tobytes(),))  # fmt: skip
    with BM25Sink(SinkSettings(data_dir=tmp_path)) as reopened:
        assert [h.chunk_id for h in reopened.search("lighthouse")] == [chunk.chunk_id]
        assert reopened.stats()["analyzer"].endswith("|headings+content")
