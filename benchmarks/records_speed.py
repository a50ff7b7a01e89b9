"""The pipeline's record calls per batch against the same calls per document: `python -m benchmarks.records_speed`.

One batch's bookkeeping as `ingest` does it (`unichunk.index.chunk_batch`, `unichunk.index.sink_writes`, `unichunk.engine.leases`):
lease the batch, read its status rows, look its chunk keys up in the cache, store the chunks, mark the rows
processing, read the chunk lists back, mark them processed, prune old versions, release the leases. The
baseline makes the same calls one document at a time, the shape of a pipeline with a round trip per
document. Both run on the embedded SQLite files and, given a PostgreSQL (--database-url, else
UNICHUNK_DATABASE_URL), in server mode, in the same process and run, so the figures compare. Over a network
each round trip costs the latency once more; on loopback it is mostly the server's per-statement work.
Options: --documents N (default 1024), --batch N (64), --quick (256 documents), --database-url URL.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

from pydantic import SecretStr

from unichunk.chunking.base import Span, chunks_from_spans
from unichunk.chunking.models import Chunk, Document
from unichunk.index.chunk_cache import ChunkCache, ChunkKey
from unichunk.index.document_leases import DocumentLeases
from unichunk.index.status import StatusStore, processed_fields, processing_fields
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import open_database

FINGERPRINT = "bench-fp"


def make_documents(count: int, tag: str) -> list[tuple[Document, list[Chunk]]]:
    """`count` documents of three paragraphs (about 1.5 KB), each paragraph one chunk."""
    documents = []
    for n in range(count):
        paragraphs = [
            f"Document {n} paragraph {p}: " + "the records of a batch are written together. " * 10
            for p in range(3)
        ]
        document = Document(text="\n\n".join(paragraphs), source_system=f"bench-{tag}", source_id=f"{n}.md")
        spans, start = [], 0
        for paragraph in paragraphs:
            spans.append(Span(start, start + len(paragraph), 1, ()))
            start += len(paragraph) + 2
        documents.append((document, chunks_from_spans(document, spans)))
    return documents


class Records:
    """The three record stores of one run on one backend."""

    def __init__(self, settings: SinkSettings, generation: str) -> None:
        self.settings = settings.for_generation(generation)
        self.status = StatusStore.of(self.settings)
        self.cache = ChunkCache.of(settings)
        self.leases = DocumentLeases.of(settings)
        self.generation = generation

    def batch(self, entries: list[tuple[Document, list[Chunk]]], holder: str) -> None:
        """One batch's bookkeeping, as the pipeline does it now."""
        ids = [d.document_id for d, _ in entries]
        keys = [ChunkKey(d.document_id, d.content_hash, FINGERPRINT) for d, _ in entries]
        self.leases.acquire(holder, self.generation, ids, 600)
        self.status.get_many(ids)
        cached = self.cache.existing(keys)
        self.cache.put_many([e for e, k in zip(entries, keys, strict=True) if k not in cached], FINGERPRINT)
        self.status.upsert_many((d, processing_fields(source_id=d)) for d in ids)
        chunk_lists = self.cache.get_chunks_many(keys)
        self.status.upsert_many(
            (
                k.document_id,
                processed_fields([c.chunk_id for c in chunk_lists[k]], content_hash=k.content_hash),
            )
            for k in keys
        )
        self.cache.prune_many(keys)
        self.leases.release(holder, self.generation, ids)

    def per_document(self, entries: list[tuple[Document, list[Chunk]]], holder: str) -> None:
        """The same calls, one document at a time (the baseline)."""
        for document, chunks in entries:
            document_id = document.document_id
            key = ChunkKey(document_id, document.content_hash, FINGERPRINT)
            self.leases.acquire(holder, self.generation, [document_id], 600)
            self.status.get(document_id)
            if not self.cache.has(key):
                self.cache.put(document, FINGERPRINT, chunks)
            self.status.mark_processing(document_id, source_id=document_id)
            chunk_ids = [c.chunk_id for c in self.cache.get_chunks(key) or []]
            self.status.mark_processed(document_id, chunk_ids=chunk_ids, content_hash=key.content_hash)
            self.cache.prune_many([key])
            self.leases.release(holder, self.generation, [document_id])

    def clean(self, entries: list[tuple[Document, list[Chunk]]]) -> None:
        self.cache.delete_documents([d.document_id for d, _ in entries])
        open_database(self.settings, self.settings.status_path, generation=self.generation).drop_schema()


def measure(settings: SinkSettings, documents: int, batch: int) -> dict[str, float]:
    """Milliseconds per document, batched and per document, each on its own fresh documents."""
    result = {}
    for mode in ("batched", "per_document"):
        tag = uuid.uuid4().hex[:8]
        entries = make_documents(documents, tag)
        records = Records(settings, f"g{tag}")
        Records(settings, f"g{tag}").batch(entries[:1], "warm-up")  # connections, schema, first statements
        call = records.batch if mode == "batched" else records.per_document
        parts = [entries[i : i + batch] for i in range(0, documents, batch)]
        started = time.perf_counter()
        for part in parts:
            call(part, "bench")
        result[mode] = 1000 * (time.perf_counter() - started) / documents
        records.clean(entries)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--database-url", default=os.environ.get("UNICHUNK_DATABASE_URL"))
    args = parser.parse_args(argv)
    documents = 256 if args.quick else args.documents
    with tempfile.TemporaryDirectory() as tmp:
        backends = {"sqlite": SinkSettings(data_dir=Path(tmp), database_url=None)}
        if args.database_url:
            backends["postgresql"] = SinkSettings(
                data_dir=Path(tmp), database_url=SecretStr(args.database_url)
            )
        else:
            print("no --database-url or UNICHUNK_DATABASE_URL: SQLite only")
        print(f"{documents} documents in batches of {args.batch}; ms of record calls per document")
        print(f"{'backend':<12}{'batched':>10}{'per document':>15}{'ratio':>8}")
        for name, settings in backends.items():
            figures = measure(settings, documents, args.batch)
            ratio = figures["per_document"] / figures["batched"]
            print(f"{name:<12}{figures['batched']:>10.3f}{figures['per_document']:>15.3f}{ratio:>7.1f}x")


if __name__ == "__main__":
    main()
