"""The scoring index saved beside the embedded keyword store, so opening it loads arrays instead of rebuilding.

Rebuilding the in-memory index from the store means reading every row and mapping every stored term to
a vocabulary ID in Python (seconds at 100k chunks); loading the same postings from one `.npz` file is a
few array reads. The file holds the postings merged into one segment (term-sorted, with chunk and
document IDs and lengths), the vocabulary and the store revision they reflect, and nothing that is not derived from the store: it is a
cache. It is only ever trusted as a *starting point*: the sink applies the store's changes after the saved
revision (the same change log every reader follows), and reloads from the store when the saved revision
is older than the removal log, when the analyzer differs, or when the chunk count disagrees afterwards.

Written atomically (a temporary file in the same directory, then `os.replace`), so a reader never loads
half a file and two processes saving at once leave one whole file. Plain arrays only (`allow_pickle` off):
a tampered file cannot run code, at worst it fails to load and the sink rebuilds.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unichunk.sinks.keywords.postings import Postings, Segment, Vocabulary, vocabulary

logger = logging.getLogger(__name__)

FORMAT = 2  # 1: one flat postings list with per-posting term IDs (before segments)


@dataclass
class SavedIndex:
    revision: int
    analyzer: str
    postings: Postings
    vocab: Vocabulary


def _strings(values: list[str]) -> np.ndarray:
    return np.frombuffer(
        json.dumps(values, ensure_ascii=False).encode("utf-8", "surrogatepass"), dtype=np.uint8
    )


def _unstrings(array: np.ndarray) -> list[str]:
    return json.loads(array.tobytes().decode("utf-8", "surrogatepass"))


def save(path: Path, saved: SavedIndex) -> bool:
    """Write `saved` to `path` atomically (merging its postings into one segment first); False (logged)
    if the directory is not writable."""
    p = saved.postings
    if len(p.segments) != 1 or p.n_live != len(p.chunk_ids):
        p.merge()
    if not p.segments:
        return False
    (segment,) = p.segments
    meta = {"format": FORMAT, "revision": saved.revision, "analyzer": saved.analyzer}
    arrays = {
        "indptr": segment.indptr,
        "rows": segment.rows,
        "tfs": segment.tfs,
        "doc_lens": p.doc_lens,
        "doc_codes": p.doc_codes,
        "meta": _strings([json.dumps(meta)]),
        "chunk_ids": _strings(p.chunk_ids),
        "codes": _strings(list(p.codes)),
        "vocab": _strings(list(saved.vocab)),  # in ID order: IDs are dense, in insertion order
    }
    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        logger.info("the BM25 index could not be saved to %s (%s); the next open rebuilds it", path, exc)
        return False
    return True


def load(path: Path, analyzer: str) -> SavedIndex | None:
    """The index saved at `path`, or None if there is none or it is unreadable, of another format or made
    with another analyzer (the caller then rebuilds from the store)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(_unstrings(data["meta"])[0])
            if meta.get("format") != FORMAT or meta.get("analyzer") != analyzer:
                return None
            segment = Segment(
                data["indptr"].astype(np.int64), data["rows"].astype(np.int32), data["tfs"].astype(np.float32)
            )
            doc_lens, doc_codes = data["doc_lens"].astype(np.float32), data["doc_codes"].astype(np.int32)
            chunk_ids = _unstrings(data["chunk_ids"])
            codes = {code: i for i, code in enumerate(_unstrings(data["codes"]))}
            terms = _unstrings(data["vocab"])
            vocab = vocabulary(terms)
    except FileNotFoundError:
        return None
    except Exception as exc:  # damaged or foreign file: a cache miss, never an error for the caller
        logger.info("ignoring the saved BM25 index at %s: %s", path, exc)
        return None
    n = len(chunk_ids)
    consistent = (
        len(segment.rows) == len(segment.tfs) == int(segment.indptr[-1])
        and len(vocab) == len(terms)
        and segment.n_terms <= len(vocab)
        and bool(np.all(np.diff(segment.indptr) >= 0))
        and len(doc_lens) == len(doc_codes) == n
        and len(set(chunk_ids)) == n
        and (len(segment.rows) == 0 or (int(segment.rows.min()) >= 0 and int(segment.rows.max()) < n))
        and (n == 0 or (int(doc_codes.min()) >= 0 and int(doc_codes.max()) < len(codes)))
    )
    if not consistent:
        logger.info("ignoring the saved BM25 index at %s: its arrays disagree", path)
        return None
    p = Postings()
    p.segments, p.chunk_ids, p.doc_lens, p.doc_codes, p.codes = (
        [segment],
        chunk_ids,
        doc_lens,
        doc_codes,
        codes,
    )
    p.position = {c: i for i, c in enumerate(chunk_ids)}
    p.alive = np.ones(n, dtype=bool)
    p.total_len = float(doc_lens.sum(dtype=np.float64))
    return SavedIndex(int(meta["revision"]), analyzer, p, vocab)
