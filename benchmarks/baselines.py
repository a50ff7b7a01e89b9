"""The chunkers we measure ourselves against, cut on the same documents and scored the same way.

- LlamaIndex `SentenceSplitter` (cl100k tokens) at 512/128 (the issue's) and 200/30 (a size near `auto`'s);
- a plain token window, 800 tokens every 400 (the issue's fixed window);
- chonkie's `TokenChunker`, `SentenceChunker` (512/128) and `RecursiveChunker` (512) on cl100k, and its
  `SemanticChunker` on the same all-MiniLM-L6-v2 our `semantic` strategy uses (chunk size 512 MiniLM
  tokens, chonkie's default threshold and windows), its embeddings going through the benchmark's cache.

chonkie gives exact start/end offsets, so its chunks are used as they are; LlamaIndex's are located in the
text (it may rejoin whitespace), and one that cannot be found is dropped and counted (`LOST`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from chonkie import RecursiveChunker, SemanticChunker, SentenceChunker, TokenChunker
from chonkie.embeddings import SentenceTransformerEmbeddings
from llama_index.core.node_parser import SentenceSplitter

from unichunk.chunking.ids import make_chunk_id, sha256_hex
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.packing import token_starts
from unichunk.chunking.tokenizer import TokenCounter, get_encoding
from unichunk.sinks.vectors.minilm import load_minilm

Chunker = Callable[[Document], list[Chunk]]
Config = tuple[str, bool, Chunker]  # (label, is_baseline, chunker)
Embed = Callable[[list[str]], list[list[float]]]
LOST = [0]  # SentenceSplitter chunks that could not be located in the text


def chunks_from_spans(
    document: Document, spans: Iterable[tuple[int, int]], counter: TokenCounter
) -> list[Chunk]:
    """A baseline's (start, end) spans as Chunks (taken as given: a baseline may overlap or go back)."""
    chunks = []
    for index, (start, end) in enumerate(spans):
        content = document.text[start:end]
        chunks.append(
            Chunk(
                chunk_id=make_chunk_id(document.document_id, index, content),
                document_id=document.document_id, chunk_index=index, content=content,
                start_char=start, end_char=end, token_count=counter.count(content),
                content_hash=sha256_hex(content),
            )
        )  # fmt: skip
    return chunks


def fixed_token_window(size: int, overlap: int) -> Chunker:
    """The plain baseline: windows of `size` tokens every `size - overlap` tokens, nothing else."""
    counter = TokenCounter()

    def chunk(document: Document) -> list[Chunk]:
        starts = token_starts(document.text)
        n = len(starts) - 1
        spans = []
        for first in range(0, max(n, 1), size - overlap):
            spans.append((int(starts[first]), int(starts[min(first + size, n)])))
            if first + size >= n:
                break
        return chunks_from_spans(document, spans, counter)

    return chunk


def llama_sentence_splitter(size: int, overlap: int) -> Chunker:
    """LlamaIndex SentenceSplitter (cl100k tokens); its chunks are located in the text to get offsets.

    It may rejoin sentences with normalised whitespace; a chunk not found verbatim is located by its first
    and last 40 characters, and one not found at all is dropped (counted in `LOST`).
    """
    splitter = SentenceSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=get_encoding().encode)
    counter = TokenCounter()

    def chunk(document: Document) -> list[Chunk]:
        text, spans, cursor = document.text, [], 0
        for piece in splitter.split_text(text):
            at = text.find(piece, cursor)
            if at < 0:
                at = text.find(piece, 0)
            if at >= 0:
                spans.append((at, at + len(piece)))
            else:
                head, tail = piece[:40], piece[-40:]
                s = text.find(head, cursor)
                e = text.find(tail, max(s, 0))
                if s < 0 or e < 0:
                    LOST[0] += 1
                    continue
                at = s
                spans.append((s, e + len(tail)))
            cursor = max(cursor, at + 1)
        return chunks_from_spans(document, spans, counter)

    return chunk


class CachedChonkieEmbeddings(SentenceTransformerEmbeddings):
    """chonkie's sentence-transformers embeddings on the bundled MiniLM, computed through `embed` (the
    benchmark's sha256 cache), so its SemanticChunker costs a cold run once, like our `semantic`."""

    def __init__(self, embed: Embed) -> None:
        super().__init__(load_minilm())
        self._cached = embed

    def embed(self, text: str) -> np.ndarray:
        return np.asarray(self._cached([text])[0], dtype=np.float32)

    def embed_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(v, dtype=np.float32) for v in self._cached(list(texts))] if texts else []


def _chonkie(chunker: object) -> Chunker:
    counter = TokenCounter()

    def chunk(document: Document) -> list[Chunk]:
        pieces = chunker(document.text)  # type: ignore[operator]
        return chunks_from_spans(document, [(p.start_index, p.end_index) for p in pieces], counter)

    return chunk


def baselines(quick: bool, embed: Embed) -> list[Config]:
    """Every baseline (`quick`: SentenceSplitter 512/128 and the window only)."""
    encoding = get_encoding()
    out: list[Config] = [
        ("llama SentenceSplitter 512/128", True, llama_sentence_splitter(512, 128)),
        ("fixed token window 800/400", True, fixed_token_window(800, 400)),
    ]
    if quick:
        return out
    return [
        *out,
        ("llama SentenceSplitter 200/30", True, llama_sentence_splitter(200, 30)),
        ("chonkie TokenChunker 512/128", True, _chonkie(TokenChunker(tokenizer=encoding, chunk_size=512, chunk_overlap=128))),
        ("chonkie SentenceChunker 512/128", True, _chonkie(SentenceChunker(tokenizer=encoding, chunk_size=512, chunk_overlap=128))),
        ("chonkie RecursiveChunker 512", True, _chonkie(RecursiveChunker(tokenizer=encoding, chunk_size=512))),
        ("chonkie SemanticChunker 512 (MiniLM)", True, _chonkie(SemanticChunker(embedding_model=CachedChonkieEmbeddings(embed), chunk_size=512))),
    ]  # fmt: skip
