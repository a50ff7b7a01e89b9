"""BM25 keyword sink: a durable SQLite store of analysed chunks, scored by an in-memory bm25s index.

SQLite is the source of truth (WAL mode, so several processes can read while one writes): each chunk
row keeps its text, offsets and the terms the analyzer produced, with their frequencies. Every write or
delete that changes rows bumps a generation counter in the same transaction. The bm25s index is only a
cache of that table: a query first compares generations and, when stale, reads just the rows written
and the chunk IDs removed (a pruned removal log) since the index's generation, patches its term-sorted
postings and recomputes the score matrix with numpy. The analyzer never runs again over stored chunks,
so adding or deleting one document costs one analyzer pass over that document plus a vectorised
rescoring (IDF and average length change with every document, so BM25 scores must be recomputed),
not a re-tokenised corpus.

Scoring is Okapi BM25 with k1=1.5, b=0.75 and bm25s' "lucene" variant by default: its IDF
log(1 + (N - df + 0.5) / (df + 0.5)) is always positive, whereas the Robertson IDF of rank_bm25 goes
to or below zero for any term in half the chunks or more, so in a small store (one document, a few
chunks) the most relevant chunks would score nothing. Rankings stay within the parity bound against
rank_bm25 (see tests/sinks/test_sinks_bm25.py); `method` selects "robertson" or "atire" instead.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar

import bm25s
import numpy as np
from bm25s.scoring import _build_idf_array, _select_idf_scorer, _select_tfc_scorer

from sinks.base import DocumentChunks, Prepared, ScoredChunk, Sink, SinkError, group_batch
from sinks.bm25_tokenization import Analyzer
from sinks.config import SinkSettings

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    generation INTEGER NOT NULL,
    log_floor INTEGER NOT NULL DEFAULT 0,  -- `removed` holds every removal after this generation
    analyzer TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id TEXT PRIMARY KEY,
    document_id TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    start_char INTEGER NOT NULL,
    end_char INTEGER NOT NULL,
    content TEXT NOT NULL,
    heading_chain TEXT NOT NULL,   -- JSON array of headings
    terms TEXT NOT NULL,           -- distinct analysed terms, space-separated (terms hold no spaces)
    tfs BLOB NOT NULL,             -- their frequencies in the chunk, little-endian uint32, same order
    doc_len INTEGER NOT NULL,      -- number of analysed terms, with repeats
    gen INTEGER NOT NULL           -- generation of the write that last changed the row
);
CREATE INDEX IF NOT EXISTS chunks_document ON chunks (document_id);
CREATE INDEX IF NOT EXISTS chunks_gen ON chunks (gen);
CREATE TABLE IF NOT EXISTS removed (       -- removal log, so a refresh need not list every live ID
    chunk_id TEXT NOT NULL,
    gen INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS removed_gen ON removed (gen);
"""
# Removals older than this many generations are pruned; an index older than that reloads in full.
REMOVAL_LOG_GENERATIONS = 10_000
_LOG_REMOVALS = "INSERT INTO removed (chunk_id, gen) SELECT chunk_id, ? FROM chunks WHERE document_id = ?"
_STALE = " AND chunk_id NOT IN (SELECT value FROM json_each(?))"

_COLUMNS = (
    "chunk_id, document_id, chunk_index, start_char, end_char, content, heading_chain, terms, tfs, doc_len"
)
# Re-writing an unchanged chunk leaves its row (and its `gen`) alone, so an idempotent re-ingest
# does not force an index rebuild.
_UPSERT = f"""
INSERT INTO chunks ({_COLUMNS}, gen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (chunk_id) DO UPDATE SET
    document_id = excluded.document_id, chunk_index = excluded.chunk_index,
    start_char = excluded.start_char, end_char = excluded.end_char, content = excluded.content,
    heading_chain = excluded.heading_chain, terms = excluded.terms, tfs = excluded.tfs, doc_len = excluded.doc_len,
    gen = excluded.gen
WHERE chunks.document_id IS NOT excluded.document_id OR chunks.chunk_index IS NOT excluded.chunk_index
    OR chunks.start_char IS NOT excluded.start_char OR chunks.end_char IS NOT excluded.end_char
    OR chunks.content IS NOT excluded.content OR chunks.heading_chain IS NOT excluded.heading_chain
    OR chunks.terms IS NOT excluded.terms OR chunks.tfs IS NOT excluded.tfs
"""

METHODS = ("lucene", "robertson", "atire")


@dataclass(frozen=True)
class StoredChunk:
    """A stored chunk with its position in the document, for neighbour expansion and context assembly."""

    chunk_id: str
    document_id: str
    chunk_index: int
    start_char: int
    end_char: int
    content: str
    heading_chain: tuple[str, ...]


_STORED = "chunk_id, document_id, chunk_index, start_char, end_char, content, heading_chain"


def _stored(row: Sequence[Any]) -> StoredChunk:
    return StoredChunk(
        row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5], tuple(json.loads(row[6]))
    )


class CountsBM25(bm25s.BM25):
    """A bm25s retriever whose eager score matrix is built from stored term counts with numpy.

    bm25s' own `index` walks the corpus one document at a time in Python (seconds at 100k chunks);
    this builds the same CSC matrix (same IDF/TF formulas, taken from bm25s.scoring) in a few array
    operations, so the rebuild after each change stays cheap. Scoring is bm25s' `get_scores_from_ids`.
    """

    def index_counts(
        self, term_ids: np.ndarray, doc_ids: np.ndarray, tfs: np.ndarray, doc_lens: np.ndarray, n_vocab: int
    ) -> None:
        """One posting per (term, doc) with its frequency; `doc_lens[d]` counts doc d's terms with repeats.

        Postings already sorted by term (as the sink keeps them) skip the sort.
        """
        if self.method not in METHODS or self.idf_method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}")
        if len(term_ids) > 1 and bool(np.any(term_ids[1:] < term_ids[:-1])):
            order = np.argsort(term_ids, kind="stable")
            term_ids, doc_ids, tfs = term_ids[order], doc_ids[order], tfs[order]
        n_docs = len(doc_lens)
        doc_freqs = np.bincount(term_ids, minlength=n_vocab)
        idf = _build_idf_array(
            dict(enumerate(doc_freqs.tolist())), n_docs, _select_idf_scorer(self.idf_method), self.dtype
        )
        avg_doc_len = float(doc_lens.mean()) if n_docs else 0.0
        tfc = _select_tfc_scorer(self.method)(
            tf_array=tfs, l_d=doc_lens[doc_ids], l_avg=avg_doc_len, k1=self.k1, b=self.b, delta=self.delta
        )
        indptr = np.zeros(n_vocab + 1, dtype=np.int64)
        np.cumsum(doc_freqs, out=indptr[1:])
        self.scores = {
            "data": (idf[term_ids] * tfc).astype(self.dtype),
            "indices": doc_ids.astype(self.int_dtype),
            "indptr": indptr,
            "num_docs": n_docs,
        }
        self.nonoccurrence_array = None
        self.vocab_dict = {}  # terms are mapped to IDs by the sink, which owns the vocabulary
        self.unique_token_ids_set = set()


@dataclass
class _Loaded:
    """Stored rows turned into arrays: row i owns `sizes[i]` consecutive entries of `terms`/`tfs`."""

    chunk_ids: list[str]
    document_ids: list[str]
    doc_lens: np.ndarray
    sizes: np.ndarray
    terms: np.ndarray
    tfs: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[str, str, str, bytes, int]], vocab: dict[str, int]) -> _Loaded:
        """Stored terms -> vocabulary IDs: dictionary lookups (in C, via map), no analysis."""
        term_lists = [r[2].split() for r in rows]
        keys = list(chain.from_iterable(term_lists))
        for term in dict.fromkeys(keys).keys() - vocab.keys():
            vocab[term] = len(vocab)
        return cls(
            chunk_ids=[r[0] for r in rows],
            document_ids=[r[1] for r in rows],
            doc_lens=np.fromiter((r[4] for r in rows), dtype=np.int64, count=len(rows)),
            sizes=np.fromiter(map(len, term_lists), dtype=np.int64, count=len(rows)),
            terms=np.fromiter(map(vocab.__getitem__, keys), dtype=np.int32, count=len(keys)),
            tfs=np.frombuffer(b"".join(r[3] for r in rows), dtype="<u4").astype(np.float32),
        )


class _Postings:
    """The live chunks' postings, kept sorted by term so a change never re-sorts the corpus.

    Removing rows is a boolean mask and a renumbering; adding rows sorts only the new postings and
    inserts them after each term's existing ones (new rows take the highest positions, so the order
    stays (term, row)). Arrays are replaced, never changed in place, so a snapshot built from them
    stays valid while the next refresh runs.
    """

    def __init__(self) -> None:
        self.terms = np.empty(0, dtype=np.int32)
        self.rows = np.empty(0, dtype=np.int64)
        self.tfs = np.empty(0, dtype=np.float32)
        self.chunk_ids: list[str] = []
        self.position: dict[str, int] = {}
        self.doc_lens = np.empty(0, dtype=np.int64)
        self.doc_codes = np.empty(0, dtype=np.int64)  # row -> code of its document, for filters
        self.codes: dict[str, int] = {}

    def remove(self, chunk_ids: Iterable[str]) -> int:
        drop = [self.position[c] for c in chunk_ids if c in self.position]
        if not drop:
            return 0
        kept = np.ones(len(self.chunk_ids), dtype=bool)
        kept[drop] = False
        keep_posting = kept[self.rows]
        renumber = np.cumsum(kept) - 1
        self.terms, self.tfs = self.terms[keep_posting], self.tfs[keep_posting]
        self.rows = renumber[self.rows[keep_posting]]
        self.chunk_ids = [c for c, k in zip(self.chunk_ids, kept.tolist(), strict=True) if k]
        self.position = {c: i for i, c in enumerate(self.chunk_ids)}
        self.doc_lens, self.doc_codes = self.doc_lens[kept], self.doc_codes[kept]
        return len(drop)

    def add(self, loaded: _Loaded) -> None:
        n = len(loaded.chunk_ids)
        if not n:
            return
        first = len(self.chunk_ids)
        self.chunk_ids = [*self.chunk_ids, *loaded.chunk_ids]  # a new list: snapshots keep theirs
        self.position.update(zip(loaded.chunk_ids, range(first, first + n), strict=True))
        codes = [self.codes.setdefault(d, len(self.codes)) for d in loaded.document_ids]
        self.doc_codes = np.concatenate([self.doc_codes, np.asarray(codes, dtype=np.int64)])
        self.doc_lens = np.concatenate([self.doc_lens, loaded.doc_lens])
        terms, tfs = loaded.terms, loaded.tfs
        rows = np.repeat(np.arange(first, first + n, dtype=np.int64), loaded.sizes)
        order = np.argsort(terms, kind="stable")
        terms, tfs, rows = terms[order], tfs[order], rows[order]
        at = np.searchsorted(self.terms, terms, side="right")
        self.terms = np.insert(self.terms, at, terms)
        self.tfs = np.insert(self.tfs, at, tfs)
        self.rows = np.insert(self.rows, at, rows)


@dataclass(frozen=True, eq=False)
class _Snapshot:
    """An immutable, queryable index of one generation (searches run on it outside the lock)."""

    generation: int
    retriever: CountsBM25
    chunk_ids: list[str]
    doc_codes: np.ndarray
    codes: dict[str, int]
    n_vocab: int

    def positions_of(self, document_ids: Sequence[str]) -> np.ndarray:
        codes = [self.codes[d] for d in document_ids if d in self.codes]
        return np.flatnonzero(np.isin(self.doc_codes, codes)) if codes else np.empty(0, dtype=np.int64)


class BM25Sink(Sink):
    """Keyword sink. `BM25Sink(settings)` stores at `settings.bm25_path / "bm25.sqlite"`."""

    name: ClassVar[str] = "keywords"

    def __init__(
        self,
        settings: SinkSettings | None = None,
        *,
        path: Path | str | None = None,
        analyzer: Analyzer | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
    ) -> None:
        settings = settings or SinkSettings()
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, not {method!r}")
        self.path = Path(path) if path is not None else settings.bm25_path / "bm25.sqlite"
        self.analyzer = analyzer or Analyzer(
            stemming=settings.bm25_stemming, stopwords=settings.bm25_stopwords
        )
        self.k1, self.b, self.method = k1, b, method
        self._lock = threading.RLock()  # one connection, shared by threads, used under this lock
        self._index_lock = threading.Lock()  # one rebuild at a time
        self._vocab: dict[str, int] = {}
        self._postings = _Postings()
        self.last_refresh: dict[str, float] = {}  # what the last index refresh loaded, for stats()
        self._snapshot: _Snapshot | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)  # idempotent; executescript commits, so outside BEGIN
            with self._transaction(immediate=True):
                self._conn.execute(
                    "INSERT OR IGNORE INTO state (id, generation, analyzer) VALUES (0, 0, ?)",
                    (self.analyzer.signature,),
                )
                self._reanalyze_if_needed()
        except sqlite3.Error as exc:
            raise SinkError(self.name, f"cannot open {self.path}: {exc}") from exc

    # -- storage -------------------------------------------------------------------------------------

    def _transaction(self, *, immediate: bool = False) -> _Transaction:
        return _Transaction(self._conn, self._lock, immediate)

    def _generation(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT generation FROM state WHERE id = 0").fetchone()[0])

    def _bump(self) -> int:
        """Inside a write transaction: next generation, stored with the rows it changes."""
        self._conn.execute("UPDATE state SET generation = generation + 1 WHERE id = 0")
        return int(self._conn.execute("SELECT generation FROM state WHERE id = 0").fetchone()[0])

    def _commit_generation(self, generation: int) -> None:
        """Inside a write transaction: publish `generation` and prune the removal log behind it."""
        floor = generation - REMOVAL_LOG_GENERATIONS
        self._conn.execute("UPDATE state SET generation = ? WHERE id = 0", (generation,))
        if floor > 0:
            self._conn.execute("DELETE FROM removed WHERE gen <= ?", (floor,))
            self._conn.execute("UPDATE state SET log_floor = ? WHERE id = 0", (floor,))

    def _reanalyze_if_needed(self) -> None:
        """Stored terms from other analyzer settings would never match queries: re-analyse them once."""
        stored = self._conn.execute("SELECT analyzer FROM state WHERE id = 0").fetchone()[0]
        if stored == self.analyzer.signature:
            return
        rows = self._conn.execute("SELECT chunk_id, content FROM chunks").fetchall()
        generation = self._bump()
        updates = []
        for chunk_id, content in rows:
            updates.append((*self._terms(content), generation, chunk_id))
        self._conn.executemany(
            "UPDATE chunks SET terms = ?, tfs = ?, doc_len = ?, gen = ? WHERE chunk_id = ?", updates
        )
        self._conn.execute("UPDATE state SET analyzer = ? WHERE id = 0", (self.analyzer.signature,))

    def _terms(self, text: str) -> tuple[str, bytes, int]:
        """The stored form of a chunk's terms: a compact form that loads with split() and frombuffer."""
        tokens = self.analyzer(text)
        counts = Counter(tokens)
        return " ".join(counts), np.fromiter(counts.values(), dtype="<u4").tobytes(), len(tokens)

    # -- Sink API ------------------------------------------------------------------------------------

    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        """Analyse every chunk (the only place the analyzer runs on chunk text); writes nothing."""
        documents, chunks = group_batch(batch)
        rows: list[tuple[Any, ...]] = []
        total_terms = 0
        for doc_chunks in chunks.values():
            for chunk in doc_chunks:
                terms, tfs, doc_len = self._terms(chunk.content)
                total_terms += doc_len
                rows.append(
                    (
                        chunk.chunk_id,
                        chunk.document_id,
                        chunk.chunk_index,
                        chunk.start_char,
                        chunk.end_char,
                        chunk.content,
                        json.dumps(list(chunk.heading_chain), ensure_ascii=False),
                        terms,
                        tfs,
                        doc_len,
                    )
                )
        return Prepared(
            sink=self.name,
            documents=documents,
            chunks=chunks,
            payload=rows,
            stats={"terms": float(total_terms)},
        )

    def write(self, prepared: Prepared) -> int:
        """Replace each document's chunks with the prepared ones, all in one transaction."""
        if prepared.sink != self.name:
            raise ValueError(f"prepared for sink {prepared.sink!r}, not {self.name!r}")
        try:
            with self._transaction(immediate=True):
                before = self._conn.total_changes
                generation = self._generation() + 1
                self._conn.executemany(_UPSERT, [(*row, generation) for row in prepared.payload])
                for document_id, doc_chunks in prepared.chunks.items():
                    keep = json.dumps([c.chunk_id for c in doc_chunks])
                    self._conn.execute(_LOG_REMOVALS + _STALE, (generation, document_id, keep))
                    self._conn.execute(
                        "DELETE FROM chunks WHERE document_id = ?" + _STALE, (document_id, keep)
                    )
                if self._conn.total_changes != before:  # an unchanged re-write keeps the index fresh
                    self._commit_generation(generation)
        except sqlite3.Error as exc:
            raise SinkError(self.name, f"write failed: {exc}") from exc
        return prepared.chunk_count

    def delete(self, document_id: str) -> int:
        try:
            with self._transaction(immediate=True):
                generation = self._generation() + 1
                self._conn.execute(_LOG_REMOVALS, (generation, document_id))
                removed = self._conn.execute(
                    "DELETE FROM chunks WHERE document_id = ?", (document_id,)
                ).rowcount
                if removed:
                    self._commit_generation(generation)
        except sqlite3.Error as exc:
            raise SinkError(self.name, f"delete failed: {exc}") from exc
        return removed

    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        with self._lock:
            if document_id is None:
                rows = self._conn.execute("SELECT chunk_id FROM chunks")
            else:
                rows = self._conn.execute("SELECT chunk_id FROM chunks WHERE document_id = ?", (document_id,))
            return {r[0] for r in rows}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        self._snapshot = None
        self._postings = _Postings()

    def drop(self) -> None:
        """Close and delete the index file (with SQLite's WAL and shared-memory files)."""
        self.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    # -- search --------------------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, filter: Mapping[str, Any] | None = None) -> list[ScoredChunk]:
        """Top-k chunks by BM25 over the current store; [] for a query with no indexable terms."""
        allowed = _document_filter(filter)
        if k <= 0:
            return []
        tokens = self.analyzer(query)
        if not tokens:
            return []
        snap = self._current()
        if snap is None:
            return []
        # Repeated query terms count repeatedly, as in rank_bm25 and bm25s.
        ids = [i for t in tokens if (i := self._vocab.get(t)) is not None and i < snap.n_vocab]
        if not ids:
            return []
        scores = snap.retriever.get_scores_from_ids(ids)
        candidates = np.flatnonzero(scores > 0) if allowed is None else snap.positions_of(allowed)
        candidates = candidates[scores[candidates] > 0]
        if len(candidates) > k:
            candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
        ranked = sorted(candidates.tolist(), key=lambda p: (-scores[p], p))
        return self._fetch([(snap.chunk_ids[p], float(scores[p])) for p in ranked])

    def _fetch(self, hits: list[tuple[str, float]]) -> list[ScoredChunk]:
        if not hits:
            return []
        with self._lock:
            rows = self._conn.execute(
                "SELECT chunk_id, document_id, content, start_char, end_char, heading_chain FROM chunks "
                f"WHERE chunk_id IN ({','.join('?' * len(hits))})",
                [chunk_id for chunk_id, _ in hits],
            ).fetchall()
        by_id = {r[0]: r for r in rows}
        out = []
        for chunk_id, score in hits:
            row = by_id.get(chunk_id)
            if row is None:  # deleted by a writer since the snapshot was taken
                continue
            out.append(
                ScoredChunk(chunk_id, row[1], score, row[2], row[3], row[4], tuple(json.loads(row[5])))
            )
        return out

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]:
        """Stored chunks by ID (absent IDs are left out): the query side's source of text and offsets."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return {}
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_STORED} FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(ids),),
            ).fetchall()
        return {r[0]: _stored(r) for r in rows}

    def chunks_at(self, document_id: str, indexes: Iterable[int]) -> list[StoredChunk]:
        """A document's chunks at these `chunk_index` positions, in index order (neighbour expansion)."""
        wanted = sorted({int(i) for i in indexes if int(i) >= 0})
        if not wanted:
            return []
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_STORED} FROM chunks WHERE document_id = ? "
                "AND chunk_index IN (SELECT value FROM json_each(?)) ORDER BY chunk_index",
                (document_id, json.dumps(wanted)),
            ).fetchall()
        return [_stored(r) for r in rows]

    def _current(self) -> _Snapshot | None:
        """The index of the store's current generation, refreshed from changed rows if stale."""
        snap = self._snapshot
        if snap is not None and snap.generation == self._generation():
            return snap
        with self._index_lock:
            try:
                return self._refresh()
            except BaseException:
                # The postings may be half-updated: start over from the store on the next query.
                self._snapshot, self._postings, self._vocab = None, _Postings(), {}
                raise

    def _refresh(self) -> _Snapshot | None:
        started = time.perf_counter()
        with self._transaction():  # one read snapshot: generation, changed and removed rows agree
            generation, floor = self._conn.execute(
                "SELECT generation, log_floor FROM state WHERE id = 0"
            ).fetchone()
            if self._snapshot is not None and self._snapshot.generation == generation:
                return self._snapshot
            if self._snapshot is None or self._snapshot.generation < floor:
                since, self._postings = -1, _Postings()  # (re)load everything
            else:
                since = self._snapshot.generation
            changed = self._conn.execute(
                "SELECT chunk_id, document_id, terms, tfs, doc_len FROM chunks WHERE gen > ?", (since,)
            ).fetchall()
            removed = self._conn.execute("SELECT chunk_id FROM removed WHERE gen > ?", (since,))
            gone = [r[0] for r in removed] if since >= 0 else []
        postings = self._postings
        dropped = postings.remove([*gone, *(row[0] for row in changed)])
        postings.add(_Loaded.from_rows(changed, self._vocab))
        retriever = CountsBM25(k1=self.k1, b=self.b, method=self.method)
        n_vocab = len(self._vocab)
        retriever.index_counts(postings.terms, postings.rows, postings.tfs, postings.doc_lens, n_vocab)
        self._snapshot = _Snapshot(
            generation, retriever, postings.chunk_ids, postings.doc_codes, dict(postings.codes), n_vocab
        )
        self.last_refresh = {
            "loaded_rows": len(changed),
            "dropped_rows": dropped,
            "seconds": time.perf_counter() - started,
        }
        return self._snapshot

    def stats(self) -> dict[str, Any]:
        """Store and index figures, for health checks and the CLI."""
        with self._lock:
            chunks, documents, total_len = self._conn.execute(
                "SELECT COUNT(*), COUNT(DISTINCT document_id), COALESCE(SUM(doc_len), 0) FROM chunks"
            ).fetchone()
        snap = self._snapshot
        return {
            "path": str(self.path),
            "chunks": chunks,
            "documents": documents,
            "avg_chunk_terms": (total_len / chunks) if chunks else 0.0,
            "generation": self._generation(),
            "indexed_generation": snap.generation if snap else None,
            "vocabulary": snap.n_vocab if snap else None,
            "last_refresh": dict(self.last_refresh),
            "method": self.method,
            "k1": self.k1,
            "b": self.b,
            "analyzer": self.analyzer.signature,
        }


class _Transaction:
    """BEGIN/COMMIT under the connection lock; ROLLBACK on any error. IMMEDIATE takes the write lock."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, immediate: bool) -> None:
        self._conn, self._lock, self._immediate = conn, lock, immediate

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        try:
            self._conn.execute("BEGIN IMMEDIATE" if self._immediate else "BEGIN")
        except BaseException:
            self._lock.release()
            raise
        return self._conn

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            self._conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
        finally:
            self._lock.release()


def _document_filter(filter: Mapping[str, Any] | None) -> list[str] | None:
    """`{"document_id": "a"}` or `{"document_id": ["a", "b"]}`; other keys are rejected, not ignored."""
    if not filter:
        return None
    unknown = set(filter) - {"document_id"}
    if unknown:
        raise ValueError(f"unsupported BM25 filter keys: {sorted(unknown)} (only 'document_id')")
    value = filter["document_id"]
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        return [str(v) for v in value]
    raise ValueError("filter document_id must be a string or a list of strings")
