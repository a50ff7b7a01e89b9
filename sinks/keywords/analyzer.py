"""The one analyzer the BM25 sink runs over chunk texts at index time and over queries at search time.

Index and query must agree token for token, or a query term silently never matches; keeping a single
`Analyzer` (and storing its output, so a rebuild never re-runs it) is how the sink guarantees that.
It never raises on odd input: a query is plain text here, so `AND`, `"`, `*`, `:` or `(` are just
characters that either form word tokens or are dropped.

A batch is analysed in one pass with no per-word Python step: each text is normalised and split on
whitespace, and its pieces' terms (regex, stopwords, PyStemmer), computed the first time the batch meets a
piece, are chained and counted in C. Real text repeats its pieces, so few words reach the regex and the
stemmer; no text's pieces outlive its count, so the garbage collector never walks a whole batch of them.
Splitting first changes no token: no whitespace character is a word character or CJK.
"""

from __future__ import annotations

import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import chain

import regex
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

# CJK scripts are written without spaces, so a run of them is cut into overlapping bigrams (the
# Lucene CJKBigramFilter approach): no dictionary needed, and a query bigram matches inside words.
# Hangul is spaced like Latin text and stays a word token. U+30FC (the katakana prolonged sound mark,
# script "Common") belongs inside katakana words.
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\u30fc"
# Letters/digits only: underscores and every punctuation or operator character separate tokens.
_TOKEN = regex.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W_{_CJK}]+)", regex.UNICODE)
_WORD = regex.compile(rf"[^\W_{_CJK}]+", regex.UNICODE)  # fast path (one C call) for text without CJK
_HAS_CJK = regex.compile(rf"[{_CJK}]", regex.UNICODE)

ENGLISH_STOPWORDS: frozenset[str] = frozenset(STOPWORDS_EN)


class Analyzer:
    """Text -> terms: NFKC + casefold, Unicode word tokens, CJK bigrams, optional stopwords and stemming.

    `signature` names the settings, so the sink can tell that stored terms came from another analyzer.
    """

    def __init__(self, *, stemming: bool = True, stopwords: bool = True, language: str = "english") -> None:
        self.stemming = stemming
        self.stopwords: frozenset[str] = ENGLISH_STOPWORDS if stopwords else frozenset()
        self.language = language
        # PyStemmer objects are not thread-safe and Prefect runs tasks in threads: one per thread.
        self._local = threading.local()

    @property
    def signature(self) -> str:
        return f"v1:{self.language}:stem={int(self.stemming)}:stop={int(bool(self.stopwords))}"

    def _stemmer(self) -> Stemmer.Stemmer:
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = Stemmer.Stemmer(self.language)
        return stemmer

    def words(self, text: str) -> list[str]:
        """Normalised word tokens before stopwords and stemming (CJK runs already cut into bigrams)."""
        return _words(_normalise(text))

    def __call__(self, text: str) -> list[str]:
        """The terms of `text`, in order, with repeats (BM25 needs term frequencies and lengths)."""
        return self.analyze_many([text])[0]

    def analyze_many(self, texts: Iterable[str]) -> list[list[str]]:
        """The terms of each text, as `self(text)` gives them, analysed as one batch (module docstring)."""
        terms_of = self._terms_of_pieces().__getitem__
        return [list(chain.from_iterable(map(terms_of, _normalise(text).split()))) for text in texts]

    def count_many(self, texts: Iterable[str]) -> list[Counter[str]]:
        """Each text's term frequencies (what BM25 stores), in order of first use."""
        return list(self.iter_counts(texts))

    def iter_counts(self, texts: Iterable[str]) -> Iterator[Counter[str]]:
        """`count_many`, one text at a time: a caller that turns each count into its stored form at once
        keeps no batch of dicts alive for the garbage collector to walk again and again."""
        terms_of = self._terms_of_pieces().__getitem__
        for text in texts:
            yield Counter(chain.from_iterable(map(terms_of, _normalise(text).split())))

    def _terms_of_pieces(self) -> _PieceTerms:
        """A fresh piece -> terms cache for one batch (so its size is bounded by the batch)."""
        stemmer = self._stemmer() if self.stemming else None
        return _PieceTerms(self.stopwords, None if stemmer is None else stemmer.stemWords)


class _PieceTerms(dict[str, tuple[str, ...]]):
    """Whitespace-separated piece of normalised text -> its terms, computed on first lookup: its word
    tokens (CJK bigrams), less stopwords, stemmed. Hits are a plain C dict lookup."""

    def __init__(self, stopwords: frozenset[str], stem: Callable[[list[str]], list[str]] | None) -> None:
        super().__init__()
        self._stopwords, self._stem = stopwords, stem

    def __missing__(self, piece: str) -> tuple[str, ...]:
        words = [w for w in _words(piece) if w not in self._stopwords]
        terms = self[piece] = tuple(self._stem(words) if self._stem is not None and words else words)
        return terms


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _words(normalised: str) -> list[str]:
    if not _HAS_CJK.search(normalised):
        return _WORD.findall(normalised)
    out: list[str] = []
    for match in _TOKEN.finditer(normalised):
        word = match["word"]
        if word is not None:
            out.append(word)
        else:
            out.extend(_bigrams(match["cjk"]))
    return out


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]
