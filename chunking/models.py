"""The two records every part of unichunk agrees on: a `Document` and its `Chunk`s.

Chunks are produced once, by `chunking`, and every sink stores them as they are. That is why the
models are frozen and why a chunk carries exact character offsets into `Document.text`: the vector,
keyword and graph stores can then be compared, and a retrieved chunk traced back, without any text
matching.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from unichunk.chunking.ids import derive_document_id, sha256_hex

BlockKind = Literal["heading", "paragraph", "list_item", "table", "code", "quote", "other"]


class Block(BaseModel):
    """A structural element of a document whose text was extracted from markup (HTML, PDF pages).

    `[start, end)` are offsets into `Document.text` (the extracted text), so a strategy can follow the
    original structure while cutting exact slices of the text the document keeps.
    """

    model_config = ConfigDict(frozen=True)

    kind: BlockKind
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    level: int = 0  # heading level (1-6) or list nesting depth


class Document(BaseModel):
    """A text to chunk, with where it came from.

    `content_hash` is always the SHA-256 of `text` (computed when not given, checked when given), so the
    pipeline can skip unchanged documents. `document_id` is derived from `source_system:source_id` when
    both are given, else from the content hash, unless the caller sets it.
    """

    model_config = ConfigDict(frozen=True)

    document_id: str = ""
    text: str
    content_hash: str = ""
    source_system: str | None = None
    source_id: str | None = None
    title: str | None = None
    path: str | None = None
    mime_type: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    blocks: tuple[Block, ...] = Field(default=(), description="Structure of extracted markup, if any.")

    @model_validator(mode="before")
    @classmethod
    def _derive_hash_and_id(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "text" not in data:
            return data
        data = dict(data)
        text = data["text"]
        if not isinstance(text, str):
            raise TypeError("Document.text must be a str (decode bytes with unichunk.chunking.loaders first)")
        digest = sha256_hex(text)
        given = data.get("content_hash")
        if given and given != digest:
            raise ValueError("content_hash does not match the SHA-256 of text")
        data["content_hash"] = digest
        if not data.get("document_id"):
            data["document_id"] = derive_document_id(
                source_system=data.get("source_system"),
                source_id=data.get("source_id"),
                content_hash=digest,
            )
        return data

    def source_metadata(self) -> dict[str, Any]:
        """The source fields sinks store beside each chunk (no text, no hash)."""
        fields = {
            "source_system": self.source_system,
            "source_id": self.source_id,
            "title": self.title,
            "path": self.path,
            "mime_type": self.mime_type,
        }
        return {k: v for k, v in fields.items() if v is not None} | dict(self.metadata)


def embed_text(heading_chain: tuple[str, ...], content: str) -> str:
    """What is embedded for a chunk: `content`, after its heading chain joined by " > " and ": " when it has one."""
    if not heading_chain:
        return content
    return " > ".join(heading_chain) + ": " + content


class Chunk(BaseModel):
    """One piece of a document: `document.text[start_char:end_char] == content`, always."""

    model_config = ConfigDict(frozen=True)

    chunk_id: str
    document_id: str
    chunk_index: int = Field(ge=0)
    content: str
    start_char: int = Field(ge=0)
    end_char: int = Field(ge=0)
    token_count: int = Field(ge=0)
    content_hash: str
    heading_chain: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _offsets_match_content(self) -> Chunk:
        if self.end_char - self.start_char != len(self.content):
            raise ValueError(
                f"chunk {self.chunk_id}: offsets [{self.start_char}, {self.end_char}) do not span "
                f"its {len(self.content)} characters"
            )
        return self

    @property
    def embed_text(self) -> str:
        """The text embedded for this chunk: its heading chain as context, "Chapter 3 > Methodology: <content>".

        Only the vector is computed from it; every store keeps `content` itself.
        """
        return embed_text(self.heading_chain, self.content)

    @property
    def is_whole_document(self) -> bool:
        """True when the document was stored as this single piece (see `single_piece_max`)."""
        return bool(self.metadata.get("whole_document"))
