"""The pipeline's run defaults, in a module that imports nothing: the CLI's option defaults read them at
import, and the CLI must not load the run's records and stores to show `--help` or to ask a service."""

# Documents per chunk/prepare/write round. Each round is 7 Prefect task runs whose bookkeeping shares the
# cores with the models; 64 measured 1.16-1.22x model time on 500 documents where 32 measured 1.25-1.38x
# (benchmarks/README.md, "Pipeline"), while the pipelined rounds keep the unoverlapped first and last small.
DEFAULT_BATCH_SIZE = 64

# How long a replaced generation is kept for rollback before the next rebuild or reindex drops it.
DEFAULT_RETENTION_HOURS = 168.0
