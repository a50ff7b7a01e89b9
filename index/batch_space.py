"""Room on the data dir's disk for a batch, checked before any store is written.

A full disk in the middle of a batch's writes crashes the process (qdrant-edge writes through memory maps:
SIGBUS) and leaves the stores holding different versions. So before the writes the batch's growth is
estimated from what the sinks prepared (its chunks' text and metadata, its vectors, times
`WRITE_FACTOR`) and compared with the free space less the kept margin (UNICHUNK_MIN_FREE_BYTES). A batch
that does not fit is refused with `DiskFull`, which stops the run (`unichunk.engine.run_stop`): nothing of
it is written, its documents keep their previous version everywhere, and their rows go back to `pending`,
so the next run, once space is freed, writes them.
"""

from __future__ import annotations

from collections.abc import Mapping

from unichunk.index.run import RunConfig
from unichunk.index.sink_writes import PrepareOutcome
from unichunk.sinks.disk_space import WRITE_FACTOR, local_stores, require_free

# Bytes a stored chunk costs beside its text: IDs, offsets, heading chain, source metadata, index entries.
CHUNK_OVERHEAD = 512
# Bytes a store's write may take whatever its size: a new disk block in each file it appends to (WAL,
# vectors, payloads, ID tracker, SQLite pages), however little it writes there.
WRITE_OVERHEAD = 64 * 1024


def batch_bytes(outcomes: Mapping[str, PrepareOutcome], local: set[str]) -> int:
    """The estimated disk growth of writing `outcomes` to the sinks in `local` (the others are servers)."""
    total = 0
    for name, outcome in outcomes.items():
        prepared = outcome.prepared
        if prepared is None or name not in local:
            continue
        given = sum(
            len(c.content.encode("utf-8", "surrogatepass")) + CHUNK_OVERHEAD
            for chunks in prepared.chunks.values()
            for c in chunks
        )
        if name == "vectors" and isinstance(prepared.payload, Mapping):  # chunk ID -> float32 vector
            given += sum(len(vector) * 4 for vector in prepared.payload.values())
        total += WRITE_OVERHEAD + given * WRITE_FACTOR
    return total


def check_batch_room(
    run: RunConfig, outcomes: Mapping[str, PrepareOutcome], label: str, documents: int
) -> None:
    """Raise `DiskFull` (before any store is written) when batch `label` would leave less than the kept
    margin free on the data dir's disk; nothing to check when every store is a server."""
    local = local_stores(run.settings)
    if not local:
        return
    what = f"writing batch {label} ({documents} document{'' if documents == 1 else 's'})"
    require_free(run.settings.data_dir, batch_bytes(outcomes, local), run.settings.min_free_bytes, what)
