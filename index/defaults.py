"""The pipeline's run defaults, in a module that imports nothing: the CLI's option defaults read them at
import, and the CLI must not load the run's records and stores to show `--help` or to ask a service."""

# Documents per chunk/prepare/write round. Each round is 7 Prefect task runs whose bookkeeping shares the
# cores with the models, so larger rounds cost less per document (benchmarks/README.md, "Measurements
# behind smaller choices"), while the pipelined rounds keep the unoverlapped first and last small.
DEFAULT_BATCH_SIZE = 64

# How long a replaced generation is kept for rollback before the next rebuild or reindex drops it.
DEFAULT_RETENTION_HOURS = 168.0

# How much lower a gated rebuild's new generation may score than the live one (character recall, at any
# budget) and still go live: one point of recall.
DEFAULT_GATE_TOLERANCE = 0.01
