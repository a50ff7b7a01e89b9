"""BM25 keyword sink: a durable SQLite store of analysed chunks, scored by an in-memory bm25s index.

SQLite is the source of truth (WAL mode, so several processes can read while one writes): each chunk
row keeps its text, offsets and the terms the analyzer produced, with their frequencies. Every write or
delete that changes rows bumps the store's *revision*, a write counter, in the same transaction (nothing
to do with index generations, which are whole sets of stores). The bm25s index (`postings.py`) is only a
cache of that table: a query first compares revisions and, when stale, reads just the rows written
and the chunk IDs removed (a pruned removal log) since the index's revision, patches its term-sorted
postings and recomputes the score matrix with numpy. The analyzer never runs again over stored chunks,
so adding or deleting one document costs one analyzer pass over that document plus a vectorised
rescoring (IDF and average length change with every document, so BM25 scores must be recomputed),
not a re-tokenised corpus.

Content is stored exactly: sqlite3 binds a str as UTF-8 with its length, so NUL and every other code point
are kept and read back unchanged, and `IS NOT` (the upsert's change test) compares whole values. SQL string
functions stop at a NUL (`length('a' || char(0) || 'b')` is 1, JSON1 cuts a value there), so content never
passes through one: it is compared, stored and read, nothing else.

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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from chunking.ids import sha256_hex
from chunking.models import embed_text
from sinks.base import (
    NO_CONTENT_HASH,
    DocumentChunks,
    Prepared,
    ScoredChunk,
    SearchFilter,
    Sink,
    SinkError,
    StoredChunk,
    filter_values,
    group_batch,
)
from sinks.config import SinkSettings
from sinks.keywords.analyzer import Analyzer
from sinks.keywords.postings import METHODS, CountsBM25, Loaded, Postings, Snapshot

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    revision INTEGER NOT NULL,
    log_floor INTEGER NOT NULL DEFAULT 0,  -- `removed` holds every removal after this revision
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
    rev INTEGER NOT NULL           -- revision of the write that last changed the row
);
CREATE INDEX IF NOT EXISTS chunks_document ON chunks (document_id);
CREATE INDEX IF NOT EXISTS chunks_rev ON chunks (rev);
CREATE TABLE IF NOT EXISTS removed (       -- removal log, so a refresh need not list every live ID
    chunk_id TEXT NOT NULL,
    rev INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS removed_rev ON removed (rev);
"""
# Stores written before the write counter was called a revision: their columns are renamed on open.
_RENAMED_COLUMNS = (("state", "generation", "revision"), ("chunks", "gen", "rev"), ("removed", "gen", "rev"))
# Removals older than this many revisions are pruned; an index older than that reloads in full.
REMOVAL_LOG_REVISIONS = 10_000
# What is analysed for each chunk: its heading chain as a context header, then its content
# (`chunking.models.embed_text`, the same text the vector is computed from); only `content` is stored as
# the chunk's text. Part of the stored analyzer signature, so a store indexed from content alone is
# re-analysed once on open.
INDEXED_TEXT = "headings+content"
_LOG_REMOVALS = "INSERT INTO removed (chunk_id, rev) SELECT chunk_id, ? FROM chunks WHERE document_id = ?"
_STALE = " AND chunk_id NOT IN (SELECT value FROM json_each(?))"

_COLUMNS = (
    "chunk_id, document_id, chunk_index, start_char, end_char, content, heading_chain, terms, tfs, doc_len"
)
# Re-writing an unchanged chunk leaves its row (and its `rev`) alone, so an idempotent re-ingest
# does not force an index rebuild.
_UPSERT = f"""
INSERT INTO chunks ({_COLUMNS}, rev) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (chunk_id) DO UPDATE SET
    document_id = excluded.document_id, chunk_index = excluded.chunk_index,
    start_char = excluded.start_char, end_char = excluded.end_char, content = excluded.content,
    heading_chain = excluded.heading_chain, terms = excluded.terms, tfs = excluded.tfs, doc_len = excluded.doc_len,
    rev = excluded.rev
WHERE chunks.document_id IS NOT excluded.document_id OR chunks.chunk_index IS NOT excluded.chunk_index
    OR chunks.start_char IS NOT excluded.start_char OR chunks.end_char IS NOT excluded.end_char
    OR chunks.content IS NOT excluded.content OR chunks.heading_chain IS NOT excluded.heading_chain
    OR chunks.terms IS NOT excluded.terms OR chunks.tfs IS NOT excluded.tfs
"""


_STORED = "chunk_id, document_id, chunk_index, start_char, end_char, content, heading_chain"
_HASH_PAGE = 1000  # rows read per statement by content_hashes, so writers are not held off for long


def _stored(row: Sequence[Any], score: float | None = None) -> StoredChunk:
    fields = (row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5], tuple(json.loads(row[6])))
    return StoredChunk(*fields) if score is None else ScoredChunk(*fields, score=score)


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
        self._postings = Postings()
        self.last_refresh: dict[str, float] = {}  # what the last index refresh loaded, for stats()
        self._snapshot: Snapshot | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._rename_old_columns()
            self._conn.executescript(_SCHEMA)  # idempotent; executescript commits, so outside BEGIN
            with self._transaction(immediate=True):
                self._conn.execute(
                    "INSERT OR IGNORE INTO state (id, revision, analyzer) VALUES (0, 0, ?)",
                    (self.terms_signature,),
                )
                self._reanalyze_if_needed()
        except sqlite3.Error as exc:
            raise SinkError(self.name, f"cannot open {self.path}: {exc}") from exc

    @classmethod
    def from_settings(cls, settings: SinkSettings | None = None) -> BM25Sink:
        """The keyword store of the generation `settings` names, with its analyzer settings."""
        return cls(settings or SinkSettings())

    # -- storage -------------------------------------------------------------------------------------

    def _rename_old_columns(self) -> None:
        """Bring a store written by an earlier release (write counter named `generation`/`gen`) up to date."""
        for table, old, new in _RENAMED_COLUMNS:
            columns = {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}
            if old in columns and new not in columns:
                self._conn.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")
        self._conn.execute("DROP INDEX IF EXISTS chunks_gen")
        self._conn.execute("DROP INDEX IF EXISTS removed_gen")

    def _transaction(self, *, immediate: bool = False) -> _Transaction:
        return _Transaction(self._conn, self._lock, immediate)

    def _revision(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT revision FROM state WHERE id = 0").fetchone()[0])

    def _bump(self) -> int:
        """Inside a write transaction: the next revision, stored with the rows it changes."""
        self._conn.execute("UPDATE state SET revision = revision + 1 WHERE id = 0")
        return int(self._conn.execute("SELECT revision FROM state WHERE id = 0").fetchone()[0])

    def _commit_revision(self, revision: int) -> None:
        """Inside a write transaction: publish `revision` and prune the removal log behind it."""
        floor = revision - REMOVAL_LOG_REVISIONS
        self._conn.execute("UPDATE state SET revision = ? WHERE id = 0", (revision,))
        if floor > 0:
            self._conn.execute("DELETE FROM removed WHERE rev <= ?", (floor,))
            self._conn.execute("UPDATE state SET log_floor = ? WHERE id = 0", (floor,))

    @property
    def terms_signature(self) -> str:
        """Names how stored terms were made: the analyzer's settings and the text analysed (INDEXED_TEXT)."""
        return f"{self.analyzer.signature}|{INDEXED_TEXT}"

    def _reanalyze_if_needed(self) -> None:
        """Stored terms from other analyzer settings (or other text) would not match queries as terms made
        now do: re-analyse them once."""
        stored = self._conn.execute("SELECT analyzer FROM state WHERE id = 0").fetchone()[0]
        if stored == self.terms_signature:
            return
        rows = self._conn.execute("SELECT chunk_id, content, heading_chain FROM chunks").fetchall()
        revision = self._bump()
        updates = []
        for chunk_id, content, heading_chain in rows:
            text = embed_text(tuple(json.loads(heading_chain)), content)
            updates.append((*self._terms(text), revision, chunk_id))
        self._conn.executemany(
            "UPDATE chunks SET terms = ?, tfs = ?, doc_len = ?, rev = ? WHERE chunk_id = ?", updates
        )
        self._conn.execute("UPDATE state SET analyzer = ? WHERE id = 0", (self.terms_signature,))

    def _terms(self, text: str) -> tuple[str, bytes, int]:
        """The stored form of a chunk's terms: a compact form that loads with split() and frombuffer."""
        tokens = self.analyzer(text)
        counts = Counter(tokens)
        return " ".join(counts), np.fromiter(counts.values(), dtype="<u4").tobytes(), len(tokens)

    # -- Sink API ------------------------------------------------------------------------------------

    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        """Analyse every chunk's heading chain and content (`Chunk.embed_text`: the only place the analyzer
        runs on chunk text); stores the content alone as its text; writes nothing."""
        documents, chunks = group_batch(self.name, batch)
        rows: list[tuple[Any, ...]] = []
        total_terms = 0
        for doc_chunks in chunks.values():
            for chunk in doc_chunks:
                terms, tfs, doc_len = self._terms(chunk.embed_text)
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
        self.check_prepared(prepared)
        try:
            with self._transaction(immediate=True):
                before = self._conn.total_changes
                revision = self._revision() + 1
                self._conn.executemany(_UPSERT, [(*row, revision) for row in prepared.payload])
                for document_id, doc_chunks in prepared.chunks.items():
                    keep = json.dumps([c.chunk_id for c in doc_chunks])
                    self._conn.execute(_LOG_REMOVALS + _STALE, (revision, document_id, keep))
                    self._conn.execute(
                        "DELETE FROM chunks WHERE document_id = ?" + _STALE, (document_id, keep)
                    )
                if self._conn.total_changes != before:  # an unchanged re-write keeps the index fresh
                    self._commit_revision(revision)
        except sqlite3.Error as exc:
            raise SinkError(self.name, f"write failed: {exc}") from exc
        return prepared.chunk_count

    def delete(self, document_id: str) -> int:
        try:
            with self._transaction(immediate=True):
                revision = self._revision() + 1
                self._conn.execute(_LOG_REMOVALS, (revision, document_id))
                removed = self._conn.execute(
                    "DELETE FROM chunks WHERE document_id = ?", (document_id,)
                ).rowcount
                if removed:
                    self._commit_revision(revision)
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

    def content_hashes(self, document_id: str | None = None) -> dict[str, str]:
        """SHA-256 of each stored row's content as SQLite gives it back, a page of rows at a time (keyset
        pagination on the primary key, so each page is an index range, however large the table)."""
        where = "" if document_id is None else "AND document_id = ? "
        hashes: dict[str, str] = {}
        after = ""
        while True:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT chunk_id, content FROM chunks WHERE chunk_id > ? {where}ORDER BY chunk_id LIMIT ?",
                    (after, *([] if document_id is None else [document_id]), _HASH_PAGE),
                ).fetchall()
            for chunk_id, content in rows:  # a BLOB written behind the sink's back is not the text
                hashes[chunk_id] = sha256_hex(content) if isinstance(content, str) else NO_CONTENT_HASH
            if len(rows) < _HASH_PAGE:
                return hashes
            after = rows[-1][0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        self._snapshot = None
        self._postings = Postings()

    def drop(self) -> None:
        """Close and delete the index file (with SQLite's WAL and shared-memory files)."""
        self.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    # -- search --------------------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, filter: SearchFilter | None = None) -> list[ScoredChunk]:
        """Top-k chunks by BM25 over the current store; [] for a query with no indexable terms.

        `filter` may only name `document_id` (the one field the in-memory index knows)."""
        allowed = filter_values(self.name, filter, ("document_id",)).get("document_id")
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
                f"SELECT {_STORED} FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps([chunk_id for chunk_id, _ in hits]),),
            ).fetchall()
        by_id = {r[0]: r for r in rows}
        # A chunk deleted by a writer since the snapshot was taken is left out.
        return [_stored(by_id[chunk_id], score) for chunk_id, score in hits if chunk_id in by_id]

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

    def _current(self) -> Snapshot | None:
        """The index of the store's current revision, refreshed from changed rows if stale."""
        snap = self._snapshot
        if snap is not None and snap.revision == self._revision():
            return snap
        with self._index_lock:
            try:
                return self._refresh()
            except BaseException:
                # The postings may be half-updated: start over from the store on the next query.
                self._snapshot, self._postings, self._vocab = None, Postings(), {}
                raise

    def _refresh(self) -> Snapshot | None:
        started = time.perf_counter()
        with self._transaction():  # one read snapshot: revision, changed and removed rows agree
            revision, floor = self._conn.execute(
                "SELECT revision, log_floor FROM state WHERE id = 0"
            ).fetchone()
            if self._snapshot is not None and self._snapshot.revision == revision:
                return self._snapshot
            if self._snapshot is None or self._snapshot.revision < floor:
                since, self._postings = -1, Postings()  # (re)load everything
            else:
                since = self._snapshot.revision
            changed = self._conn.execute(
                "SELECT chunk_id, document_id, terms, tfs, doc_len FROM chunks WHERE rev > ?", (since,)
            ).fetchall()
            removed = self._conn.execute("SELECT chunk_id FROM removed WHERE rev > ?", (since,))
            gone = [r[0] for r in removed] if since >= 0 else []
        postings = self._postings
        dropped = postings.remove([*gone, *(row[0] for row in changed)])
        postings.add(Loaded.from_rows(changed, self._vocab))
        retriever = CountsBM25(k1=self.k1, b=self.b, method=self.method)
        n_vocab = len(self._vocab)
        retriever.index_counts(postings.terms, postings.rows, postings.tfs, postings.doc_lens, n_vocab)
        self._snapshot = Snapshot(
            revision, retriever, postings.chunk_ids, postings.doc_codes, dict(postings.codes), n_vocab
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
            "revision": self._revision(),
            "indexed_revision": snap.revision if snap else None,
            "vocabulary": snap.n_vocab if snap else None,
            "last_refresh": dict(self.last_refresh),
            "method": self.method,
            "k1": self.k1,
            "b": self.b,
            "analyzer": self.terms_signature,
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
