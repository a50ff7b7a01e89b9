"""Deterministic identifiers: the same input always yields the same document and chunk IDs.

Chunk IDs are scoped to their document (`{document_id}::chunk::{index:03d}::{sha8}`), so identical text
in two documents never collides, and the content hash suffix makes an edited chunk a new ID.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

# What a source name may be: it travels in webhook payloads, Prefect event payloads and `unichunk status`.
SOURCE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")  # what a source name may not hold
_CHUNK_ID = re.compile(r"^(?P<doc>.+)::chunk::(?P<index>\d{3,})::(?P<sha>[0-9a-f]{8})$")


def sha256_hex(text: str) -> str:
    """SHA-256 of the UTF-8 encoding of `text`, as 64 hex characters."""
    # surrogatepass: a str may hold lone surrogates; hashing must not raise on them.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def derive_document_id(
    *, source_system: str | None = None, source_id: str | None = None, content_hash: str | None = None
) -> str:
    """`doc_` + 16 hex of `source_system:source_id` when both are known, else `art_` + 8 hex of content.

    Hashing the source key (rather than using it verbatim) keeps IDs short, free of path separators
    and safe in URLs, Cypher parameters and file names, whatever the source system calls its documents.
    """
    if source_system and source_id:
        return "doc_" + sha256_hex(f"{source_system}:{source_id}")[:16]
    if content_hash:
        return "art_" + content_hash[:8]
    raise ValueError("a document ID needs source_system and source_id, or a content hash")


def make_chunk_id(document_id: str, index: int, content: str) -> str:
    """`{document_id}::chunk::{index:03d}::{sha256(content)[:8]}`."""
    return chunk_id_for_hash(document_id, index, sha256_hex(content))


def chunk_id_for_hash(document_id: str, index: int, content_hash: str) -> str:
    """The chunk ID when the content's SHA-256 is already known (saves hashing every chunk twice)."""
    return f"{document_id}::chunk::{index:03d}::{content_hash[:8]}"


def parse_chunk_id(chunk_id: str) -> tuple[str, int, str]:
    """Split a chunk ID into (document_id, index, content sha8); raises ValueError if malformed."""
    match = _CHUNK_ID.match(chunk_id)
    if not match:
        raise ValueError(f"not a unichunk chunk ID: {chunk_id!r}")
    return match["doc"], int(match["index"]), match["sha"]


def default_source_name(root: str | os.PathLike[str]) -> str:
    """`<folder name>-<8 hex of the absolute root>`: readable in `unichunk status`, unique per folder.

    It is a valid webhook `source_system` (letters, digits, `.`, `_`, `-`; starts with a letter or digit).
    """
    absolute = Path(root).expanduser().resolve()
    slug = _UNSAFE.sub("-", absolute.name).strip("-._")[:40] or "root"
    return f"{slug}-{sha256_hex(absolute.as_posix())[:8]}"
