"""The `semantic` strategy: boundaries where adjacent sentences' embeddings diverge, under the cap.

Most tests use small, real, deterministic embedding functions (a hashed bag of words; a two-topic lexicon
count), so expected boundaries can be worked out by hand and properties checked on any text; one runs the
real all-MiniLM-L6-v2. Offsets are exact, chunks ordered and non-overlapping, every non-space character
kept, the cap and the embedder's limit hold, and the same input gives the same chunk IDs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from texts import GARDEN, TOPICS, hashed_words

from unichunk.chunking.config import MINILM_MAX_TOKENS, ChunkStrategy, EmbeddingBudget
from unichunk.chunking.embedding_fit import embedding_counter
from unichunk.chunking.models import Document
from unichunk.chunking.semantic import SemanticChunkingError, sentence_distances
from unichunk.chunking.service import ChunkingService
from unichunk.chunking.tokenizer import TokenCounter
from unichunk.index.run import RunConfig
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.minilm import MiniLMEmbedder

SEMANTIC = ChunkStrategy(name="semantic")
HARBOUR_WORDS = frozenset(["harbour", "crane", "cargo", "ship", "tide", "pilot", "channel", "tanker", "fishermen", "nets", "quay", "boats", "lighthouse", "vessel", "customs", "ships", "dredger", "ferries", "bay", "berth", "moored", "port", "trawlers"])  # fmt: skip
GARDEN_WORDS = frozenset(["tomatoes", "sun", "watering", "compost", "soil", "vegetable", "beds", "bees", "apple", "blossom", "orchard", "mulch", "weeds", "roots", "roses", "gardener", "prunes", "pear", "trees"])  # fmt: skip


def lexicon(texts: list[str]) -> list[list[float]]:
    """(harbour words, garden words) per text: two topics, two directions."""
    out = []
    for text in texts:
        words = re.findall(r"[a-z]+", text.lower())
        out.append(
            [float(sum(w in HARBOUR_WORDS for w in words)), float(sum(w in GARDEN_WORDS for w in words))]
        )
    return out


def _chunks(text: str, strategy: ChunkStrategy = SEMANTIC, embed=hashed_words):
    return ChunkingService().chunk(Document(text=text, source_system="t", source_id="x.txt"), strategy, embed)


def test_the_boundary_falls_where_the_topic_changes() -> None:
    harbour, garden = " ".join(TOPICS), " ".join(GARDEN)
    text = f"{harbour} {garden}"
    chunks = _chunks(text, SEMANTIC, lexicon)
    assert [(c.start_char, c.end_char) for c in chunks] == [(0, len(harbour)), (len(harbour) + 1, len(text))]
    assert chunks[0].content == harbour and chunks[1].content == garden


def test_distances_are_cosine_and_a_zero_vector_is_unlike_everything() -> None:
    vectors = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [0.0, 0.0]])
    assert sentence_distances(vectors) == pytest.approx([0.0, 1.0, 1.0])


def test_a_stretch_over_the_cap_is_cut_at_its_most_divergent_gap_and_never_into_slivers() -> None:
    text = " ".join(f"{s} (note {i})" for i in range(6) for s in TOPICS)  # one topic, ~1,000 tokens
    strategy = SEMANTIC.model_copy(update={"chunk_size": 128})
    chunks = _chunks(text, strategy)
    counter = TokenCounter()
    assert len(chunks) >= 8
    assert all(counter.count(c.content) <= 128 for c in chunks)
    assert all(c.token_count >= 64 for c in chunks[:-1])  # forced cuts leave at least half the cap


def test_without_an_embedding_function_it_says_what_it_needs() -> None:
    with pytest.raises(SemanticChunkingError, match="needs an embedding function"):
        ChunkingService().chunk(Document(text="One. Two. Three."), SEMANTIC)
    with pytest.raises(SemanticChunkingError, match="returned 1 vectors for 3 sentences"):
        _chunks("One here. Two there. Three everywhere.", embed=lambda texts: [[1.0]])


def test_sizes_fit_the_embedder_and_only_semantic_hashes_its_settings() -> None:
    assert SEMANTIC.sizes_for("semantic") == (220, 0)  # 86 % of MiniLM's 256, like auto
    openai = EmbeddingBudget(max_tokens=8191, tokenizer="cl100k_base")
    assert SEMANTIC.model_copy(update={"embedding": openai}).sizes_for("semantic") == (512, 0)
    assert SEMANTIC.fingerprint() != SEMANTIC.model_copy(update={"semantic_model": "other"}).fingerprint()
    assert SEMANTIC.fingerprint() != SEMANTIC.model_copy(update={"semantic_percentile": 90.0}).fingerprint()
    for name in ("auto", "sentence", "markdown"):  # settings another strategy never reads leave it alone
        plain = ChunkStrategy(name=name)
        assert plain.fingerprint() == plain.model_copy(update={"semantic_percentile": 80.0}).fingerprint()


def test_the_pipeline_names_the_embedder_and_passes_it_only_to_semantic(tmp_path) -> None:
    run = RunConfig(SEMANTIC, SinkSettings(data_dir=tmp_path))
    assert run.strategy.semantic_model.startswith("all-MiniLM-L6-v2") and run.chunk_embedding() is not None
    assert run.strategy.semantic_model == run.settings.embedder_identity()  # "+bf16" where auto picks it
    other = RunConfig(SEMANTIC, SinkSettings(data_dir=tmp_path, embedder="openai", embedding_model="m"))
    assert (
        other.strategy.semantic_model.startswith("openai:m")
        and other.chunk_fingerprint != run.chunk_fingerprint
    )
    assert RunConfig(ChunkStrategy(), SinkSettings(data_dir=tmp_path)).chunk_embedding() is None


_WORDS = st.sampled_from(["harbour", "ship", "tide", "rose", "bee", "soil", "a", "the", "Ship", "x" * 30,
                          "é", "数据", "🙂", "1.5", "e.g."])  # fmt: skip
_ENDS = st.sampled_from([". ", "! ", "? ", "\n\n", " ", ", ", ".\n"])


@st.composite
def texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(st.lists(_WORDS, min_size=1, max_size=40), _ENDS), max_size=60))
    return draw(st.sampled_from(["", "  ", "\n"])) + "".join(" ".join(words) + end for words, end in parts)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts(), st.sampled_from([128, 220]), st.sampled_from([0, 1, 2]), st.sampled_from([50.0, 95.0, 100.0]))
def test_offsets_exact_order_coverage_cap_and_determinism(text, cap, window, percentile) -> None:
    strategy = SEMANTIC.model_copy(update={"chunk_size": cap, "semantic_window": window,
                                           "semantic_percentile": percentile})  # fmt: skip
    chunks = _chunks(text, strategy)
    again = ChunkingService().chunk(
        Document(text=text, source_system="t", source_id="x.txt"), strategy, hashed_words
    )
    assert [c.chunk_id for c in again] == [c.chunk_id for c in chunks]  # deterministic, new service too
    covered = np.zeros(len(text), dtype=bool)
    previous_end = 0
    for c in chunks:
        assert text[c.start_char : c.end_char] == c.content and c.content == c.content.strip()
        assert c.start_char >= previous_end  # in order, no overlap
        previous_end = c.end_char
        covered[c.start_char : c.end_char] = True
        assert TokenCounter().count(c.content) <= cap
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))  # no character lost
    fits = embedding_counter("minilm").fits_many([c.embed_text for c in chunks], MINILM_MAX_TOKENS)
    assert all(fits)


def test_minilm_places_the_boundary_at_the_topic_change() -> None:
    """The real all-MiniLM-L6-v2 (the default embedder), as the pipeline passes it."""
    harbour, garden = " ".join(TOPICS), " ".join(GARDEN)
    text = f"{harbour}\n\n{garden}"
    embed = MiniLMEmbedder().embed
    chunks = _chunks(text, embed=embed)
    assert next(c.end_char for c in chunks) == len(harbour)  # the harbour sentences end the first chunk
    # a window of one sentence each side (Kamradt's) smooths the distances and moves the cut by one
    windowed = _chunks(text, SEMANTIC.model_copy(update={"semantic_window": 1}), embed)
    assert windowed[0].end_char == len(harbour) + 2 + len(GARDEN[0])
    assert chunks[-1].end_char == len(text) and chunks[-1].content.endswith(GARDEN[-1])
    assert [c.chunk_id for c in _chunks(text, embed=embed)] == [c.chunk_id for c in chunks]
