"""The BM25 sink against a real SQLite file, real bm25s scoring and rank_bm25 as the reference ranking."""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from chunking.base import Span, chunks_from_spans
from chunking.models import Chunk, Document
from chunking.sentences import sentence_spans
from sinks.base import ScoredChunk
from sinks.config import SinkSettings
from sinks.keywords.analyzer import Analyzer
from sinks.keywords.bm25 import BM25Sink
from sinks.keywords.postings import CountsBM25

CORPORA = Path(__file__).parents[3] / "shared/eval/corpora"


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
def sink(tmp_path: Path):
    with BM25Sink(SinkSettings(data_dir=tmp_path)) as s:
        yield s


class CountingAnalyzer(Analyzer):
    """Counts the texts it analyses, to prove stored chunks are never analysed again."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def __call__(self, text: str) -> list[str]:
        self.texts.append(text)
        return super().__call__(text)


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


def test_store_persists_across_reopen(tmp_path: Path) -> None:
    settings = SinkSettings(data_dir=tmp_path)
    with BM25Sink(settings) as first:
        first.write(first.prepare(eval_corpus_batch()))
        before = [(h.chunk_id, h.score) for h in first.search("Valkyria tactical game")]
    assert (tmp_path / "bm25" / "bm25.sqlite").is_file()
    with BM25Sink(settings) as second:
        after = [(h.chunk_id, h.score) for h in second.search("Valkyria tactical game")]
    assert len(before) == 10
    assert after == before


def test_two_instances_on_one_file_see_each_others_writes(tmp_path: Path) -> None:
    """As two processes would: the reader's index is rebuilt when the store's revision moves."""
    with (
        BM25Sink(path=tmp_path / "shared.sqlite") as writer,
        BM25Sink(path=tmp_path / "shared.sqlite") as reader,
    ):
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
        }


def test_reader_behind_the_pruned_removal_log_reloads_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sinks.keywords.bm25.REMOVAL_LOG_REVISIONS", 2)
    with BM25Sink(path=tmp_path / "b.sqlite") as writer, BM25Sink(path=tmp_path / "b.sqlite") as reader:
        writer.write(writer.prepare([FOX, CAT]))
        assert reader.search("quick")
        writer.delete(FOX[0].document_id)  # logged at revision 2, pruned by the later writes
        for i in range(3):
            writer.upsert(*make_doc(f"extra{i}", [f"extra document {i}"]))
        assert writer._conn.execute("SELECT COUNT(*) FROM removed").fetchone()[0] == 0
        assert reader.search("quick") == []
        assert reader.stats()["last_refresh"]["loaded_rows"] == 5  # everything, not just the changes
        assert len(reader.search("extra", k=10)) == 3


def test_incremental_add_does_not_reanalyse_or_reload_existing_chunks(tmp_path: Path) -> None:
    analyzer = CountingAnalyzer()
    sink = BM25Sink(path=tmp_path / "bm25.sqlite", analyzer=analyzer)
    batch = eval_corpus_batch()
    sink.write(sink.prepare(batch))
    assert sink.search("Valkyria")  # builds the index
    old_revs = dict(sink._conn.execute("SELECT chunk_id, rev FROM chunks").fetchall())
    analyzer.texts.clear()

    sink.upsert(*FOX)
    hits = sink.search("fox Valkyria")

    # The analyzer ran over the new document's chunks and the query, nothing else.
    assert analyzer.texts == [c.content for c in FOX[1]] + ["fox Valkyria"]
    # Stored rows of other documents were not rewritten, and the index refresh loaded only the new rows.
    new_revs = dict(sink._conn.execute("SELECT chunk_id, rev FROM chunks").fetchall())
    assert {cid: new_revs[cid] for cid in old_revs} == old_revs
    assert sink.stats()["last_refresh"] | {"seconds": 0} == {
        "loaded_rows": 2,
        "dropped_rows": 0,
        "seconds": 0,
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
    assert live.stats()["last_refresh"]["dropped_rows"] > 0
    with BM25Sink(path=tmp_path / "bm25.sqlite") as fresh:
        for q in queries:
            ours = {h.chunk_id: h.score for h in live.search(q, k=1000)}
            reference = {h.chunk_id: h.score for h in fresh.search(q, k=1000)}
            assert ours.keys() == reference.keys() and ours
            for chunk_id, score in reference.items():
                assert ours[chunk_id] == pytest.approx(score, rel=1e-5)
        # Really two build paths: the live vocabulary still holds IDs of terms only deleted chunks had.
        assert live._current().n_vocab > fresh._current().n_vocab
    live.close()


def test_changed_analyzer_settings_reanalyse_stored_chunks_once(tmp_path: Path) -> None:
    with BM25Sink(SinkSettings(data_dir=tmp_path)) as stemmed:
        stemmed.write(stemmed.prepare([FOX]))
        assert stemmed.search("run")  # "running" stored as "run"
    with BM25Sink(SinkSettings(data_dir=tmp_path, bm25_stemming=False)) as unstemmed:
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


def test_ten_thousand_chunk_batch_is_one_write(tmp_path: Path) -> None:
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
    with BM25Sink(path=tmp_path / "bm25.sqlite") as sink:
        assert sink.write(sink.prepare(batch)) == 10_000
        assert sink.stats()["revision"] == 1  # one transaction, one revision
        assert len(sink.chunk_ids()) == 10_000
        assert [h.chunk_id for h in sink.search("row42x7")] == [batch[42][1][7].chunk_id]
        assert len(sink.search("sigma omega", k=50)) == 50


# -- scoring ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
def test_vectorised_index_scores_equal_stock_bm25s(tmp_path: Path, method: str) -> None:
    batch = eval_corpus_batch()
    sink = BM25Sink(path=tmp_path / "bm25.sqlite", method=method)
    sink.write(sink.prepare(batch))
    chunks = [c for _, cs in batch for c in cs]
    stock = bm25s.BM25(method=method)
    stock.index([sink.analyzer(c.content) for c in chunks], show_progress=False)
    snap = sink._current()
    assert snap is not None and snap.chunk_ids == [c.chunk_id for c in chunks]
    # The same postings in random order take CountsBM25's own sorting path.
    postings = sink._postings
    shuffle = np.random.default_rng(0).permutation(len(postings.terms))
    unsorted = CountsBM25(method=method)
    unsorted.index_counts(
        postings.terms[shuffle],
        postings.rows[shuffle],
        postings.tfs[shuffle],
        postings.doc_lens,
        snap.n_vocab,
    )
    for query in ["president congress", "game developed sega", "image hover theme settings", "war"]:
        tokens = sink.analyzer(query)
        ids = [sink._vocab[t] for t in tokens]
        expected = stock.get_scores(tokens)
        np.testing.assert_allclose(snap.retriever.get_scores_from_ids(ids), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(unsorted.get_scores_from_ids(ids), expected, rtol=1e-5, atol=1e-6)
    sink.close()


def test_top10_overlaps_rank_bm25_on_eval_corpora(sink: BM25Sink) -> None:
    batch = eval_corpus_batch()
    chunks = [c for _, cs in batch for c in cs]
    assert 300 <= len(chunks) <= 600
    sink.write(sink.prepare(batch))
    reference = BM25Okapi([sink.analyzer(c.content) for c in chunks])

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
        indexes = {r[0] for r in sink._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"chunks_rev", "removed_rev"} <= indexes and not {"chunks_gen", "removed_gen"} & indexes


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
