"""Sources, the status table, the chunk store and RRF fusion: the pipeline parts that need no server."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import pytest

from chunking.base import Span, chunks_from_spans
from chunking.ids import derive_document_id
from chunking.models import Chunk, Document
from sinks.hybrid import hybrid_search, rrf_fuse
from tasks.chunk_store import ChunkKey, ChunkStore
from tasks.sources import DirectorySource, PathsSource
from tasks.status import StatusStore, failed_fields, processed_fields, processing_fields


def _tree(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --- sources ----------------------------------------------------------------------------------------


def test_directory_source_lists_matching_files_with_posix_relative_ids(tmp_path):
    _tree(
        tmp_path, {"a.md": "a", "sub/b.TXT": "b", "sub/deeper/c.html": "c", "skip.bin": "x", "sub/d.py": "d"}
    )
    items = DirectorySource(tmp_path).list()
    assert [i.source_id for i in items] == ["a.md", "sub/b.TXT", "sub/deeper/c.html"]
    first = items[0]
    assert first.path == str(tmp_path.resolve() / "a.md")
    assert first.size == 1 and first.mtime_ns == os.stat(tmp_path / "a.md").st_mtime_ns
    # The document ID depends on the relative ID only, so another checkout location gives the same ID.
    assert first.document_id == derive_document_id(source_system="fs", source_id="a.md")


def test_directory_source_custom_patterns(tmp_path):
    _tree(tmp_path, {"a.md": "a", "notes/b.txt": "b", "notes/c.md": "c"})
    assert [i.source_id for i in DirectorySource(tmp_path, ["notes/*.md"]).list()] == ["notes/c.md"]


def test_symlink_loops_neither_hang_nor_crash(tmp_path):
    _tree(tmp_path, {"a.md": "a", "sub/b.md": "b"})
    (tmp_path / "sub" / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "self").symlink_to(tmp_path / "self")  # a symlink pointing at itself
    (tmp_path / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    (tmp_path / "link.md").symlink_to(tmp_path / "a.md")
    assert [i.source_id for i in DirectorySource(tmp_path).list()] == ["a.md", "sub/b.md"]
    followed = [i.source_id for i in DirectorySource(tmp_path, follow_symlinks=True).list()]
    # Each directory is entered once: the loop back to the root adds nothing; the file link is a file.
    assert followed == ["a.md", "link.md", "sub/b.md"]


def test_directory_source_covers_only_its_root_and_patterns(tmp_path):
    _tree(tmp_path, {"docs/a.md": "a"})
    source = DirectorySource(tmp_path / "docs")
    root = tmp_path.resolve() / "docs"
    assert source.covers("gone.md", str(root / "gone.md"))
    assert not source.covers("gone.md", str(tmp_path.resolve() / "other" / "gone.md"))
    assert not source.covers("gone.py", str(root / "gone.py"))


def test_paths_source_skips_missing_files_and_uses_root(tmp_path):
    _tree(tmp_path, {"a.md": "a", "b/c.txt": "c"})
    source = PathsSource([tmp_path / "b/c.txt", tmp_path / "missing.md"], root=tmp_path)
    assert [i.source_id for i in source.list()] == ["b/c.txt"]
    assert source.covers("missing.md", None) and not source.covers("a.md", None)
    with pytest.raises(ValueError, match="not under the source root"):
        PathsSource(["/etc/hosts"], root=tmp_path).list()


# --- status store -----------------------------------------------------------------------------------


def test_status_store_incremental_rule_and_expected_ids(tmp_path):
    store = StatusStore.in_data_dir(tmp_path)
    store.mark_processing("d1", source_system="fs", source_id="a.md", path="/x/a.md")
    assert store.get("d1").state == "processing"
    assert not StatusStore.is_current(store.get("d1"), "h1", "f1")
    store.mark_processed("d1", chunk_ids=["c1", "c2"], content_hash="h1", fingerprint="f1")
    row = store.get("d1")
    assert row.state == "processed" and row.chunk_count == 2 and row.last_success_at
    assert row.source_id == "a.md"  # columns not given keep their values
    assert StatusStore.is_current(row, "h1", "f1")
    assert not StatusStore.is_current(row, "h2", "f1") and not StatusStore.is_current(row, "h1", "f2")
    store.mark_failed("d1", "boom")
    row = store.get("d1")
    assert (row.state, row.error, row.chunk_ids) == ("failed", "boom", ["c1", "c2"])
    assert not StatusStore.is_current(row, "h1", "f1")
    store.mark_processed("d2", chunk_ids=["c3"], content_hash="h", fingerprint="f")
    assert store.expected_chunk_ids() == {"c1", "c2", "c3"}
    assert store.counts() == {"pending": 0, "processing": 0, "processed": 1, "failed": 1}
    assert [r.document_id for r in store.rows(state="failed")] == ["d1"]
    assert store.delete("d1") and not store.delete("d1")
    assert store.get("d1") is None
    with pytest.raises(ValueError, match="unknown status columns"):
        store.upsert("d3", colour="red")


def test_status_store_survives_concurrent_writers(tmp_path):
    store = StatusStore.in_data_dir(tmp_path)

    def writer(n: int) -> None:
        other = StatusStore.in_data_dir(tmp_path)  # each thread its own store object, as separate runs
        for i in range(25):
            other.mark_processed(f"d{n}-{i}", chunk_ids=[f"c{n}-{i}"], content_hash="h", fingerprint="f")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.counts()["processed"] == 100 and len(store.expected_chunk_ids()) == 100


def test_readonly_status_store_on_a_fresh_data_dir_creates_nothing(tmp_path):
    store = StatusStore.in_data_dir(tmp_path / "none", readonly=True)
    assert store.get_many(["x"]) == {} and store.rows() == [] and store.expected_chunk_ids() == set()
    assert not (tmp_path / "none").exists()


# --- chunk store ------------------------------------------------------------------------------------


def _chunks(document: Document, pieces: list[tuple[int, int]]) -> list[Chunk]:
    return chunks_from_spans(document, [Span(s, e, 1, ("Title",)) for s, e in pieces])


def test_chunk_store_round_trip_and_prune(tmp_path):
    store = ChunkStore.in_data_dir(tmp_path)
    v1 = Document(text="alpha beta", source_system="fs", source_id="a.md", metadata={"k": 1})
    chunks = _chunks(v1, [(0, 5), (6, 10)])
    key = store.put(v1, "fp", chunks)
    assert key == ChunkKey(v1.document_id, v1.content_hash, "fp") and store.has(key)
    assert store.load(key) == (v1, chunks)
    assert store.get_chunks(ChunkKey(v1.document_id, v1.content_hash, "other")) is None
    v2 = Document(text="gamma", source_system="fs", source_id="a.md")
    key2 = store.put(v2, "fp", _chunks(v2, [(0, 5)]))
    other_settings = store.put(v1, "fp-rebuild", chunks)  # v1 chunked by a rebuild's settings
    assert store.prune(v1.document_id, keep_content_hash=v2.content_hash, fingerprint="fp") == 1
    assert not store.has(key) and store.has(key2)
    assert store.load(other_settings) == (v1, chunks)  # another generation's chunks (and document) stay
    assert store.prune(v1.document_id, keep_content_hash=v2.content_hash, fingerprint="fp-rebuild") == 1
    with pytest.raises(KeyError):
        store.load(key)
    with pytest.raises(KeyError):
        store.load(other_settings)
    assert store.get_document(v1.document_id, v1.content_hash) is None
    assert store.delete_document(v1.document_id) == 1 and not store.has(key2)


def test_chunk_store_batch_calls_match_the_single_ones(tmp_path):
    store = ChunkStore.in_data_dir(tmp_path)
    docs = [Document(text=f"text number {i}", source_system="fs", source_id=f"{i}.md") for i in range(3)]
    entries = [(d, _chunks(d, [(0, 4), (5, len(d.text))])) for d in docs]
    keys = store.put_many(entries, "fp")
    assert keys == [ChunkKey(d.document_id, d.content_hash, "fp") for d in docs]
    assert store.put_many([], "fp") == []
    # Order follows the keys given, not the storage order.
    assert store.load_many(list(reversed(keys))) == list(reversed(entries))
    missing = ChunkKey(docs[0].document_id, docs[0].content_hash, "other")
    assert store.existing([*keys, missing]) == set(keys)
    assert store.get_chunks_many([keys[1], missing]) == {keys[1]: entries[1][1]}
    with pytest.raises(KeyError, match="no stored chunks"):
        store.load_many([keys[0], missing])
    # A newer version of two documents: prune_many drops the old versions of exactly those two.
    newer = [Document(text=f"edited {i}", source_system="fs", source_id=f"{i}.md") for i in range(2)]
    new_keys = store.put_many([(d, _chunks(d, [(0, len(d.text))])) for d in newer], "fp")
    assert store.prune_many(new_keys) == 2
    assert store.existing(keys) == {keys[2]} and store.existing(new_keys) == set(new_keys)
    assert store.get_document(docs[0].document_id, docs[0].content_hash) is None


def test_status_upsert_many_is_one_transaction(tmp_path):
    store = StatusStore.in_data_dir(tmp_path)
    store.upsert_many(
        [
            ("d1", processed_fields(["c1"], content_hash="h", fingerprint="f")),
            ("d2", failed_fields("boom", source_id="b.md")),
            ("d3", processing_fields(source_id="c.md")),
        ]
    )
    rows = store.get_many(["d1", "d2", "d3"])
    assert (rows["d1"].state, rows["d1"].chunk_ids, rows["d1"].chunk_count) == ("processed", ["c1"], 1)
    assert (rows["d2"].state, rows["d2"].error, rows["d3"].state) == ("failed", "boom", "processing")
    # One bad row fails the whole batch before anything is written.
    with pytest.raises(ValueError, match="unknown status columns"):
        store.upsert_many([("d4", processing_fields()), ("d5", {"colour": "red"})])
    assert store.get("d4") is None
    store.upsert_many([])  # nothing to do is not an error


# --- reciprocal-rank fusion -------------------------------------------------------------------------


@dataclass
class _Found:
    chunk_id: str
    score: float
    document_id: str = "doc"
    content: str = "text"
    start_char: int = 0
    end_char: int = 4
    heading_chain: tuple[str, ...] = ()


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
    hits = hybrid_search(
        {"keywords": _Ranked(["a", "b", "c"]), "vectors": _Ranked(["c", "d", "a"])}, "q", k=4
    )
    assert [h.chunk_id for h in hits] == ["a", "c", "b", "d"]
    assert hits[0].ranks == {"keywords": 1, "vectors": 3} and hits[2].ranks == {"keywords": 2}
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 63)
    assert hits[2].score == pytest.approx(1 / 62)


def test_rrf_rewards_agreement_over_a_single_top_rank():
    # x is first in one list only; y is second in both: 2/62 > 1/61.
    fused = rrf_fuse(
        {"keywords": [_Found("x", 9), _Found("y", 8)], "vectors": [_Found("z", 9), _Found("y", 8)]}
    )
    assert [h.chunk_id for h in fused][:1] == ["y"]


def test_rrf_weights_and_k_cut():
    rankings = {"keywords": [_Found("a", 1)], "vectors": [_Found("b", 1)]}
    assert [h.chunk_id for h in rrf_fuse(rankings, weights={"keywords": 1.0, "vectors": 2.0})] == ["b", "a"]
    assert [h.chunk_id for h in rrf_fuse(rankings, k=1, weights={"keywords": 3.0})] == ["a"]


def test_hybrid_search_asks_each_retriever_for_more_candidates_than_k():
    keywords, vectors = _Ranked(["a"]), _Ranked(["b"])
    hybrid_search({"keywords": keywords, "vectors": vectors}, "q", k=3)
    assert keywords.calls == [20] and vectors.calls == [20]
    with pytest.raises(ValueError, match="needs at least one"):
        hybrid_search({"graph": object()}, "q")
