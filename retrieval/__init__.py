"""The read side: search the live index generation's stores and assemble context. It writes nothing.

    from retrieval import open_readers, search
    result = search(open_readers(), "how are deletions propagated", k=5)

- `search.py`: the one entry point (`search`), used by the CLI, the HTTP API and the benchmark;
- `ranking.py` (BM25 / vectors / hybrid, routing) over `fusion.py` (reciprocal-rank fusion);
- `context.py` (neighbours, merge by offsets, token budget), `graph_context.py` (entities and relations);
- `results.py`: the typed results; `readers.py`: which stores are read, always of one generation.
"""

from retrieval.readers import Readers, open_readers
from retrieval.results import SearchHit, SearchResult
from retrieval.search import SearchOptions, search

__all__ = [
    "Readers",
    "SearchHit",
    "SearchOptions",
    "SearchResult",
    "open_readers",
    "search",
]
