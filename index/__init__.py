"""The pipeline's own records and plain steps, no Prefect: what the flows orchestrate.

One module per job: a run's settings and fingerprints (`run.py`), the generation registry and **the one
place** that decides which generation a reader or a run uses (`generations.py`), per-document status, the
chunk cache, the batch steps (`chunk_batch.py`, `sink_writes.py`), the stores' alignment check, metrics,
document leases, sources ingested, and a sharded run's records. Every record store is one implementation
over `unichunk.sinks.database` (SQLite files under the data dir, or one shared PostgreSQL).

The names load on first use (`lazy_loader`): `unichunk.index.registry` or `unichunk.index.status` alone (what
the CLI reads before it knows whether a service answers) must not import the run's sinks and embedders.
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
