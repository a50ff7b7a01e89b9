"""The read side: search the live index generation's stores and assemble context. It writes nothing.

    from unichunk.retrieval import open_readers, search
    result = search(open_readers(), "how are deletions propagated", k=5)

- `search.py`: the one entry point (`search`), used by the CLI, the HTTP API and the benchmark;
- `ranking.py` (BM25 / vectors / graph / hybrid, routing) over `fusion.py` (reciprocal-rank fusion), the
  graph's ranked list in `graph_search.py` (the chunks of the entities a query names);
- `context.py` (neighbours, merge by offsets, token budget), `graph_context.py` (entities and relations);
- `results.py`: the typed results; `readers.py`: which stores are read, always of one generation.

The names load on first use (`lazy_loader`): `unichunk.retrieval.results`, the typed answer a service client
parses, must not open the index's modules and the stores' clients behind `readers` and `search`.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "readers": ["Readers", "open_readers"],
        "results": ["SearchHit", "SearchResult"],
        "search": ["SearchOptions", "search"],
    },
)
