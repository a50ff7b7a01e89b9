"""The vector sink on qdrant-edge: Qdrant's own engine embedded in this process, one shard per collection.

Same points, payloads and IDs as `QdrantSink` (both are engines of `VectorSink`), but the store keeps
keyword payload indexes and memory-mapped segments, so a filter by `document_id` or a replacement's
stale-point lookup reads the index instead of unpickling every point, and opening maps files instead of
loading the collection into Python objects (`benchmarks.vector_store` measures both engines).

`<generation dir or data_dir>/qdrant_edge/<collection>/` is a shard, with `aliases.json` beside the shards. A
shard is opened by one handle at a time (its WAL is locked), so sinks of one process share it
(`SHARED_HANDLES`) and another process is refused with a clear error. qdrant-edge never optimises on its own
(new points are searched by brute force, deleted ones keep their space), so `optimize()` builds the HNSW
graph, merges small segments and vacuums after a run's last write, when this process changed the shard.

A first bulk load does not pay that as one tail (200k points took 41 minutes): the write that brings
`OPTIMIZE_EVERY` points since the last optimisation indexes them then, one bounded segment at a time
(`SEGMENT_POINTS` keeps merges from rebuilding them into bigger ones), so the run-end `optimize()` only
indexes what the last writes added. No payload-aware graph links are built (`payload_m=0`: `source_system`,
one value over every point, got a second graph of the whole shard, up to 1.6x the build); in segments this
size a selective filter is answered exactly from the payload index instead. `optimize()` holds the GIL, so
it cannot run in a background thread of this process without stalling it.
`benchmarks/first_load_optimize.py` measures both ways.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HnswIndexConfig,
    MatchAny,
    PayloadSchemaType,
    Point,
    Query,
    QueryRequest,
    ScrollRequest,
    UpdateOperation,
)

from unichunk.sinks.base import SinkError
from unichunk.sinks.disk_space import WRITE_FACTOR, fills_holes_on_read, require_free, sparse_holes
from unichunk.sinks.stop import STOP
from unichunk.sinks.vectors.sink import (
    _SCROLL_PAGE,
    SHARED_HANDLES,
    SINK_NAME,
    Conditions,
    StoredPoint,
    VectorSink,
    engine_dir,
    refuse_other_engine,
)

logger = logging.getLogger(__name__)

_CONFIG_FILE = "edge_config.json"  # written by qdrant-edge into every shard
_ALIASES_FILE = "aliases.json"
_TEMP_SEGMENTS = "temp_segments"  # where qdrant-edge builds a segment while optimising
_DELETE_BYTES = 1024  # disk a deleted point's WAL entry and flags may take, generously
# Qdrant's HNSW defaults (m=16, ef_construct=100, full_scan_threshold 10,000 KB) without payload-aware links.
HNSW = HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10_000, payload_m=0)
OPTIMIZE_EVERY = 20_000  # points written since the last optimisation that a write indexes before returning
# A segment holds at most this many vectors: a step's segment is never merged into a bigger one (a merge
# rebuilds the graph of everything it joins: the 41-minute tail again, in pieces).
SEGMENT_POINTS = 25_000


class EdgeQdrantSink(VectorSink):
    """`VectorSink` on a qdrant-edge shard under the generation's directory (no server, no collection API)."""

    engine = "edge"
    # What a new shard is created with, and the stepping; class attributes so the benchmark can compare.
    hnsw: HnswIndexConfig | None = HNSW
    optimize_every: int | None = OPTIMIZE_EVERY
    segment_points: int | None = SEGMENT_POINTS
    indexing_threshold_kb: int | None = None  # Qdrant's default, 10,000 KB (~6,500 384-d vectors)

    def _store_open(self) -> None:
        if self.settings.qdrant_url:
            raise SinkError(self.name, "the edge engine is embedded: it takes no qdrant_url")
        refuse_other_engine(self.settings, self.engine)
        self.base = engine_dir(self.settings, self.engine)
        self.path = self.base / self.collection
        # The shard opens on first use: a sink that only reads an absent collection creates nothing.
        self._handle: dict[str, EdgeShard] = {}
        self._closed = False
        self._changed = False  # points written or deleted since the last optimize()
        self._unoptimized = 0  # points written since the last optimisation, a step or optimize()
        self._lock = threading.RLock()
        if _is_shard(self.path):
            self._attach()

    def _attach(self, create_dimension: int | None = None) -> EdgeShard:
        if "shard" in self._handle:
            return self._handle["shard"]
        if self._closed:
            raise RuntimeError("the sink is closed")  # reported as this operation's SinkError
        path = self.path

        def opener() -> EdgeShard:
            try:
                if _is_shard(path):
                    self._require_room(_load_room(path), "opening the vector store")
                    shard = EdgeShard.load(str(path))  # keeps the settings it was created with
                    _remove_half_built(path)
                    return shard
                if create_dimension is None:
                    raise SinkError(self.name, f"no shard at {path}")
                self._require_room(0, "creating the vector store")
                vectors = EdgeVectorParams(size=create_dimension, distance=Distance.Cosine)
                return EdgeShard.create(str(path), self._config(vectors))
            except SinkError:
                raise
            except Exception as exc:
                if "WouldBlock" not in str(exc):
                    raise
                raise SinkError(
                    SINK_NAME,
                    f"the qdrant-edge store at {path} is already open in another process; an embedded store "
                    "allows one user at a time: stop the other process, or run a Qdrant server and set "
                    "UNICHUNK_QDRANT_URL",
                ) from exc

        shard, lock, release = SHARED_HANDLES.acquire(str(path.resolve()), opener, _close)
        self._handle["shard"], self._lock, self._release_client = shard, lock, release
        return shard

    def _config(self, vectors: EdgeVectorParams) -> EdgeConfig:
        """A new shard's settings (qdrant-edge persists them in the shard: a shard made before keeps its own)."""
        max_kb = None if self.segment_points is None else self.segment_points * vectors.size * 4 // 1024
        optimizers = EdgeOptimizersConfig(
            max_segment_size=max_kb, indexing_threshold=self.indexing_threshold_kb
        )
        return EdgeConfig(vectors=vectors, hnsw_config=self.hnsw, optimizers=optimizers)

    @property
    def shard(self) -> EdgeShard:
        shard = self._handle.get("shard")
        if shard is None and _is_shard(self.path):
            shard = self._attach()  # created since this sink opened (by another sink of this process)
        if shard is None:
            raise SinkError(self.name, f"collection {self.collection!r} does not exist at {self.path}")
        return shard

    def close(self) -> None:
        self._closed = True
        self._handle.clear()
        super().close()

    def _store_exists(self) -> bool:
        if self._closed:
            raise RuntimeError("the sink is closed")
        return "shard" in self._handle or _is_shard(self.path)

    def _store_create(self, dimension: int) -> None:
        self._attach(create_dimension=dimension)

    def _store_index(self, fields: Sequence[str]) -> None:
        """Keyword payload indexes (creating an existing one is a no-op): filters and deletes use them."""
        shard = self._attach()
        present = set(shard.info().payload_schema)
        for field_name in fields:
            if field_name not in present:
                shard.update(UpdateOperation.create_field_index(field_name, PayloadSchemaType.Keyword))

    def _store_vectors(self) -> tuple[int, str]:
        # qdrant-edge exposes no vector config on an open shard; it persists it in this file of the shard.
        vectors = json.loads((self.path / _CONFIG_FILE).read_text())["vectors"]
        if set(vectors) != {""}:
            raise SinkError(
                self.name, f"collection {self.collection!r} uses named vectors; expected one vector"
            )
        return int(vectors[""]["size"]), str(vectors[""]["distance"])

    def _require_room(self, needed: int, what: str) -> None:
        """`DiskFull` unless the data dir's disk has `needed` bytes free beyond the kept margin: checked
        before qdrant-edge touches its memory maps, where a full disk is a SIGBUS, not an error."""
        require_free(self.settings.data_dir, needed, self.settings.min_free_bytes, what)

    def _store_upsert(self, points: list[StoredPoint]) -> None:
        shard = self._attach()
        # The engine checked the whole batch already (`unichunk.index.batch_space`); this guards any other
        # writer (a restore, a rebuild) and a disk that filled since.
        needed = sum(len(vector) * 4 + len(json.dumps(payload, default=str)) for _, vector, payload in points)
        self._require_room(needed * WRITE_FACTOR, f"writing {len(points)} vectors")
        shard.update(
            UpdateOperation.upsert_points([Point(pid, vector, payload) for pid, vector, payload in points])
        )
        shard.flush()  # durable when write() returns, like qdrant-client's wait=True
        self._changed = True
        self._unoptimized += len(points)
        # Not once a stop is asked: a step holds the GIL for seconds, so the run could not leave meanwhile.
        due = self.optimize_every is not None and self._unoptimized >= self.optimize_every
        if due and not STOP.requested:
            self._optimize_step(shard)

    def _optimize_step(self, shard: EdgeShard) -> None:
        """Index what the writes since the last step added, inside this write (a first bulk load pays its
        HNSW build in steps, not in one run-end tail). The points are already durable, so a step that cannot
        run (no room for the rewritten segment) or fails does not fail the write: the run-end `optimize()`
        does it, and reports; the next step is tried after another `optimize_every` points, not every write."""
        self._unoptimized = 0
        try:
            self._require_room(_allocated(self.path / "segments"), "optimising the vector store")
            shard.optimize()
            shard.flush()
        except Exception as exc:
            logger.warning(
                "indexing the vector store during the writes failed (left to the run's end): %s", exc
            )

    def _store_delete(self, ids: list[str]) -> None:
        self._require_room(len(ids) * _DELETE_BYTES, f"deleting {len(ids)} vectors")  # the WAL records it
        self.shard.update(UpdateOperation.delete_points([uuid.UUID(i) for i in ids]))
        self.shard.flush()
        self._changed = True

    def _store_set_payload(self, ids: list[str], payload: dict[str, Any]) -> None:
        needed = len(ids) * (_DELETE_BYTES + len(json.dumps(payload)))  # the WAL records it
        self._require_room(needed, f"relabelling {len(ids)} vectors")
        self.shard.update(UpdateOperation.set_payload([uuid.UUID(i) for i in ids], payload))
        self.shard.flush()
        self._changed = True

    def optimize(self) -> bool:
        """Index, merge and vacuum the shard (`EdgeShard.optimize`) if this sink changed it since the last
        time: without it queries compare against every vector and deleted points are never reclaimed.
        Its cost follows what changed (benchmarks/README.md, "Embedded vector store")."""
        with self._operation("optimize"), self._lock:
            if not self._changed or "shard" not in self._handle:
                return False
            # Merging rewrites segments beside the old ones: room for a copy of them, else tried next run.
            self._require_room(_allocated(self.path / "segments"), "optimising the vector store")
            shard = self._handle["shard"]
            optimised = bool(shard.optimize())
            shard.flush()
            self._changed = False
            self._unoptimized = 0
            return optimised

    def _store_scroll(
        self, conditions: Conditions | None, fields: list[str] | bool
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        offset = None
        while True:
            records, offset = self.shard.scroll(
                ScrollRequest(
                    offset=offset,
                    limit=_SCROLL_PAGE,
                    filter=edge_filter(conditions),
                    with_payload=fields,
                    with_vector=False,
                )
            )
            for record in records:
                yield str(record.id), record.payload or {}
            if offset is None:
                return

    def _store_query(
        self, vector: list[float], conditions: Conditions, k: int
    ) -> list[tuple[float, dict[str, Any]]]:
        request = QueryRequest(
            limit=k, query=Query.Nearest(vector), filter=edge_filter(conditions), with_payload=True
        )
        return [(point.score, point.payload or {}) for point in self.shard.query(request)]

    def _store_count(self, conditions: Conditions) -> int:
        return self.shard.count(CountRequest(exact=True, filter=edge_filter(conditions)))

    def _store_retrieve(self, ids: list[str]) -> list[dict[str, Any]]:
        records = self.shard.retrieve([uuid.UUID(i) for i in ids], with_payload=True, with_vector=False)
        return [r.payload or {} for r in records]

    def _store_drop(self) -> None:
        if self._release_client is not None:
            release, self._release_client = self._release_client, None
            self._handle.clear()
            release()
        if self.path.exists():
            shutil.rmtree(self.path)
        aliases = self._aliases()
        if self.collection in aliases.values():
            self._write_aliases({a: c for a, c in aliases.items() if c != self.collection})

    # --- aliases: a small file beside the shards (an alias only ever names a collection of this directory) ---

    def alias_target(self, alias: str) -> str | None:
        with self._lock:
            return self._aliases().get(alias)

    def point_alias(self, alias: str) -> None:
        with self._operation("alias"), self._lock:
            self._check_collection(create=True)
            aliases = self._aliases()
            if aliases.get(alias) == self.collection:
                return
            if alias not in aliases and _is_shard(self.base / alias):
                raise SinkError(
                    self.name, f"a collection named {alias!r} exists, so it cannot become the live alias"
                )
            self._write_aliases(aliases | {alias: self.collection})

    def _aliases(self) -> dict[str, str]:
        path = self.base / _ALIASES_FILE
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        """Replace the file atomically (write beside, then rename), so a reader sees old or new, never half."""
        self.base.mkdir(parents=True, exist_ok=True)
        partial = self.base / f".{_ALIASES_FILE}.{os.getpid()}"
        partial.write_text(json.dumps(aliases, sort_keys=True))
        partial.replace(self.base / _ALIASES_FILE)


def edge_filter(conditions: Conditions | None) -> Filter | None:
    """The qdrant-edge filter for `conditions`: every field must match one of its values."""
    if not conditions:
        return None
    return Filter(
        must=[FieldCondition(key=key, match=MatchAny(any=list(values))) for key, values in conditions.items()]
    )


def _load_room(path: Path) -> int:
    """What loading the shard at `path` may allocate: on tmpfs, mapping a vector file fills its holes
    (32 MiB a chunk file, mostly holes after a small ingest); elsewhere a read maps no new blocks."""
    if not fills_holes_on_read(path):
        return 0
    return sparse_holes(p for p in path.glob("segments/*/vector_storage/**/*") if p.is_file())


def _allocated(directory: Path) -> int:
    """Bytes the files under `directory` take on disk."""
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


def _remove_half_built(path: Path) -> None:
    """Delete what a process killed while optimising left under the shard's `temp_segments/` (a segment
    being built; qdrant-edge neither reads nor removes it, so each kill would keep its disk for good). Only
    called once the shard is loaded: this process holds its lock, so no optimisation is building there."""
    temp = path / _TEMP_SEGMENTS
    if not temp.is_dir():
        return
    for entry in temp.iterdir():
        logger.info("removing %s, left by a process killed while optimising the vector store", entry)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _is_shard(path: Path) -> bool:
    return (path / _CONFIG_FILE).is_file()


def _close(shard: EdgeShard) -> None:
    shard.flush()
    shard.close()
