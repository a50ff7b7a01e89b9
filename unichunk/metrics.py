"""What an interface's own metrics share with the pipeline's: the duration buckets every histogram uses,
so the service's HTTP latencies and the runs' step durations read on one scale."""

from __future__ import annotations

from unichunk.chunking.metrics import DURATION_BUCKETS

__all__ = ["DURATION_BUCKETS"]
