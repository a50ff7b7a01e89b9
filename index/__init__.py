"""The pipeline's own records and plain steps, no Prefect: what the flows orchestrate.

- `run.py`: a run's settings and fingerprints (`RunConfig`); `defaults.py`: batch size and retention;
- `registry.py`: the table of index generations (`errors.py`: its errors, light for the CLI);
  `generations.py`: **the one place** that decides which generation a reader or a run uses, and the switch
  and drop operations;
- `status.py`: per-document status of one generation; `chunk_cache.py`: chunks keyed by what made them;
- `chunk_batch.py`: load, skip unchanged, chunk once; `sink_writes.py`: prepare, write, record, undo,
  delete; `alignment.py`: the check that the stores agree, and its repair; `metrics.py`: the pipeline's
  Prometheus metrics;
- `document_leases.py`: which run may write a document now (runs in parallel never write one at once),
  by `process_identity.py` (which process holds a lease, and whether it is gone);
  `source_registry.py`: the sources a data dir has ingested;
- `shards.py`: which shard a document belongs to when one run is split across workers;
  `shard_records.py`: what a sharded run's parent and its shard runs tell each other (manifest, beats,
  summaries).

Every record store is one implementation over `unichunk.sinks.database`: SQLite files under the data dir, or with
UNICHUNK_DATABASE_URL one PostgreSQL database that every worker shares.

The names load on first use (`lazy_loader`): `unichunk.index.registry` or `unichunk.index.status` alone (what the CLI reads
before it knows whether a service answers) must not import the run's sinks and embedders.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "defaults": ["DEFAULT_BATCH_SIZE", "DEFAULT_RETENTION_HOURS"],
        "generations": ["live_status", "reading_settings", "target_for_ingest"],
        "errors": ["GenerationError", "GenerationMismatch"],
        "registry": ["Generation", "GenerationRegistry"],
        "run": ["RunConfig"],
        "status": ["DocumentStatus", "StatusStore"],
    },
)
