"""`ChunkStrategy`: which strategy to run and with what settings, validated once.

It is a pydantic-settings model, so the same object is read from `UNICHUNK_CHUNK_*` environment variables
(`ChunkStrategy()`, by an entry point only), passed as a Prefect flow parameter, or built in code; code below
the entry points that needs a strategy nobody gave takes the built-in one (`default_strategy`).
Sizes left unset take the defaults of the chosen strategy (`sizes_for()`), so one model serves all
strategies without each having its own config class. `auto`, the shipped default, picks the strategy by
document type and, for unset sizes, the sizes the retrieval benchmark backs (`AUTO_DEFAULTS`), lowered to fit
the embedder the chunks are for (`EmbeddingBudget`; the pipeline fills it in from the sink settings).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from unichunk.chunking.ids import sha256_hex

StrategyName = Literal[
    "auto", "token_window", "fixed_chars", "sentence", "paragraph", "markdown", "html", "semantic"
]

# (chunk_size, chunk_overlap) per strategy. Units: tokens, except fixed_chars (characters).
STRATEGY_DEFAULTS: dict[str, tuple[int, int]] = {
    "token_window": (900, 100),
    "fixed_chars": (900, 120),
    "sentence": (512, 128),
    "paragraph": (512, 0),
    "markdown": (512, 0),
    "html": (512, 0),  # html packs by words (target/max/min_words); chunk_size is a token ceiling
    # semantic: a cap, not a target (boundaries follow the text); lowered to fit the embedder like auto's
    # sizes (`EmbeddingBudget.auto_sizes`), and no overlap: a boundary at a topic shift is the point.
    "semantic": (512, 0),
}
# Strategies whose chunks are fitted to the embedder (`EmbeddingBudget`): default sizes lowered to fit its
# limit, and a final pass (`unichunk.chunking.embedding_fit`) cutting any chunk whose embedded text is still over.
FITTED_STRATEGIES = frozenset({"auto", "semantic"})
# Settings only the semantic strategy reads: hashed into its fingerprint alone, so adding them left every
# other strategy's chunks valid.
SEMANTIC_FIELDS = frozenset({"semantic_percentile", "semantic_window", "semantic_model"})

DocumentKind = Literal["markdown", "html", "text"]

# What `auto` runs per document kind: (strategy, chunk_size, chunk_overlap), the sizes used only where the
# user left chunk_size / chunk_overlap unset, and lowered to fit the embedder (`EmbeddingBudget.auto_sizes`).
# "text" is plain text, PDF, email and anything unrecognised; markdown splits like sentence inside sections.
# 176/88 are half-overlapping windows (the passage-retrieval classic: every stretch of text lies in two
# chunks, one of them nearer its middle), the size chosen by the strict budgeted metric on the eval set
# (benchmarks/README.md, "Strict, budgeted retrieval quality"): against 220/33 it recalls more of the answer
# at every budget with every ranker (fixed BM25 on each corpus too), for twice the chunks. The metric
# knows no embedder, so the sizes hold for embedders with a larger input too (OpenAI's 8191); under
# all-MiniLM-L6-v2 they already fit (its cap is 220, below). html keeps its own word packing under the token
# ceiling.
AUTO_DEFAULTS: dict[str, tuple[str, int, int]] = {
    "text": ("sentence", 176, 88),
    "markdown": ("markdown", 176, 88),
    "html": ("html", *STRATEGY_DEFAULTS["html"]),
}

# all-MiniLM-L6-v2 (the default embedder) reads at most 256 word pieces, [CLS] and [SEP] included.
MINILM_MAX_TOKENS = 256
MINILM_TOKENIZER = "minilm"
MINILM_MODEL_NAME = "all-MiniLM-L6-v2"
# `auto`'s size is at most this share of the embedder's limit, in cl100k tokens: room for the heading chain
# embedded with each chunk and for a tokenizer counting more than cl100k (word pieces split punctuation and
# code finer). all-MiniLM-L6-v2: 256 -> a cap of 220, which the final pass (`unichunk.chunking.embedding_fit`) still
# cuts for 1 chunk in 250 of the eval corpora at 220/33 (240 tokens: 1 in 110; 250: 1 in 16). A size
# lowered to fit keeps the default's share of overlap (`overlap_at`).
AUTO_BUDGET_SHARE = 0.86


class EmbeddingBudget(BaseModel):
    """The input limit of the embedder the chunks are embedded by: under `auto` no chunk's embedded text
    (`Chunk.embed_text`: heading chain + content) is longer than `max_tokens` counted by `tokenizer`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int = Field(MINILM_MAX_TOKENS, ge=32, le=1_000_000, description="The embedder's input limit.")
    tokenizer: str = Field(
        MINILM_TOKENIZER,
        description="How the limit is counted: `minilm` (all-MiniLM-L6-v2's word pieces, [CLS]/[SEP] "
        "included) or a tiktoken encoding name (e.g. `cl100k_base`).",
    )

    def __str__(self) -> str:  # as UNICHUNK_CHUNK_EMBEDDING takes it (and docs/configuration.md shows it)
        return self.model_dump_json()

    def auto_sizes(self, size: int, overlap: int) -> tuple[int, int]:
        """`auto`'s (size, overlap) under this budget: at most AUTO_BUDGET_SHARE of the limit, the
        overlap keeping its share of the size."""
        fitted = min(size, int(self.max_tokens * AUTO_BUDGET_SHARE))
        return fitted, overlap_at(fitted, size, overlap)


def overlap_at(size: int, default_size: int, default_overlap: int) -> int:
    """A default overlap carried to another size at the same share (half of 176 is 88, half of 300 150),
    so a resized window still overlaps as the benchmarked one did."""
    return default_overlap if size == default_size else round(size * default_overlap / default_size)


# The largest document a loader reads unless its caller says otherwise (`SinkSettings.max_document_bytes`
# is the configured limit a run passes down).
DEFAULT_MAX_DOCUMENT_BYTES = 64 * 1024 * 1024

_VALUES_ONLY: ContextVar[bool] = ContextVar("unichunk_settings_values_only", default=False)


class ValueSettings(BaseSettings):
    """A settings model an entry point reads from the environment (`Model()`), and any other code builds
    from values alone (`Model.from_values(...)`): pydantic-settings reads the environment on every
    validation, `model_validate` included, filling whatever the values leave out."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if _VALUES_ONLY.get():
            return (init_settings,)
        return (init_settings, env_settings, dotenv_settings, file_secret_settings)

    @classmethod
    def from_values(cls, values: Mapping[str, Any] | str | bytes) -> Self:
        """Validated from `values` (a mapping or JSON) and the defaults, never from the environment."""
        token = _VALUES_ONLY.set(True)
        try:
            if isinstance(values, str | bytes):
                return cls.model_validate_json(values)
            return cls.model_validate(values)
        finally:
            _VALUES_ONLY.reset(token)


class ChunkStrategy(ValueSettings):
    """Chunking settings. Unset sizes mean "the strategy's default" (see STRATEGY_DEFAULTS)."""

    model_config = SettingsConfigDict(env_prefix="UNICHUNK_CHUNK_", extra="ignore", frozen=True)

    name: StrategyName = Field("auto", description="Strategy; auto picks by mime type / file extension.")
    tokenizer: str = Field("cl100k_base", description="tiktoken encoding used to measure tokens.")
    chunk_size: int | None = Field(
        None, ge=128, le=2048, description="Max chunk size (tokens; chars for fixed_chars)."
    )
    chunk_overlap: int | None = Field(None, ge=0, le=512, description="Overlap between consecutive chunks.")
    single_piece_max: int = Field(
        1200, ge=128, le=8192, description="token_window: documents up to this many tokens stay whole."
    )
    prefer_sentence_end: bool = Field(
        False, description="fixed_chars: move a cut back to a sentence end when one is near."
    )
    paragraph_separator: str = Field(
        r"\n[ \t]*\n", description="paragraph: regular expression separating paragraphs."
    )
    html_mode: Literal["auto", "structured", "flat"] = Field(
        "auto", description="html: structured tags or flat <p> (PDF-like)."
    )
    target_words: int = Field(300, ge=20, le=2000, description="html: words to aim for per chunk.")
    max_words: int = Field(400, ge=20, le=4000, description="html: hard word ceiling per chunk.")
    min_words: int = Field(
        50, ge=0, le=1000, description="html: fragments shorter than this merge into the previous chunk."
    )
    overlap_sentences: int = Field(
        2, ge=0, le=10, description="html: sentences repeated at the start of the next chunk."
    )
    semantic_percentile: float = Field(
        95.0,
        ge=50.0,
        le=100.0,
        description="semantic: a boundary goes where adjacent sentences' embedding distance is above this "
        "percentile of the document's distances (95, as Kamradt and LlamaIndex's SemanticSplitter).",
    )
    semantic_window: int = Field(
        0,
        ge=0,
        le=5,
        description="semantic: sentences on each side embedded with each sentence (0: each alone; "
        "benchmarks/README.md compares 0 and Kamradt's 1).",
    )
    semantic_model: str = Field(
        "",
        description="semantic: the embedder its boundaries are computed with; the pipeline sets it from "
        "UNICHUNK_EMBEDDER / UNICHUNK_EMBEDDING_MODEL, so chunks cut with another model are not reused.",
    )
    embedding: EmbeddingBudget = Field(
        default_factory=EmbeddingBudget,
        description="auto: the embedder's input limit no chunk (heading chain included) exceeds; auto's "
        "default sizes shrink to fit it. The pipeline sets it from UNICHUNK_EMBEDDER and "
        "UNICHUNK_EMBEDDING_MAX_TOKENS; the default is all-MiniLM-L6-v2's.",
    )

    @model_validator(mode="after")
    def _check_sizes(self) -> ChunkStrategy:
        if (
            self.chunk_size is not None
            and self.chunk_overlap is not None
            and self.chunk_overlap >= self.chunk_size
        ):
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})"
            )
        if not self.min_words <= self.target_words <= self.max_words:
            raise ValueError("html word sizes must satisfy min_words <= target_words <= max_words")
        return self

    def sizes_for(self, strategy: str) -> tuple[int, int]:
        """(chunk_size, chunk_overlap) for `strategy`, filling unset values with its defaults (semantic's
        default cap fitted to the embedder, as `auto`'s sizes are)."""
        if strategy == "semantic":
            return self._fill(*self.embedding.auto_sizes(*STRATEGY_DEFAULTS[strategy]))
        return self._fill(*STRATEGY_DEFAULTS[strategy])

    def _fill(self, default_size: int, default_overlap: int) -> tuple[int, int]:
        size = self.chunk_size if self.chunk_size is not None else default_size
        overlap = self.chunk_overlap if self.chunk_overlap is not None else min(default_overlap, size - 1)
        if overlap >= size:
            raise ValueError(f"chunk_overlap ({overlap}) must be smaller than chunk_size ({size})")
        return size, overlap

    def for_kind(self, kind: DocumentKind) -> ChunkStrategy:
        """The concrete settings for a document of `kind`: itself unless `auto`, else AUTO_DEFAULTS[kind]
        with its sizes (fitted to `embedding`) filling only what was left unset (an explicit size or overlap
        always wins)."""
        if self.name != "auto":
            return self
        name, default_size, default_overlap = AUTO_DEFAULTS[kind]
        size, overlap = self.embedding.auto_sizes(default_size, default_overlap)
        if self.chunk_size is not None:  # a size set alone keeps the default's share of overlap
            size, overlap = self.chunk_size, overlap_at(self.chunk_size, default_size, default_overlap)
        size, overlap = self._fill(size, overlap)
        return self.model_copy(update={"name": name, "chunk_size": size, "chunk_overlap": overlap})

    def effective(self) -> dict[str, object]:
        """What the unset sizes resolve to: `auto`'s per-kind choice, or the strategy's own sizes."""
        if self.name == "auto":
            return {kind: [s.name, s.chunk_size, s.chunk_overlap] for kind in AUTO_DEFAULTS
                    for s in [self.for_kind(kind)]}  # fmt: skip
        return {self.name: list(self.sizes_for(self.name))}

    @property
    def fits_embedder(self) -> bool:
        """Whether this strategy's chunks are fitted to `embedding` (FITTED_STRATEGIES)."""
        return self.name in FITTED_STRATEGIES

    def settings_payload(self) -> dict[str, object]:
        """Every setting, as JSON-ready data; the embedding budget only for the strategies it changes and
        the semantic settings only for `semantic` (so a fingerprint moves only with what cut its chunks)."""
        excluded = set() if self.fits_embedder else {"embedding"}
        if self.name != "semantic":
            excluded |= SEMANTIC_FIELDS
        return self.model_dump(mode="json", exclude=excluded or None)

    def fingerprint(self) -> str:
        """Stable hash of every setting and of the sizes they resolve to: chunks made under equal
        fingerprints are interchangeable. The resolved sizes are hashed because an unset size follows
        STRATEGY_DEFAULTS / AUTO_DEFAULTS, and a changed default must invalidate chunks made under the old one;
        with both sizes set explicitly the defaults cannot matter and the hash is the settings' alone."""
        payload: dict[str, object] = self.settings_payload()
        if self.name == "auto" or self.chunk_size is None or self.chunk_overlap is None:
            payload = {"settings": payload, "effective": self.effective()}
        return sha256_hex(json.dumps(payload, sort_keys=True))[:16]


def default_strategy(name: StrategyName = "auto") -> ChunkStrategy:
    """The built-in settings of strategy `name`, whatever the environment holds: `ChunkStrategy()` reads
    UNICHUNK_CHUNK_* variables, which only an entry point may read (a library call must not change its
    chunks with the process's environment)."""
    return ChunkStrategy.from_values({"name": name})
