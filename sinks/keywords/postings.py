"""The in-memory BM25 index the keyword sink scores with, kept current by patching instead of rebuilding.

`Postings` holds the live chunks' term postings sorted by term, so adding or removing rows costs a mask
or an insert, never a re-sort of the corpus; `CountsBM25` turns them into bm25s' score matrix with numpy;
a `Snapshot` is one immutable, queryable state of the index at one store revision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

import bm25s
import numpy as np
import scipy.sparse
from bm25s.scoring import _build_idf_array, _select_idf_scorer, _select_tfc_scorer

METHODS = ("lucene", "robertson", "atire")


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
class Loaded:
    """Stored rows turned into arrays: row i owns `sizes[i]` consecutive entries of `terms`/`tfs`."""

    chunk_ids: list[str]
    document_ids: list[str]
    doc_lens: np.ndarray
    sizes: np.ndarray
    terms: np.ndarray
    tfs: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[str, str, str, bytes, int]], vocab: dict[str, int]) -> Loaded:
        """Stored terms -> vocabulary IDs: one split of the page's terms and dictionary lookups (in C, via
        map), no analysis. A row's term count is its frequency blob's length / 4."""
        rows = list(rows)
        n = len(rows)
        blob = b"".join([bytes(r[3]) for r in rows])
        sizes = np.fromiter((len(r[3]) for r in rows), dtype=np.int64, count=n) // 4
        # Terms hold no whitespace, so splitting the joined page gives each row's terms in turn.
        keys = " ".join([r[2] for r in rows]).split()
        if len(keys) != int(sizes.sum()) or len(blob) != 4 * len(keys):
            raise ValueError("a stored row's terms and frequencies disagree (written by something else?)")
        for term in dict.fromkeys(keys).keys() - vocab.keys():
            vocab[term] = len(vocab)
        return cls(
            chunk_ids=[r[0] for r in rows],
            document_ids=[r[1] for r in rows],
            doc_lens=np.fromiter((r[4] for r in rows), dtype=np.int64, count=n),
            sizes=sizes,
            terms=np.fromiter(map(vocab.__getitem__, keys), dtype=np.int32, count=len(keys)),
            tfs=np.frombuffer(blob, dtype="<u4").astype(np.float32),
        )

    @classmethod
    def concat(cls, parts: Sequence[Loaded]) -> Loaded:
        """One `Loaded` of several pages, in page order."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            chunk_ids=list(chain.from_iterable(p.chunk_ids for p in parts)),
            document_ids=list(chain.from_iterable(p.document_ids for p in parts)),
            doc_lens=np.concatenate([p.doc_lens for p in parts]) if parts else np.empty(0, np.int64),
            sizes=np.concatenate([p.sizes for p in parts]) if parts else np.empty(0, np.int64),
            terms=np.concatenate([p.terms for p in parts]) if parts else np.empty(0, np.int32),
            tfs=np.concatenate([p.tfs for p in parts]) if parts else np.empty(0, np.float32),
        )


class Postings:
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

    def add(self, loaded: Loaded) -> None:
        n = len(loaded.chunk_ids)
        if not n:
            return
        first = len(self.chunk_ids)
        self.chunk_ids = [*self.chunk_ids, *loaded.chunk_ids]  # a new list: snapshots keep theirs
        self.position.update(zip(loaded.chunk_ids, range(first, first + n), strict=True))
        codes = [self.codes.setdefault(d, len(self.codes)) for d in loaded.document_ids]
        self.doc_codes = np.concatenate([self.doc_codes, np.asarray(codes, dtype=np.int64)])
        self.doc_lens = np.concatenate([self.doc_lens, loaded.doc_lens])
        terms, rows, tfs = _by_term(loaded, first)
        if not len(self.terms):  # a full load: nothing to insert into
            self.terms, self.tfs, self.rows = terms, tfs, rows
            return
        at = np.searchsorted(self.terms, terms, side="right")
        self.terms = np.insert(self.terms, at, terms)
        self.tfs = np.insert(self.tfs, at, tfs)
        self.rows = np.insert(self.rows, at, rows)


def _by_term(loaded: Loaded, first: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The loaded postings sorted by (term, row), rows numbered from `first`: the rows' term lists as a
    sparse rows x terms matrix, turned column-major by scipy (a counting sort in C, stable in row order,
    several times faster than a stable argsort of the terms)."""
    n = len(loaded.chunk_ids)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(loaded.sizes, out=indptr[1:])
    n_terms = int(loaded.terms.max(initial=-1)) + 1
    by_row = scipy.sparse.csr_matrix((loaded.tfs, loaded.terms, indptr), shape=(n, n_terms))
    by_term = by_row.tocsc()
    terms = np.repeat(np.arange(n_terms, dtype=np.int32), np.diff(by_term.indptr))
    return terms, by_term.indices.astype(np.int64) + first, by_term.data.astype(np.float32, copy=False)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """An immutable, queryable index of one store revision (searches run on it outside the lock)."""

    revision: int
    retriever: CountsBM25
    chunk_ids: list[str]
    doc_codes: np.ndarray
    codes: dict[str, int]
    n_vocab: int

    def positions_of(self, document_ids: Sequence[str]) -> np.ndarray:
        codes = [self.codes[d] for d in document_ids if d in self.codes]
        return np.flatnonzero(np.isin(self.doc_codes, codes)) if codes else np.empty(0, dtype=np.int64)
