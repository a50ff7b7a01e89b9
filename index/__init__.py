"""The pipeline's own records and plain steps, no Prefect: what the flows orchestrate.

- `run.py`: a run's settings and fingerprints (`RunConfig`);
- `registry.py`: the table of index generations; `generations.py`: **the one place** that decides which
  generation a reader or a run uses, and the switch and drop operations;
- `status.py`: per-document status of one generation; `chunk_cache.py`: chunks keyed by what made them;
- `chunk_batch.py`: load, skip unchanged, chunk once; `sink_writes.py`: prepare, write, record, undo,
  delete; `alignment.py`: the check that the stores agree, and its repair; `metrics.py`: the pipeline's
  Prometheus metrics;
- `document_leases.py`: which run may write a document now (runs in parallel never write one at once);
  `source_registry.py`: the sources a data dir has ingested;
- `shards.py`: which shard a document belongs to when one run is split across workers;
  `shard_records.py`: what a sharded run's parent and its shard runs tell each other (manifest, beats,
  summaries).

Every record store is one implementation over `sinks.database`: SQLite files under the data dir, or with
UNICHUNK_DATABASE_URL one PostgreSQL database that every worker shares.
"""

from index.generations import live_status, reading_settings, target_for_ingest
from index.registry import Generation, GenerationError, GenerationMismatch, GenerationRegistry
from index.run import DEFAULT_BATCH_SIZE, RunConfig
from index.status import DocumentStatus, StatusStore

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DocumentStatus",
    "Generation",
    "GenerationError",
    "GenerationMismatch",
    "GenerationRegistry",
    "RunConfig",
    "StatusStore",
    "live_status",
    "reading_settings",
    "target_for_ingest",
]
