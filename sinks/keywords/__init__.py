"""The keyword store: BM25 over analysed chunks, durable in a term store (SQLite or PostgreSQL), scored in memory."""

from sinks.keywords.analyzer import Analyzer
from sinks.keywords.bm25 import BM25Sink

__all__ = ["Analyzer", "BM25Sink"]
