"""The keyword store: BM25 over analysed chunks, durable in SQLite, scored in memory by bm25s."""

from sinks.keywords.analyzer import Analyzer
from sinks.keywords.bm25 import BM25Sink

__all__ = ["Analyzer", "BM25Sink"]
