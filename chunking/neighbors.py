"""Context helpers for retrieval: a chunk with its neighbours, and the text to embed for a chunk.

`expand_neighbors` keeps the retrieved chunk whole and adds only the part of each neighbour that the chunk
does not already contain: with overlapping windows the shared text would otherwise appear twice in a
prompt. Offsets make this exact: the previous neighbour contributes `[prev.start, chunk.start)`, the next
one `[chunk.end, next.end)`. A neighbour entirely inside the chunk contributes nothing (and no marker).
"""

from __future__ import annotations

from collections.abc import Sequence

from chunking.models import Chunk
from chunking.token_window import should_chunk

__all__ = ["CHUNK_BOUNDARY", "embed_text", "expand_neighbors", "should_chunk"]

CHUNK_BOUNDARY = "\n[CHUNK BOUNDARY]\n"


def expand_neighbors(chunks: Sequence[Chunk], index: int) -> str:
    """Chunk `index` (position in `chunks`, ordered by start) with the new text of its ±1 neighbours."""
    if not 0 <= index < len(chunks):
        raise IndexError(f"chunk index {index} out of range for {len(chunks)} chunks")
    chunk = chunks[index]
    parts: list[str] = []
    if index > 0:
        prev = chunks[index - 1]
        before = prev.content[: max(0, min(chunk.start_char, prev.end_char) - prev.start_char)]
        if before:
            parts.append(before)
    parts.append(chunk.content)
    if index + 1 < len(chunks):
        nxt = chunks[index + 1]
        after = nxt.content[max(0, chunk.end_char - nxt.start_char) :]
        if after:
            parts.append(after)
    return CHUNK_BOUNDARY.join(parts)


def embed_text(chunk: Chunk) -> str:
    """Text to embed: the heading chain as context, "Chapter 3 > Methodology: <content>"."""
    if not chunk.heading_chain:
        return chunk.content
    return " > ".join(chunk.heading_chain) + ": " + chunk.content
