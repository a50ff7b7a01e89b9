"""The in-memory BM25 index the keyword sink scores with: term-sorted postings in segments, scored at query time.

Postings keep only what a chunk contributes (its term frequencies; its length per row), and a query computes
BM25 over its own terms' postings with N, df and the average length as they are now, as Lucene does. An
eager score matrix (bm25s') stores finished scores, which depend on the whole corpus, so one added document
would mean recomputing every score in every serving process; here a change touches only what changed: a
refresh appends a small segment and marks removed or replaced rows dead, and segments merge (dead rows
dropped) once the small ones or the dead rows pass `MERGE_FRACTION` of the whole.

Formulas are bm25s' (Kamphuis et al., ECIR 2020: "lucene" by default, "robertson", "atire"), checked
against stock bm25s in `tests/sinks/test_sinks_bm25.py`. A `Snapshot` is one immutable, queryable state,
so searches run outside the sink's lock.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import scipy.sparse

METHODS = ("lucene", "robertson", "atire")
# Merge when the segments after the first, or the dead rows, exceed this share of all postings / rows.
MERGE_FRACTION = 0.1
MAX_SEGMENTS = 16


def _idf_lucene(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def _idf_robertson(df: int, n: int) -> float:
    return math.log(max((n - df + 0.5) / (df + 0.5), 1.0))  # bm25s clips at 0


def _idf_atire(df: int, n: int) -> float:
    return math.log(n / df)


def _tfc_robertson(tf: np.ndarray, length: np.ndarray, avg: float, k1: float, b: float) -> np.ndarray:
    return tf / (k1 * ((1 - b) + b * length / avg) + tf)  # lucene's too


def _tfc_atire(tf: np.ndarray, length: np.ndarray, avg: float, k1: float, b: float) -> np.ndarray:
    return tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))


_IDF: dict[str, Callable[[int, int], float]] = {
    "lucene": _idf_lucene,
    "robertson": _idf_robertson,
    "atire": _idf_atire,
}
_TFC = {"lucene": _tfc_robertson, "robertson": _tfc_robertson, "atire": _tfc_atire}


Vocabulary = defaultdict[str, int]


def vocabulary(terms: Iterable[str] = ()) -> Vocabulary:
    """Term -> dense ID, in order of first sight. Looking up a new term with `[]` gives it the next ID (so
    mapping a page of terms is one C-level pass); readers use `.get`, which never adds one."""
    vocab: Vocabulary = defaultdict(itertools.count().__next__)
    for term in terms:
        vocab[term]
    return vocab


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
    def from_rows(cls, rows: Sequence[tuple[str, str, str, bytes, int]], vocab: Vocabulary) -> Loaded:
        """Stored terms -> vocabulary IDs: each row's terms split and looked up in the dictionary (in C,
        via chain/map straight into the array: no list of the page's terms; a new term takes the next ID
        there too), no analysis. A row's term count is its frequency blob's length / 4."""
        rows = list(rows)
        n = len(rows)
        blob = b"".join([bytes(r[3]) for r in rows])
        sizes = np.fromiter((len(r[3]) for r in rows), dtype=np.int64, count=n) // 4
        n_terms = len(blob) // 4
        # Terms hold no whitespace, so splitting each row's terms gives them in turn.
        keys = chain.from_iterable(map(str.split, [r[2] for r in rows]))
        try:
            terms = np.fromiter(map(vocab.__getitem__, keys), dtype=np.int32, count=n_terms)
        except ValueError:  # fewer terms than frequencies
            terms = None
        if terms is None or next(keys, None) is not None or len(blob) % 4 or int(sizes.sum()) != n_terms:
            raise ValueError("a stored row's terms and frequencies disagree (written by something else?)")
        return cls(
            chunk_ids=[r[0] for r in rows],
            document_ids=[r[1] for r in rows],
            doc_lens=np.fromiter((r[4] for r in rows), dtype=np.float32, count=n),
            sizes=sizes,
            terms=terms,
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
            doc_lens=np.concatenate([p.doc_lens for p in parts]),
            sizes=np.concatenate([p.sizes for p in parts]),
            terms=np.concatenate([p.terms for p in parts]),
            tfs=np.concatenate([p.tfs for p in parts]),
        )


@dataclass(frozen=True)
class Segment:
    """Postings sorted by (term, row): term t's are `rows/tfs[indptr[t]:indptr[t + 1]]` (t < n_terms)."""

    indptr: np.ndarray
    rows: np.ndarray  # int32 row numbers of the index
    tfs: np.ndarray  # float32

    @property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        if term >= self.n_terms:
            return self.rows[:0], self.tfs[:0]
        start, stop = self.indptr[term], self.indptr[term + 1]
        return self.rows[start:stop], self.tfs[start:stop]

    @classmethod
    def of(cls, loaded: Loaded, first: int) -> Segment:
        """The loaded rows' postings, rows numbered from `first`, sorted by term: the rows' term lists as
        a sparse rows x terms matrix turned column-major by scipy (a counting sort in C, stable in row
        order, several times faster than a stable argsort)."""
        n = len(loaded.chunk_ids)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(loaded.sizes, out=indptr[1:])
        n_terms = int(loaded.terms.max(initial=-1)) + 1
        by_row = scipy.sparse.csr_matrix((loaded.tfs, loaded.terms, indptr), shape=(n, n_terms))
        by_term = by_row.tocsc()
        return cls(
            by_term.indptr.astype(np.int64),
            by_term.indices.astype(np.int32) + np.int32(first),
            by_term.data.astype(np.float32, copy=False),
        )


def _merged(segments: Sequence[Segment], alive: np.ndarray) -> Segment:
    """One segment of the live postings of `segments`, rows renumbered densely in their old order."""
    n_terms = max(s.n_terms for s in segments)
    renumber = (np.cumsum(alive) - 1).astype(np.int32)
    terms, rows, tfs = [], [], []
    for s in segments:
        t = np.repeat(np.arange(s.n_terms, dtype=np.int32), np.diff(s.indptr))
        keep = alive[s.rows]
        terms.append(t[keep])
        rows.append(renumber[s.rows[keep]])
        tfs.append(s.tfs[keep])
    all_terms = np.concatenate(terms)
    # Later segments hold later rows, so a stable sort by term keeps rows ascending within each term; the
    # input is a few sorted runs, which timsort merges in near-linear time.
    order = np.argsort(all_terms, kind="stable")
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(all_terms, minlength=n_terms), out=indptr[1:])
    return Segment(indptr, np.concatenate(rows)[order], np.concatenate(tfs)[order])


class Postings:
    """The live index under construction (the sink's, changed only under its index lock)."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.chunk_ids: list[str] = []  # row -> chunk ID (a dead row keeps its old ID until a merge)
        self.position: dict[str, int] = {}  # live chunk ID -> row
        self.alive = np.empty(0, dtype=bool)
        self.doc_lens = np.empty(0, dtype=np.float32)
        self.doc_codes = np.empty(0, dtype=np.int32)  # row -> code of its document, for filters
        self.codes: dict[str, int] = {}  # only ever grows, so snapshots may share it
        self.total_len = 0.0

    @property
    def n_live(self) -> int:
        return len(self.position)

    @property
    def n_postings(self) -> int:
        return sum(len(s.rows) for s in self.segments)

    def remove(self, chunk_ids: Iterable[str]) -> int:
        """Mark the rows of these chunks dead (absent IDs are ignored); returns how many were live."""
        rows = [row for c in chunk_ids if (row := self.position.pop(c, None)) is not None]
        if rows:
            self.alive = self.alive.copy()  # a snapshot may hold the old mask
            self.alive[rows] = False
            self.total_len -= float(self.doc_lens[rows].sum(dtype=np.float64))
        return len(rows)

    def add(self, loaded: Loaded) -> None:
        """Append the loaded rows as a new segment (their chunk IDs must not be live: `remove` first)."""
        n = len(loaded.chunk_ids)
        if not n:
            return
        first = len(self.chunk_ids)
        self.segments = [*self.segments, Segment.of(loaded, first)]
        self.chunk_ids = [*self.chunk_ids, *loaded.chunk_ids]  # a new list: snapshots keep theirs
        self.position.update(zip(loaded.chunk_ids, range(first, first + n), strict=True))
        codes = [self.codes.setdefault(d, len(self.codes)) for d in loaded.document_ids]
        self.doc_codes = np.concatenate([self.doc_codes, np.asarray(codes, dtype=np.int32)])
        self.doc_lens = np.concatenate([self.doc_lens, loaded.doc_lens.astype(np.float32)])
        self.alive = np.concatenate([self.alive, np.ones(n, dtype=bool)])
        self.total_len += float(loaded.doc_lens.sum(dtype=np.float64))

    def needs_merge(self) -> bool:
        rows = len(self.chunk_ids)
        if len(self.segments) > MAX_SEGMENTS or rows - self.n_live > MERGE_FRACTION * rows:
            return True
        if len(self.segments) < 2:
            return False
        return sum(len(s.rows) for s in self.segments[1:]) > MERGE_FRACTION * len(self.segments[0].rows)

    def merge(self) -> None:
        """One segment of the live rows only, renumbered (O(postings): paid once per MERGE_FRACTION)."""
        if not self.segments:
            return
        alive = self.alive
        self.segments = [_merged(self.segments, alive)]
        kept = np.flatnonzero(alive)
        self.chunk_ids = [self.chunk_ids[i] for i in kept.tolist()]
        self.position = {c: i for i, c in enumerate(self.chunk_ids)}
        self.doc_lens, self.doc_codes = self.doc_lens[kept], self.doc_codes[kept]
        self.alive = np.ones(len(kept), dtype=bool)
        self.total_len = float(self.doc_lens.sum(dtype=np.float64))  # and any float drift is gone

    def snapshot(self, revision: int, n_vocab: int, *, k1: float, b: float, method: str) -> Snapshot:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}")
        n = self.n_live
        return Snapshot(
            revision=revision,
            segments=tuple(self.segments),
            chunk_ids=self.chunk_ids,
            alive=self.alive,
            doc_lens=self.doc_lens,
            doc_codes=self.doc_codes,
            codes=self.codes,
            n_live=n,
            avg_len=self.total_len / n if n else 0.0,
            n_vocab=n_vocab,
            k1=k1,
            b=b,
            method=method,
        )


@dataclass(frozen=True, eq=False)
class Snapshot:
    """An immutable, queryable index of one store revision (searches run on it outside the lock)."""

    revision: int
    segments: tuple[Segment, ...]
    chunk_ids: list[str]
    alive: np.ndarray
    doc_lens: np.ndarray
    doc_codes: np.ndarray
    codes: dict[str, int]
    n_live: int
    avg_len: float
    n_vocab: int
    k1: float
    b: float
    method: str

    def scores(self, term_ids: Sequence[int]) -> np.ndarray:
        """BM25 of every row for these query terms (a repeated term counts again, as in bm25s); dead rows
        score 0. Each term's df is its live postings, counted here."""
        scores = np.zeros(len(self.alive), dtype=np.float32)
        if not self.segments:
            return scores
        idf_of, tfc_of = _IDF[self.method], _TFC[self.method]
        for term, repeats in Counter(term_ids).items():
            rows, tfs = self._live_postings(term)
            if not len(rows):
                continue
            idf = idf_of(len(rows), self.n_live)
            tfc = tfc_of(tfs, self.doc_lens[rows], self.avg_len, self.k1, self.b)
            scores[rows] += np.float32(repeats * idf) * tfc  # a term's rows are distinct
        return scores

    def score_counts(
        self, term_ids: Sequence[int], counts: Sequence[Mapping[int, int]], lengths: Sequence[int]
    ) -> list[float]:
        """BM25 of texts that are not rows (each given by its term counts and length), scored as if they
        were: this index's document frequencies and average length. A query term no row holds adds 0."""
        scores = np.zeros(len(counts), dtype=np.float64)
        if not self.segments or not counts:
            return scores.tolist()
        idf_of, tfc_of = _IDF[self.method], _TFC[self.method]
        length = np.asarray(lengths, dtype=np.float32)
        for term, repeats in Counter(term_ids).items():
            df = len(self._live_postings(term)[0])
            if not df:
                continue
            tf = np.asarray([c.get(term, 0) for c in counts], dtype=np.float32)
            scores += repeats * idf_of(df, self.n_live) * tfc_of(tf, length, self.avg_len, self.k1, self.b)
        return scores.tolist()

    def _live_postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """The live rows holding `term` and its frequency in each."""
        parts = [s.postings(term) for s in self.segments]
        rows = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        tfs = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        live = self.alive[rows]
        return (rows, tfs) if live.all() else (rows[live], tfs[live])

    @property
    def live_chunk_ids(self) -> list[str]:
        """The chunks this snapshot holds (`chunk_ids` also names dead rows until the next merge)."""
        return [c for c, alive in zip(self.chunk_ids, self.alive.tolist(), strict=True) if alive]

    def positions_of(self, document_ids: Sequence[str]) -> np.ndarray:
        codes = [self.codes[d] for d in document_ids if d in self.codes]
        if not codes:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(np.isin(self.doc_codes, codes) & self.alive)
