"""Which shard a document belongs to when one run is split across workers (`ingest`/`reindex` with
`shards=N`).

A document's shard is a hash of its document ID modulo N: the same document lands in the same shard
whatever process or machine computes it (SHA-256, never Python's `hash()`, which is salted per process),
so a shard retried elsewhere gets exactly the documents it had; and a cryptographic hash of IDs spreads
any corpus evenly (each shard within a few percent of 1/N beyond a few hundred documents), whatever the
folder layout or naming scheme, which a split by path order or size would not. Within a shard the
listing's order is kept, so batches read neighbouring files as a single-process run does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from unichunk.chunking.sources import SourceItem

MAX_SHARDS = 64  # past this a run's coordination (one child run each) costs more than it saves


def shard_of(document_id: str, shards: int) -> int:
    """The shard (0 .. shards-1) of `document_id`: the first 8 bytes of its SHA-256, modulo `shards`
    (the modulo bias over 2**64 is negligible)."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be between 1 and {MAX_SHARDS}, not {shards}")
    digest = hashlib.sha256(document_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def split(items: Iterable[SourceItem], shards: int) -> list[list[SourceItem]]:
    """`items` in `shards` lists by `shard_of` their document ID, each in the order given."""
    parts: list[list[SourceItem]] = [[] for _ in range(shards)]
    for item in items:
        parts[shard_of(item.document_id, shards)].append(item)
    return parts
