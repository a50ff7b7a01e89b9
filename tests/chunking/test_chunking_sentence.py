"""sentence: sentence-aware packing to 512 tokens with 128 overlap, compared with LlamaIndex's semantics."""

from __future__ import annotations

import itertools
import re

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.sentence import SentenceChunker, clause_spans
from unichunk.chunking.sentences import sentence_spans
from unichunk.chunking.tokenizer import TokenCounter

COUNTER = TokenCounter()


def prose(n_sentences: int) -> str:
    return " ".join(
        f"Sentence number {i} talks about topic {i % 13} and its many details." for i in range(n_sentences)
    )


def test_chunks_are_whole_sentences_within_512_tokens_with_overlap() -> None:
    text = prose(400)
    chunks = SentenceChunker(ChunkStrategy(name="sentence")).chunk(Document(text=text))
    assert len(chunks) > 5
    boundaries = {s for s, _ in sentence_spans(text)} | {e for _, e in sentence_spans(text)}
    for chunk in chunks:
        assert chunk.token_count <= 512
        assert chunk.token_count == COUNTER.count(chunk.content)
        assert chunk.start_char in boundaries and chunk.end_char in boundaries
    for previous, following in itertools.pairwise(chunks):
        overlap = text[following.start_char : previous.end_char]
        assert following.start_char < previous.end_char
        assert 0 < COUNTER.count(overlap) <= 128
    # packing is greedy: chunks are nearly full (one more sentence would not fit)
    assert all(c.token_count > 512 - 20 for c in chunks[:-1])


def test_overlong_sentence_is_cut_at_clauses_before_words() -> None:
    clause = "a clause with several plain words in it"
    text = ", ".join([clause] * 200) + "."
    chunks = SentenceChunker(ChunkStrategy(name="sentence", chunk_size=128, chunk_overlap=16)).chunk(
        Document(text=text)
    )
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.token_count <= 128
        assert chunk.content.startswith("a clause")
        assert re.search(r"(in it,?|it\.)$", chunk.content)


def test_clause_spans_cut_after_punctuation_followed_by_space_and_cjk_commas() -> None:
    text = "one, two; three: four,five 甲，乙、丙"
    assert [text[s:e] for s, e in clause_spans(text, 0, len(text))] == [
        "one,",
        "two;",
        "three:",
        "four,five 甲，",
        "乙、",
        "丙",
    ]


def test_matches_llamaindex_sentence_splitter_size_semantics() -> None:
    from llama_index.core.node_parser import SentenceSplitter

    text = prose(300)
    ours = SentenceChunker(ChunkStrategy(name="sentence")).chunk(Document(text=text))
    theirs = SentenceSplitter(chunk_size=512, chunk_overlap=128).split_text(text)
    # same budget, same unit (sentences): chunk counts agree within one
    assert abs(len(ours) - len(theirs)) <= 1
    assert max(COUNTER.count(t) for t in theirs) <= 512
