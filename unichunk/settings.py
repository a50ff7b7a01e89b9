"""The settings types and defaults an interface builds or shows, from the application layer: the stores
and models (`SinkSettings`, `UNICHUNK_*`), the chunking (`ChunkStrategy`, `UNICHUNK_CHUNK_*`) and the
defaults of the operations' options, and the rule a source's name follows (`SOURCE_NAME_PATTERN`)."""

from __future__ import annotations

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import SOURCE_NAME_PATTERN
from unichunk.index.defaults import DEFAULT_BATCH_SIZE, DEFAULT_GATE_TOLERANCE, DEFAULT_RETENTION_HOURS
from unichunk.sinks.base import SINK_NAMES, SinkName
from unichunk.sinks.config import SinkSettings

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_GATE_TOLERANCE",
    "DEFAULT_RETENTION_HOURS",
    "SINK_NAMES",
    "SOURCE_NAME_PATTERN",
    "ChunkStrategy",
    "SinkName",
    "SinkSettings",
]
