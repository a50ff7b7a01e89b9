"""The vector sink, whatever engine stores it: one Qdrant point per chunk, keyed by a UUID derived from the
shared chunk ID.

`VectorSink` holds everything the sink does (embedding, replacement, reads, errors, metrics) and talks to its
engine only through the `_store_*` methods: qdrant-edge embedded in this process (`qdrant_edge`, the
default: payload indexes, no scans) or qdrant-client (`qdrant`: local mode under `data_dir`, or a server
when UNICHUNK_QDRANT_URL is set). `open_vector_sink` imports only the engine the settings pick, since
qdrant-client is slow to import and a qdrant-edge run never needs it. Each embedded engine has its own
directory, and an index written by one is refused by the other with a message, never read as empty
(`refuse_other_engine`). Points, exact content and stale-point deletion: docs/design.md, "Identity and
exactness".
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import time
import uuid
from abc import abstractmethod
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from unichunk.chunking.access_labels import document_labels, normalise_labels
from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.segments import first_users, segment_grouped
from unichunk.sinks import progress as work_progress
from unichunk.sinks.base import (
    NO_CONTENT_HASH,
    DocumentChunks,
    Prepared,
    ScoredChunk,
    SearchFilter,
    Sink,
    SinkError,
    StoredChunk,
    filter_values,
    group_batch,
    matches_nothing,
)
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.disk_space import DiskFull
from unichunk.sinks.metrics import (
    EMBEDDER_TRUNCATED_CHUNKS,
    SINK_CHUNKS_REMOVED,
    SINK_CHUNKS_WRITTEN,
    SINK_OPERATION_SECONDS,
)
from unichunk.sinks.result_cache import ResultCache, text_key
from unichunk.sinks.stop import STOP
from unichunk.sinks.vectors.base import Embedder, EmbedderError
from unichunk.sinks.vectors.embedders import make_embedder

logger = logging.getLogger(__name__)

SINK_NAME = "vectors"
# Fixed forever: changing it would orphan every stored point.
POINT_NAMESPACE = uuid.UUID("6f1c7a52-3d0e-5b8e-9c4a-2b7d1e0f9a31")
_SCROLL_PAGE = 10_000  # big pages: local mode re-filters the whole collection per page
# Keyword payload indexes: filters and deletes by document or source find their points without a scan.
# `labels` (an array of keywords: a point matches a MatchAny when one of its labels is listed) keeps a labels
# filter inside the query, so `k` readable hits come back however few of the points are readable.
INDEXED_FIELDS = ("document_id", "chunk_id", "source_system", "source_id", "labels")


def point_id(chunk_id: str) -> str:
    """The Qdrant point ID of a chunk: uuid5 of its chunk ID, as a string."""
    return str(uuid.uuid5(POINT_NAMESPACE, chunk_id))


# Texts per embedder call at most: one call is what a stopped run may still wait for (under a second of
# MiniLM on a quiet 2-core CPU) and how often progress moves; sorted by length first, such calls pad no more
# than bigger ones.
STOP_STEP = 32

ENGINE_DIRS = {"local": "qdrant", "edge": "qdrant_edge"}
"""Each embedded engine's directory under a generation (or data_dir): an engine never reads the other's files."""


def engine_dir(settings: SinkSettings, engine: str) -> Path:
    """Where `engine` keeps this generation's vectors (local mode: `settings.qdrant_path`)."""
    return (settings.generation_dir or settings.data_dir) / ENGINE_DIRS[engine]


def refuse_other_engine(settings: SinkSettings, engine: str) -> None:
    """Refuse to open an empty store beside vectors the other embedded engine wrote for this generation.

    Switching UNICHUNK_VECTOR_ENGINE on an existing index would otherwise answer every search from an empty
    new store, silently; the message names both ways out."""
    if _holds_vectors(engine_dir(settings, engine)):
        return
    for other in ENGINE_DIRS:
        if other != engine and _holds_vectors(engine_dir(settings, other)):
            raise SinkError(
                SINK_NAME,
                f"the vectors at {engine_dir(settings, other)} were written by the {other!r} engine but "
                f"UNICHUNK_VECTOR_ENGINE is {engine!r}: set UNICHUNK_VECTOR_ENGINE={other}, or rebuild the "
                f"index with {engine!r} (move that directory away and re-ingest)",
            )


def _holds_vectors(path: Path) -> bool:
    return path.is_dir() and any(p.is_dir() and any(p.iterdir()) for p in path.iterdir())


class SharedHandles:
    """One open handle (and its lock) per storage directory in this process.

    Both embedded engines let one handle open a directory, so two sinks on the same directory in one process
    (a flow and a reader whose settings differ in some other field, a drop beside a cached sink) share it
    instead of the second failing. Each generation has its own directory, so other processes are still
    refused. Server clients are not shared (each sink gets its own connection and lock).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[Any, threading.RLock, int, Callable[[Any], None]]] = {}

    def acquire(
        self, key: str, opener: Callable[[], Any], closer: Callable[[Any], None]
    ) -> tuple[Any, threading.RLock, Callable[[], None]]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = (opener(), threading.RLock(), 0, closer)
            handle, lock, users, closer = entry
            self._entries[key] = (handle, lock, users + 1, closer)
        return handle, lock, lambda: self._release(key)

    def _release(self, key: str) -> None:
        with self._lock:
            handle, lock, users, closer = self._entries[key]
            if users > 1:
                self._entries[key] = (handle, lock, users - 1, closer)
                return
            del self._entries[key]
        with lock:
            closer(handle)


SHARED_HANDLES = SharedHandles()


Conditions = dict[str, list[Any]]
"""A filter as the sink builds it: field -> accepted values; every field must match one of its values."""

StoredPoint = tuple[str, list[float], dict[str, Any]]
"""(point ID, vector, payload): one point as the sink hands it to the engine."""


class VectorSink(Sink):
    """Chunks with their embeddings in one Qdrant collection, sized by the embedder, cosine distance, on
    the engine a subclass implements (the `_store_*` methods and the alias)."""

    name = SINK_NAME
    engine: str
    # Prefect runs tasks in threads and the embedded engines are not thread-safe: every use holds the lock
    # (`_store_open` sets it: a shared embedded handle comes with its own).
    _lock: threading.RLock

    def __init__(self, settings: SinkSettings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.collection = settings.collection_name
        self._owns_embedder = embedder is None
        self.embedder = embedder if embedder is not None else make_embedder(settings)
        self._release_client: Callable[[], None] | None = None
        self._collection_verified = False  # vectors fit the embedder
        self._collection_ready = False  # exists, verified, indexes created
        self._cache: ResultCache | None = None
        self._sums_cache: ResultCache | None = None
        try:
            self._store_open()
        except BaseException:
            if self._owns_embedder:
                self.embedder.close()
            raise

    @classmethod
    def from_settings(cls, settings: SinkSettings) -> VectorSink:
        """A sink configured entirely from `settings` (engine, embedder and client included)."""
        return cls(settings)

    # --- the Sink interface -------------------------------------------------------------------------

    def prepare(self, batch: Sequence[DocumentChunks]) -> Prepared:
        """Vectors for every chunk, writing nothing to the store. Where the settings and the embedder allow
        (`SinkSettings.segmented_vectors`), each chunk's vector is composed from the segments its document's
        chunk boundaries cut (`unichunk.chunking.segments`): each segment's token sum is embedded once and a
        chunk's vector is the normalised sum of its segments'; otherwise each chunk's `embed_text` is
        embedded whole. Either way, what the cache holds for this embedder and text is reused, every other
        distinct text is embedded once (at most `embedding_batch_size` and `STOP_STEP` texts per call,
        longest first so each call pads little), and each call's progress is reported
        (`unichunk.sinks.progress`). Counts truncations. Raises `StopRequested` once a stop is asked for,
        without waiting for the embedding call in flight (it is left to finish unused).

        `stats`: `embedded_chunks` (chunks with a text embedded now) + `reused_chunks` (chunks whose texts
        all came from the cache or from another chunk of the batch) = the batch's chunks, so a run's
        `embedded` and `reused` add up to the vectors it writes."""
        documents, chunks = group_batch(self.name, batch)
        with self._operation("prepare"):
            with self._lock:
                self._check_collection(create=False)
            all_chunks = [c for doc_chunks in chunks.values() for c in doc_chunks]
            composed = self.settings.segmented_vectors() and self.embedder.composes
            if composed:
                segments = segment_grouped(documents, chunks, headings=True)
                texts, members = segments.texts, segments.members
                cache, embed = self.sums_cache(), self.embedder.embed_sums
            else:
                texts = [c.embed_text for c in all_chunks]
                members = [(i,) for i in range(len(texts))]
                cache, embed = self.result_cache(), self.embedder.embed
            tokens = self.embedder.count_tokens(texts) if texts else []
            longest = [max(tokens[i] for i in own) for own in members]
            truncated = self._report_truncation(all_chunks, texts, longest)
            made, embedded = self._embed_distinct(cache, embed, texts, tokens, members, len(documents))
            payload = {
                c.chunk_id: _normalised_sum([made[i] for i in own]) if composed else made[own[0]]
                for c, own in zip(all_chunks, members, strict=True)
            }
            stats = {
                "embedded_chunks": float(embedded),
                "reused_chunks": float(len(all_chunks) - embedded),
                "truncated_chunks": float(truncated),
            }
            return Prepared(self.name, documents, chunks, payload=payload, stats=stats)

    def _embed_distinct(
        self,
        cache: ResultCache,
        embed: Callable[[list[str]], list[list[float]]],
        texts: list[str],
        tokens: list[int],
        members: list[tuple[int, ...]],
        documents: int,
    ) -> tuple[list[list[float]], int]:
        """Each text's vector (as float32 values, however it came) and how many chunks were the first to
        need a text embedded now (the rest reuse). Progress is told in chunks: those needing no call as
        reused, the rest in proportion to the texts embedded so far (a chunk's segments are spread over the
        calls, longest first)."""
        keys = [text_key(t) for t in texts]
        held = {key: vector for key, blob in cache.get(keys).items() if (vector := _unpack(blob))}
        todo: dict[str, int] = {}  # each distinct text not held: its first position
        for position, key in enumerate(keys):
            if key not in held and key not in todo:
                todo[key] = position
        waiting = first_users(members, keys, todo)
        # with its reused vectors, so a progress bar takes its rate from the embedding calls alone
        work_progress.queued(documents, len(members), reused=len(members) - waiting)
        order = sorted(todo.values(), key=lambda p: -tokens[p])
        step = min(self.settings.embedding_batch_size, STOP_STEP)
        told = 0
        try:
            for start in range(0, len(order), step):
                STOP.check()
                part = order[start : start + step]
                # in a thread the stop does not wait for: one call of 32 texts takes 10-20 s on a loaded
                # laptop, the whole of a Ctrl-C's wait (`StopFlag.unless_stopped`)
                vectors = STOP.unless_stopped(embed, [texts[p] for p in part])
                if len(vectors) != len(part):
                    raise SinkError(
                        self.name, f"embedder returned {len(vectors)} vectors for {len(part)} texts"
                    )
                # cached call by call: a batch stopped (or failed) after minutes of embedding leaves its
                # vectors to the next run, which embeds only what this one did not reach
                done = {keys[p]: _pack(vector) for p, vector in zip(part, vectors, strict=True)}
                cache.put(done)
                # as float32, like reused ones: a vector is the same whichever way it came (the stores keep
                # float32 anyway)
                held.update((key, _unpack(blob) or []) for key, blob in done.items())
                reached = waiting * (start + len(part)) // len(order)
                work_progress.done(embedded=reached - told)
                told = reached
        except EmbedderError as exc:
            raise SinkError(self.name, f"embedding failed: {exc}") from exc
        return [held[key] for key in keys], waiting

    def sums_cache(self) -> ResultCache:
        """The cache of segments' token sums for this embedder (`embed_sums`), beside its vectors."""
        if self._sums_cache is None:
            self._sums_cache = ResultCache.open(
                self.settings, "vectors", f"{self.embedder.fingerprint}|token-sum"
            )
        return self._sums_cache

    def result_cache(self) -> ResultCache:
        """The embedding cache of this data dir for this embedder (opened on first use: a reader never
        touches it)."""
        if self._cache is None:
            self._cache = ResultCache.open(self.settings, "vectors", self.embedder.fingerprint)
        return self._cache

    def write(self, prepared: Prepared) -> int:
        """Upsert the prepared points (durably), then delete each document's points not among them."""
        self.check_prepared(prepared)
        vectors: dict[str, list[float]] = prepared.payload
        ingested_at = datetime.now(UTC).isoformat()
        points: list[StoredPoint] = [
            (
                point_id(chunk.chunk_id),
                vectors[chunk.chunk_id],
                chunk_payload(document, chunk, ingested_at, self.settings.generation),
            )
            for document in prepared.documents
            for chunk in prepared.chunks[document.document_id]
        ]
        document_ids = [d.document_id for d in prepared.documents]
        with self._operation("write"), self._lock:
            self._check_collection(create=True)
            size = self.settings.upsert_batch_size
            for start in range(0, len(points), size):
                self._store_upsert(points[start : start + size])
            new_ids = {p[0] for p in points}
            stale = [pid for pid in self._stored_points(document_ids) if pid not in new_ids]
            self._delete_points(stale)
        SINK_CHUNKS_WRITTEN.labels(self.name).inc(len(points))
        return len(points)

    def delete(self, document_id: str) -> int:
        """Remove every point of the document; 0 if it has none (or the collection does not exist yet)."""
        with self._operation("delete"), self._lock:
            if not self._collection_exists():
                return 0
            ids = list(self._stored_points([document_id]))
            self._delete_points(ids)
            return len(ids)

    def chunk_ids(self, document_id: str | None = None) -> set[str]:
        """Chunk IDs stored, for all documents or one (paginated scroll, chunk_id payload only)."""
        with self._operation("chunk_ids"), self._lock:
            if not self._collection_exists():
                return set()
            conditions = {"document_id": [document_id]} if document_id is not None else None
            return {payload["chunk_id"] for _, payload in self._store_scroll(conditions, ["chunk_id"])}

    def content_hashes(self, document_id: str | None = None) -> dict[str, str]:
        """SHA-256 of each stored point's `content` payload, read back (paginated scroll, two fields only)."""
        with self._operation("content_hashes"), self._lock:
            if not self._collection_exists():
                return {}
            conditions = {"document_id": [document_id]} if document_id is not None else None
            return {
                payload["chunk_id"]: _content_hash(payload.get("content"))
                for _, payload in self._store_scroll(conditions, ["chunk_id", "content"])
            }

    def relabel(self, document_id: str, labels: Sequence[str]) -> int:
        """Set the `labels` payload of the document's points whose labels differ (vectors untouched)."""
        return self.relabel_many({document_id: labels})

    def relabel_many(self, labels: Mapping[str, Sequence[str]]) -> int:
        """`relabel` for several documents: one filtered scroll, then one payload update (and flush) per
        distinct label set, for the points whose labels differ."""
        wanted = {document_id: normalise_labels(found) for document_id, found in labels.items()}
        if not wanted:
            return 0
        with self._operation("relabel"), self._lock:
            if not self._collection_exists():
                return 0
            self._check_collection(create=True)  # a store written before labels gets their index
            stale: dict[tuple[str, ...], list[str]] = {}
            for pid, payload in self._store_scroll({"document_id": list(wanted)}, ["document_id", "labels"]):
                target = wanted[payload["document_id"]]
                if _labels_of(payload) != target:
                    stale.setdefault(target, []).append(pid)
            size = self.settings.upsert_batch_size
            for target, pids in stale.items():
                for start in range(0, len(pids), size):
                    self._store_set_payload(pids[start : start + size], {"labels": list(target)})
            return sum(len(pids) for pids in stale.values())

    def chunk_labels(self, document_id: str | None = None) -> dict[str, tuple[str, ...]]:
        """Each stored point's `labels` payload (none for a point written before labels existed)."""
        with self._operation("chunk_labels"), self._lock:
            if not self._collection_exists():
                return {}
            conditions = {"document_id": [document_id]} if document_id is not None else None
            return {
                payload["chunk_id"]: _labels_of(payload)
                for _, payload in self._store_scroll(conditions, ["chunk_id", "labels"])
            }

    def close(self) -> None:
        if self._release_client is not None:
            release, self._release_client = self._release_client, None
            release()
        if self._owns_embedder:
            self.embedder.close()

    def drop(self) -> None:
        """Delete this sink's whole collection (a retired generation being dropped)."""
        with self._operation("drop"), self._lock:
            self._store_drop()
            self._collection_ready = self._collection_verified = False

    # --- reads for retrieval ------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, filter: SearchFilter | None = None) -> list[ScoredChunk]:
        """The `k` chunks nearest to `query` (cosine), optionally restricted by payload field matches."""
        conditions = filter_values(self.name, filter)
        if matches_nothing(conditions):
            return []
        with self._operation("search"):
            with self._lock:
                if not self._collection_exists():
                    return []
                self._check_collection(create=False)
            try:
                vector = self.embedder.embed_query(query)
            except EmbedderError as exc:
                raise SinkError(self.name, f"embedding the query failed: {exc}") from exc
            with self._lock:
                hits = self._store_query(vector, conditions, k)
        return [_stored(payload, score=score) for score, payload in hits]

    def count(self, filter: SearchFilter | None = None) -> int:
        """Exact number of stored points (chunks), optionally matching a payload filter."""
        conditions = filter_values(self.name, filter)
        with self._operation("count"), self._lock:
            if matches_nothing(conditions) or not self._collection_exists():
                return 0
            return self._store_count(conditions)

    def get_chunks(
        self, chunk_ids: Iterable[str], filter: SearchFilter | None = None
    ) -> dict[str, StoredChunk]:
        """Stored chunks by chunk ID (absent IDs are left out), without vectors: by point ID, or with a
        filter by one filtered scroll of the `chunk_id` index (the filter is the store's, never applied
        afterwards)."""
        conditions = filter_values(self.name, filter)
        wanted = list(dict.fromkeys(chunk_ids))
        with self._operation("get_chunks"), self._lock:
            if not wanted or matches_nothing(conditions) or not self._collection_exists():
                return {}
            if conditions:
                found = self._store_scroll({**conditions, "chunk_id": wanted}, True)
                payloads = [p for _, p in found]
            else:
                payloads = self._store_retrieve([point_id(c) for c in wanted])
        return {p["chunk_id"]: _stored(p) for p in payloads if p}

    def chunks_at(
        self, document_id: str, indexes: Iterable[int], filter: SearchFilter | None = None
    ) -> list[StoredChunk]:
        """A document's chunks at these `chunk_index` positions that `filter` lets through, in index order
        (neighbour expansion)."""
        extra = filter_values(self.name, filter)
        wanted = sorted({int(i) for i in indexes if int(i) >= 0})
        with self._operation("chunks_at"), self._lock:
            if not wanted or matches_nothing(extra) or not self._collection_exists():
                return []
            conditions: Conditions = {**extra, "document_id": [document_id], "chunk_index": list(wanted)}
            if "document_id" in extra and document_id not in extra["document_id"]:
                return []
            found = [_stored(p) for _, p in self._store_scroll(conditions, True)]
        return sorted(found, key=lambda c: c.chunk_index)

    # --- internals ----------------------------------------------------------------------------------

    def _collection_exists(self) -> bool:
        return self._collection_ready or self._store_exists()

    def _check_collection(self, *, create: bool) -> None:
        """Fail if the collection's vectors do not fit the embedder; with `create`, make it and its indexes."""
        if self._collection_ready:
            return
        exists = self._store_exists()
        if exists and not self._collection_verified:
            self._verify_vectors()
            self._collection_verified = True
        if not create:
            return
        if not exists:
            self._store_create(self.embedder.dimension)
        self._store_index(INDEXED_FIELDS)
        self._collection_ready = True

    def _verify_vectors(self) -> None:
        dimension = self.embedder.dimension
        size, distance = self._store_vectors()
        if size != dimension or distance.lower() != "cosine":
            raise SinkError(
                self.name,
                f"collection {self.collection!r} holds {size}-d {distance} vectors but "
                f"embedder {self.embedder.name!r} makes {dimension}-d cosine ones; the embedder changed: "
                "rebuild the collection (delete it and re-ingest) or use another qdrant_collection",
            )

    def _stored_points(self, document_ids: list[str]) -> list[str]:
        if not document_ids:
            return []
        return [pid for pid, _ in self._store_scroll({"document_id": list(document_ids)}, ["chunk_id"])]

    def _delete_points(self, ids: list[str]) -> None:
        size = self.settings.upsert_batch_size
        for start in range(0, len(ids), size):
            self._store_delete(ids[start : start + size])
        if ids:
            SINK_CHUNKS_REMOVED.labels(self.name).inc(len(ids))

    # --- the engine: each subclass implements these -------------------------------------------------

    @abstractmethod
    def _store_open(self) -> None:
        """Attach the store (and set `_lock`, and `_release_client` if closing must release something)."""

    @abstractmethod
    def _store_exists(self) -> bool: ...

    @abstractmethod
    def _store_create(self, dimension: int) -> None: ...

    @abstractmethod
    def _store_index(self, fields: Sequence[str]) -> None:
        """Keyword payload indexes on `fields` (creating an existing one is a no-op)."""

    @abstractmethod
    def _store_vectors(self) -> tuple[int, str]:
        """(size, distance) of the collection's one vector."""

    @abstractmethod
    def _store_upsert(self, points: list[StoredPoint]) -> None:
        """Durable when it returns."""

    @abstractmethod
    def _store_delete(self, ids: list[str]) -> None: ...

    @abstractmethod
    def _store_set_payload(self, ids: list[str], payload: dict[str, Any]) -> None:
        """Set these payload fields of these points, leaving the rest (and the vectors) as they are;
        durable when it returns."""

    @abstractmethod
    def _store_scroll(
        self, conditions: Conditions | None, fields: list[str] | bool
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(point ID, payload subset, or all of it with `fields=True`) for every matching point, by page."""

    @abstractmethod
    def _store_query(
        self, vector: list[float], conditions: Conditions, k: int
    ) -> list[tuple[float, dict[str, Any]]]: ...

    @abstractmethod
    def _store_count(self, conditions: Conditions) -> int: ...

    @abstractmethod
    def _store_retrieve(self, ids: list[str]) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _store_drop(self) -> None: ...

    @abstractmethod
    def alias_target(self, alias: str) -> str | None:
        """The collection `alias` points at, if it exists."""

    @abstractmethod
    def point_alias(self, alias: str) -> None:
        """Make `alias` name this sink's collection, atomically for its readers.

        On a server, outside readers (dashboards, other apps) query the alias and see whole generations
        only; our own readers resolve the generation registry, so all three stores come from the same
        generation. An embedded store keeps each generation in its own directory, so the alias there
        simply names that directory's collection.
        """

    def _report_truncation(
        self, chunks: list[Chunk], texts: list[str], tokens: list[int] | None = None
    ) -> int:
        """Count (metric) embed texts longer than the embedder's max input (`tokens`: each text's count,
        when the caller has them); one WARNING per document naming its truncated chunks, so a long document
        does not bury the log under one line per chunk."""
        limit = self.embedder.max_tokens
        if tokens is None:
            tokens = self.embedder.count_tokens(texts)
        over: dict[str, list[tuple[str, int]]] = {}
        for chunk, count in zip(chunks, tokens, strict=True):
            if count > limit:
                over.setdefault(chunk.document_id, []).append((chunk.chunk_id, count))
        for document_id, found in over.items():
            shown = ", ".join(chunk_id for chunk_id, _ in found[:3]) + (" ..." if len(found) > 3 else "")
            logger.warning(
                "document %s: %d chunk(s) over %s's limit of %d tokens (longest %d), only their start is "
                "embedded (smaller chunks suit this embedder better): %s",
                document_id,
                len(found),
                self.embedder.name,
                limit,
                max(tokens for _, tokens in found),
                shown,
            )
        truncated = sum(len(found) for found in over.values())
        if truncated:
            EMBEDDER_TRUNCATED_CHUNKS.labels(self.embedder.name).inc(truncated)
        return truncated

    @contextmanager
    def _operation(self, operation: str) -> Iterator[None]:
        """Time the operation, and report any store failure as a SinkError (what the pipeline retries)."""
        started = time.perf_counter()
        try:
            yield
        except (SinkError, DiskFull):  # a full disk says so itself, naming the data dir
            raise
        except Exception as exc:
            raise SinkError(
                self.name, f"Qdrant {operation} on collection {self.collection!r} failed: {exc}"
            ) from exc
        finally:
            SINK_OPERATION_SECONDS.labels(self.name, operation).observe(time.perf_counter() - started)


def chunk_payload(
    document: Document, chunk: Chunk, ingested_at: str, generation: str | None = None
) -> dict[str, Any]:
    """What a point carries: the source metadata, flattened, under the chunk's own fields (which win)."""
    return document.source_metadata() | {
        "generation": generation,
        "chunk_id": chunk.chunk_id,
        "document_id": chunk.document_id,
        "chunk_index": chunk.chunk_index,
        "start_char": chunk.start_char,
        "end_char": chunk.end_char,
        "token_count": chunk.token_count,
        "heading_chain": list(chunk.heading_chain),
        "content": chunk.content,
        "content_hash": chunk.content_hash,
        "whole_document": chunk.is_whole_document,
        "document_content_hash": document.content_hash,
        "ingested_at": ingested_at,
        "metadata": dict(chunk.metadata),
        "labels": list(document_labels(document.metadata)),
    }


def _labels_of(payload: dict[str, Any]) -> tuple[str, ...]:
    """A point's stored labels (a point written before labels existed has none)."""
    return tuple(sorted(str(label) for label in payload.get("labels") or ()))


def _normalised_sum(sums: list[list[float]]) -> list[float]:
    """A chunk's vector from its segments' token sums: their sum, L2-normalised (mean pooling then
    normalising gives the same direction), as float32 values like every stored vector."""
    total = np.sum(np.asarray(sums, dtype=np.float32), axis=0)
    norm = float(np.linalg.norm(total))
    return (total / norm if norm > 0 else total).astype(np.float32).tolist()


def _pack(vector: list[float]) -> bytes:
    """A vector as the cache keeps it: float32, little-endian (what the stores keep too, so a reused vector
    is stored exactly as the freshly embedded one was)."""
    packed = array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _unpack(blob: bytes) -> list[float] | None:
    """The vector `_pack` made (None for a blob that cannot be one: then it is embedded again)."""
    if not blob or len(blob) % 4:
        return None
    packed = array("f")
    packed.frombytes(blob)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()


def _content_hash(content: Any) -> str:
    return sha256_hex(content) if isinstance(content, str) else NO_CONTENT_HASH


_CHUNK_FIELDS = frozenset(
    {"chunk_id", "document_id", "chunk_index", "start_char", "end_char", "content", "heading_chain"}
)


def _stored(payload: dict[str, Any], score: float | None = None) -> StoredChunk:
    """A point's payload as the shared chunk record (the rest of the payload goes to `extra`)."""
    fields: dict[str, Any] = {
        "chunk_id": payload["chunk_id"],
        "document_id": payload["document_id"],
        "chunk_index": int(payload.get("chunk_index", 0)),
        "start_char": int(payload.get("start_char", 0)),
        "end_char": int(payload.get("end_char", 0)),
        "content": payload.get("content", ""),
        "heading_chain": tuple(payload.get("heading_chain", ())),
        "extra": {k: v for k, v in payload.items() if k not in _CHUNK_FIELDS},
    }
    return StoredChunk(**fields) if score is None else ScoredChunk(**fields, score=float(score))


# Each engine's module and class; only the one the settings pick is imported.
_ENGINES = {
    "edge": ("unichunk.sinks.vectors.qdrant_edge", "EdgeQdrantSink"),
    "client": ("unichunk.sinks.vectors.qdrant", "QdrantSink"),
}


def open_vector_sink(settings: SinkSettings, embedder: Embedder | None = None) -> VectorSink:
    """The vector sink the settings name: a server URL uses qdrant-client; otherwise `vector_engine` picks
    the embedded engine (qdrant-edge, or qdrant-client's local mode)."""
    engine = "edge" if not settings.qdrant_url and settings.vector_engine == "edge" else "client"
    module, name = _ENGINES[engine]
    sink_class: type[VectorSink] = getattr(importlib.import_module(module), name)
    return sink_class(settings, embedder)
