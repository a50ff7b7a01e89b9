"""The keyword store: BM25 over analysed chunks, durable in a term store (SQLite or PostgreSQL), scored in memory."""

from unichunk.sinks.keywords.analyzer import Analyzer
from unichunk.sinks.keywords.bm25 import BM25Sink

__all__ = ["Analyzer", "BM25Sink"]
