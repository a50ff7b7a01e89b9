"""Adapters that let other RAG frameworks use unichunk's chunking and search.

- `unichunk.integrations.llama_index`: `UnichunkNodeParser` (unichunk's chunks as LlamaIndex nodes, with
  exact offsets and the chunk IDs the stores use) and `UnichunkRetriever` (`Pipeline.search` as a
  LlamaIndex retriever). Needs the `llama-index` extra (`pip install "unichunk[llama-index]"`).
- `unichunk.integrations.langchain`: `UnichunkRetriever` (`Pipeline.search` as a LangChain retriever) and
  `UnichunkTextSplitter` (unichunk's chunks as LangChain documents). Needs the `langchain` extra.

Each module imports its framework at the top, so importing it without the extra fails at once, with the
framework's name in the error; this package itself imports nothing, so `unichunk` never depends on them.
"""
