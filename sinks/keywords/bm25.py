"""BM25 keyword sink: a durable term store (SQLite file, or PostgreSQL in server mode) scored in memory.

Writers only analyse chunks and write rows to the term store (`term_store.py`, the source of truth); each
process that answers queries keeps an index (`postings.py`) that is only a cache of it, brought up to date
from the store's change log before a query. So adding or deleting a document costs one analyzer pass over it
and a segment of its postings, never a re-tokenised or rescored corpus. The *revision* is the store's write
counter, nothing to do with index generations. Embedded, the index is also saved beside the SQLite file
(`saved_index.py`); in server mode nothing is kept on disk (docs/design.md, "The keyword index").

Scoring is Okapi BM25 (k1=`K1`, b=`B`) with bm25s' "lucene" IDF by default: it is always positive, whereas
rank_bm25's Robertson IDF reaches zero for a term in half the chunks or more, so in a small store the most
relevant chunks would score nothing. `method` selects "robertson" or "atire"; rankings stay within the parity
bound against rank_bm25 (`tests/sinks/test_sinks_bm25.py`).
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sqlalchemy.exc import SQLAlchemyError

from unichunk.chunking.access_labels import document_labels, normalise_labels
from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import embed_text
from unichunk.sinks.base import (
    NO_CONTENT_HASH,
    DocumentChunks,
    InvalidRequest,
    Prepared,
    ScoredChunk,
    SearchFilter,
    Sink,
    SinkError,
    StoredChunk,
    filter_values,
    group_batch,
    matches_nothing,
)
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_store_database
from unichunk.sinks.keywords import saved_index
from unichunk.sinks.keywords.analyzer import Analyzer
from unichunk.sinks.keywords.postings import METHODS, Loaded, Postings, Snapshot, Vocabulary, vocabulary
from unichunk.sinks.keywords.term_store import TermStore

STORE = "keywords"  # the store's PostgreSQL schema is `unichunk_keywords[__<generation>]`
# What is analysed for each chunk: its heading chain as a context header, then its content
# (`unichunk.chunking.models.embed_text`, the text its vector is computed from); only `content` is stored as the
# chunk's text. Part of the stored terms' signature, so a store indexed from content alone is re-analysed
# once on open.
INDEXED_TEXT = "headings+content"
# Okapi BM25's term-frequency saturation and length normalisation. k1 1.2 (was 1.5) was chosen for issue 27
# on the tune half of ../shared/eval with the fusion tuned again for each value (`benchmarks.ranker_tuning`,
# benchmarks/README.md); b kept. Scored at query time, so a change needs no re-index.
K1 = 1.2
B = 0.75
# A refresh that loaded at least this share of the index's rows (or was a full load) saves it again.
RESAVE_FRACTION = 0.1


def stored_terms(counts: Iterable[Counter[str]]) -> list[tuple[str, bytes, int]]:
    """Each chunk's term counts in their stored form: distinct terms space-separated (in order of first
    use, so the same text always gives the same row), their counts as little-endian uint32, the length."""
    return [(" ".join(c), struct.pack(f"<{len(c)}I", *c.values()), sum(c.values())) for c in counts]


# The search filter keys this store answers inside its query: by document, and by access label (the labels
# table: `term_store.py`).
FILTER_KEYS = ("document_id", "labels")


def _stored(
    row: Sequence[Any], score: float | None = None, labels: Mapping[str, tuple[str, ...]] | None = None
) -> StoredChunk:
    fields = (row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5], tuple(json.loads(row[6])))
    extra = {} if labels is None else {"labels": list(labels.get(row[1], ()))}
    if score is None:
        return StoredChunk(*fields, extra=extra)
    return ScoredChunk(*fields, extra=extra, score=score)


class BM25Sink(Sink):
    """Keyword sink. `BM25Sink(settings)` stores at `settings.bm25_path / "bm25.sqlite"`, or in the
    PostgreSQL database of `settings.database_url`; `path=` names a SQLite file instead (then without
    settings the analyzer is the default one)."""

    name: ClassVar[str] = "keywords"

    def __init__(
        self,
        settings: SinkSettings | None = None,
        *,
        path: Path | str | None = None,
        analyzer: Analyzer | None = None,
        k1: float = K1,
        b: float = B,
        method: str = "lucene",
    ) -> None:
        if settings is None and path is None:
            raise TypeError("BM25Sink needs its settings, or the path of its SQLite file")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, not {method!r}")
        if analyzer is None:
            analyzer = (
                Analyzer()
                if settings is None
                else Analyzer(stemming=settings.bm25_stemming, stopwords=settings.bm25_stopwords)
            )
        self.analyzer = analyzer
        self.k1, self.b, self.method = k1, b, method
        self._index_lock = threading.Lock()  # one refresh at a time
        self._vocab: Vocabulary = vocabulary()
        self._postings = Postings()
        self.last_refresh: dict[str, float] = {}  # what the last index refresh loaded, for stats()
        self._snapshot: Snapshot | None = None
        self._saved_revision: int | None = None  # revision of the saved index file, if this process knows it
        self._loaded_since_save = 0
        try:
            if path is not None:
                self.path: Path | None = Path(path)
                db = Database.sqlite(self.path)
            else:
                assert settings is not None  # checked above
                sqlite_path = settings.bm25_path / "bm25.sqlite"
                db = open_store_database(settings, sqlite_path, STORE, generation=settings.generation)
                self.path = sqlite_path if db.dialect == "sqlite" else None
            self.store = TermStore(db)
            if self.store.open(self.terms_signature) != self.terms_signature:
                # Stored terms from other analyzer settings (or other text) would not match queries as terms
                # made now do: re-analyse them once.
                self.store.reanalyze(self.terms_signature, self._analyse_stored)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"cannot open {self._where()}: {exc}") from exc

    @classmethod
    def from_settings(cls, settings: SinkSettings) -> BM25Sink:
        """The keyword store of the generation `settings` names, with its analyzer settings."""
        return cls(settings)

    def _where(self) -> str:
        store = getattr(self, "store", None)
        if store is not None and store.db.schema is not None:
            return f"PostgreSQL schema {store.db.schema}"
        return str(self.path)

    @property
    def _saved_path(self) -> Path | None:
        """Where the index is saved: beside the SQLite file; nowhere in server mode (module docstring)."""
        return None if self.path is None else self.path.with_name(self.path.stem + ".index.npz")

    @property
    def terms_signature(self) -> str:
        """Names how stored terms were made: the analyzer's settings and the text analysed (INDEXED_TEXT)."""
        return f"{self.analyzer.signature}|{INDEXED_TEXT}"

    def _analyse(self, texts: list[str]) -> list[tuple[str, bytes, int]]:
        return stored_terms(self.analyzer.iter_counts(texts))

    def _analyse_stored(self, rows: list[tuple[str, str]]) -> list[tuple[str, bytes, int]]:
        """Terms of stored (content, heading chain JSON) rows, analysed as `prepare` analyses a chunk."""
        return self._analyse(
            [embed_text(tuple(json.loads(chain or "[]")), content) for content, chain in rows]
        )

    # -- Sink API ------------------------------------------------------------------------------------

    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        """Analyse every chunk's heading chain and content (`Chunk.embed_text`: the only place the analyzer
        runs on chunk text); stores the content alone as its text; writes nothing."""
        documents, chunks = group_batch(self.name, batch)
        flat = [chunk for doc_chunks in chunks.values() for chunk in doc_chunks]
        if self.store.db.dialect == "postgresql":
            for chunk in flat:  # PostgreSQL text cannot hold NUL; content is stored as bytes, IDs are not
                if "\x00" in chunk.chunk_id:
                    raise InvalidRequest(self.name, f"chunk ID {chunk.chunk_id!r} holds a NUL character")
        rows = []
        total_terms = 0
        for chunk, (terms, tfs, doc_len) in zip(
            flat, self._analyse([c.embed_text for c in flat]), strict=True
        ):
            total_terms += doc_len
            row = (
                chunk.chunk_id,
                chunk.document_id,
                chunk.chunk_index,
                chunk.start_char,
                chunk.end_char,
                chunk.content,
                json.dumps(list(chunk.heading_chain), ensure_ascii=False) if chunk.heading_chain else "[]",
                terms,
                tfs,
                doc_len,
            )
            rows.append(row)  # in term_store.COLUMNS order
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
        keep = {doc_id: [c.chunk_id for c in doc_chunks] for doc_id, doc_chunks in prepared.chunks.items()}
        labels = {d.document_id: document_labels(d.metadata) for d in prepared.documents}
        try:
            self.store.replace(prepared.payload, keep, labels)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"write failed: {exc}") from exc
        return prepared.chunk_count

    def delete(self, document_id: str) -> int:
        try:
            return self.store.delete(document_id)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"delete failed: {exc}") from exc

    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        return self.store.chunk_ids(document_id)

    def relabel(self, document_id: str, labels: Sequence[str]) -> int:
        """Set the document's labels (its own table: no terms, postings or revision change)."""
        return self.relabel_many({document_id: labels})

    def relabel_many(self, labels: Mapping[str, Sequence[str]]) -> int:
        """`relabel` for several documents, in one transaction."""
        wanted = {document_id: normalise_labels(found) for document_id, found in labels.items()}
        try:
            return self.store.relabel(wanted)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"relabel failed: {exc}") from exc

    def chunk_labels(self, document_id: str | None = None) -> dict[str, tuple[str, ...]]:
        try:
            return self.store.chunk_labels(document_id)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"read failed: {exc}") from exc

    def content_hashes(self, document_id: str | None = None) -> dict[str, str]:
        """SHA-256 of each stored row's content as the store gives it back (decoded), a page at a time."""
        return {
            chunk_id: NO_CONTENT_HASH if content is None else sha256_hex(content)
            for chunk_id, content in self.store.contents(document_id)
        }

    def close(self) -> None:
        self._snapshot = None
        self._postings = Postings()
        self.store.close()
        if self.path is not None:
            # Close the file's idle pooled connections (three descriptors each in WAL mode): a process that
            # opens many stores in turn (tests, a service switching generations) must not keep them all.
            # Another sink on the same file just opens a new connection.
            self.store.db.engine.dispose()

    def drop(self) -> None:
        """Delete the store: the SQLite file (with its WAL, shared memory and saved index), or the
        PostgreSQL schema with its tables."""
        self.close()
        self.store.drop()
        if self.path is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        if (saved := self._saved_path) is not None:
            saved.unlink(missing_ok=True)

    # -- search --------------------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, filter: SearchFilter | None = None) -> list[ScoredChunk]:
        """Top-k chunks by BM25 over the current store; [] for a query with no indexable terms.

        `filter` may name `document_id` and `labels`: the documents they let through are the candidates
        scored, so `k` hits come back whenever `k` matching chunks hold a query term."""
        filters = filter_values(self.name, filter, FILTER_KEYS)
        if k <= 0 or matches_nothing(filters):
            return []
        allowed = filters.get("document_id")
        if "labels" in filters:
            labelled = self._labelled(filters["labels"])
            allowed = labelled if allowed is None else sorted(set(allowed) & set(labelled))
            if not allowed:
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
        scores = snap.scores(ids)
        candidates = np.flatnonzero(scores > 0) if allowed is None else snap.positions_of(allowed)
        candidates = candidates[scores[candidates] > 0]
        if len(candidates) > k:
            candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
        ranked = sorted(candidates.tolist(), key=lambda p: (-scores[p], p))
        hits = [(snap.chunk_ids[p], float(scores[p])) for p in ranked]
        # The rows are read under the same filter: a chunk deleted, or relabelled out of reach, by a writer
        # since the snapshot was taken is left out.
        rows = self._rows((chunk_id for chunk_id, _ in hits), filters)
        by_id = {r[0]: r for r in rows}
        labels = self._labels(rows)
        return [_stored(by_id[chunk_id], score, labels) for chunk_id, score in hits if chunk_id in by_id]

    def score_texts(self, query: str, texts: Sequence[str]) -> list[float]:
        """BM25 of each text for `query` as if it were a chunk of this index (its document frequencies and
        average length): how a passage of a stored chunk compares with the chunk's other passages. All
        0 for a query with no indexed term, or an empty index."""
        snap = self._current()
        tokens = self.analyzer(query)
        if snap is None or not tokens or not texts:
            return [0.0] * len(texts)
        ids = [i for t in tokens if (i := self._vocab.get(t)) is not None and i < snap.n_vocab]
        counts = self.analyzer.count_many(texts)
        by_id = [{i: n for t, n in c.items() if (i := self._vocab.get(t)) is not None} for c in counts]
        return snap.score_counts(ids, by_id, [sum(c.values()) for c in counts])

    def _rows(
        self, chunk_ids: Iterable[str], filters: Mapping[str, Sequence[str]] | None = None
    ) -> list[tuple[Any, ...]]:
        try:
            return self.store.rows(chunk_ids, filters)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"read failed: {exc}") from exc

    def _labelled(self, labels: Sequence[str]) -> list[str]:
        try:
            return self.store.labelled_documents(labels)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"read failed: {exc}") from exc

    def _labels(self, rows: Sequence[tuple[Any, ...]]) -> dict[str, tuple[str, ...]]:
        """The labels of the rows' documents, for `StoredChunk.extra["labels"]`."""
        try:
            return self.store.document_labels(r[1] for r in rows)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"read failed: {exc}") from exc

    def get_chunks(
        self, chunk_ids: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, StoredChunk]:
        """Stored chunks by ID that `filter` lets through (the others, and absent IDs, are left out): the
        query side's source of text and offsets."""
        filters = filter_values(self.name, filter, FILTER_KEYS)
        if matches_nothing(filters):
            return {}
        rows = self._rows(chunk_ids, filters)
        labels = self._labels(rows)
        return {r[0]: _stored(r, labels=labels) for r in rows}

    def chunks_at(
        self, document_id: str, indexes: Iterable[int], filter: SearchFilter | None = None
    ) -> list[StoredChunk]:
        """A document's chunks at these `chunk_index` positions that `filter` lets through, in index order
        (neighbour expansion)."""
        filters = filter_values(self.name, filter, FILTER_KEYS)
        wanted = sorted({int(i) for i in indexes if int(i) >= 0})
        if not wanted or matches_nothing(filters):
            return []
        try:
            rows = self.store.rows_at(document_id, wanted, filters)
        except SQLAlchemyError as exc:
            raise SinkError(self.name, f"read failed: {exc}") from exc
        labels = self._labels(rows)
        return [_stored(r, labels=labels) for r in rows]

    def _current(self) -> Snapshot | None:
        """The index of the store's current revision, refreshed from changed rows if stale."""
        snap = self._snapshot
        if snap is not None and snap.revision == self.store.revision():
            return snap
        with self._index_lock:
            try:
                return self._refresh()
            except BaseException as exc:
                # The postings may be half-updated: start over from the store on the next query.
                self._snapshot, self._postings, self._vocab = None, Postings(), vocabulary()
                if isinstance(exc, ValueError | SQLAlchemyError):
                    raise SinkError(self.name, f"cannot index {self._where()}: {exc}") from exc
                raise

    def _refresh(self) -> Snapshot | None:
        started = time.perf_counter()
        resumed = False
        if self._snapshot is None and (saved := self._load_saved()) is not None:
            self._postings, self._vocab, since = saved.postings, saved.vocab, saved.revision
            resumed = True
        else:
            since = None if self._snapshot is None else self._snapshot.revision
        with self.store.changes(since) as changes:
            if self._snapshot is not None and changes.revision == self._snapshot.revision:
                return self._snapshot
            if changes.full:
                self._postings = Postings()  # (re)load everything; the vocabulary may keep its IDs
            pages = [Loaded.from_rows(page, self._vocab) for page in changes.pages]
        loaded = Loaded.concat(pages) if pages else None
        postings = self._postings
        n_loaded = len(loaded.chunk_ids) if loaded is not None else 0
        dropped = postings.remove([*changes.removed, *(loaded.chunk_ids if loaded is not None else ())])
        if loaded is not None:
            postings.add(loaded)
        if postings.needs_merge():
            postings.merge()
        if (
            resumed
            and not changes.full
            and (postings.n_live, round(postings.total_len)) != self.store.totals()
        ):
            # The saved index does not describe this store (a file restored beside another one, a cache
            # of a database since replaced): its revision matched, its chunks and terms do not.
            self._postings, self._saved_revision = Postings(), None
            return self._refresh_in_full()
        self._snapshot = postings.snapshot(
            changes.revision, len(self._vocab), k1=self.k1, b=self.b, method=self.method
        )
        self.last_refresh = {
            "loaded_rows": n_loaded,
            "dropped_rows": dropped,
            "seconds": time.perf_counter() - started,
            "from_saved_index": float(resumed and not changes.full),
        }
        self._loaded_since_save += n_loaded + dropped
        if changes.full or self._loaded_since_save >= RESAVE_FRACTION * max(postings.n_live, 1):
            self._save(changes.revision)
        return self._snapshot

    def _refresh_in_full(self) -> Snapshot | None:
        self._snapshot, self._vocab = None, vocabulary()
        saved_path = self._saved_path
        if saved_path is not None:
            saved_path.unlink(missing_ok=True)
        return self._refresh()

    def _load_saved(self) -> saved_index.SavedIndex | None:
        path = self._saved_path
        if path is None:
            return None
        saved = saved_index.load(path, self.terms_signature)
        if saved is not None:
            self._saved_revision = saved.revision
        return saved

    def _save(self, revision: int) -> None:
        path = self._saved_path
        if path is None or revision == self._saved_revision:
            return
        saved = saved_index.SavedIndex(revision, self.terms_signature, self._postings, self._vocab)
        if saved_index.save(path, saved):
            self._saved_revision, self._loaded_since_save = revision, 0

    def stats(self) -> dict[str, Any]:
        """Store and index figures, for health checks and the CLI."""
        chunks, documents, total_len = self.store.counts()
        snap = self._snapshot
        return {
            "path": self._where(),
            "chunks": chunks,
            "documents": documents,
            "avg_chunk_terms": (total_len / chunks) if chunks else 0.0,
            "revision": self.store.revision(),
            "indexed_revision": snap.revision if snap else None,
            "vocabulary": snap.n_vocab if snap else None,
            "last_refresh": dict(self.last_refresh),
            "method": self.method,
            "k1": self.k1,
            "b": self.b,
            "analyzer": self.terms_signature,
        }
