"""The chunk record: the text embedded for a chunk carries its heading chain; the stored content does not."""

from __future__ import annotations

from unichunk.chunking.models import Chunk


def test_embed_text_prepends_heading_chain() -> None:
    chunk = Chunk(
        chunk_id="c",
        document_id="d",
        chunk_index=0,
        content="We measured.",
        start_char=0,
        end_char=12,
        token_count=3,
        content_hash="h",
        heading_chain=("Chapter 3", "Methodology"),
    )
    assert chunk.embed_text == "Chapter 3 > Methodology: We measured."
    assert chunk.content == "We measured."
    assert chunk.model_copy(update={"heading_chain": ()}).embed_text == "We measured."
