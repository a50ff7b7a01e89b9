"""The one analyzer the BM25 sink runs over chunk texts at index time and over queries at search time.

Index and query must agree token for token, or a query term silently never matches; keeping a single
`Analyzer` (and storing its output, so a rebuild never re-runs it) is how the sink guarantees that.
It never raises on odd input: a query is plain text here, so `AND`, `"`, `*`, `:` or `(` are just
characters that either form word tokens or are dropped.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Iterable

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
        normalised = unicodedata.normalize("NFKC", text).casefold()
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

    def __call__(self, text: str) -> list[str]:
        """The terms of `text`, in order, with repeats (BM25 needs term frequencies and lengths)."""
        words = self.words(text)
        if self.stopwords:
            words = [w for w in words if w not in self.stopwords]
        if self.stemming and words:
            words = self._stemmer().stemWords(words)
        return words

    def analyze_many(self, texts: Iterable[str]) -> list[list[str]]:
        return [self(text) for text in texts]


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]
