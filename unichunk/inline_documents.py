"""In-memory documents, ingested through the same path as files: each becomes a file of a folder the
data dir owns (`<data_dir>/inline/<source>/<name>`), and that folder is ingested as a source.

Why files and not a second code path: the pipeline skips unchanged documents by size and mtime, records
what to re-read for repair and rebuild, and the nightly re-index re-lists every source it has seen. A file
per document gives in-memory documents all of that unchanged. A document is rewritten only when its text
changed, so re-ingesting the same texts skips them like unchanged files; its ID is the one any document
named `<name>` in source `<source>` has.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from unichunk.chunking.errors import UnichunkError
from unichunk.chunking.models import Document

INLINE_FOLDER = "inline"


class InvalidDocumentName(UnichunkError, ValueError):
    """A document name that cannot be a path inside its source."""


@dataclass(frozen=True)
class Rejected:
    name: str
    error: str


def inline_root(data_dir: Path, source: str) -> Path:
    return data_dir / INLINE_FOLDER / source


def named_texts(documents: Sequence[Document] | Mapping[str, str]) -> list[tuple[str, str]]:
    """(name, text) pairs: a mapping's keys, or each Document's `source_id` (its path within the source)."""
    if isinstance(documents, Mapping):
        return [(str(name), text) for name, text in documents.items()]
    pairs = []
    for document in documents:
        if not document.source_id:
            raise InvalidDocumentName(
                "an in-memory Document needs a source_id, its name within the source (e.g. 'faq.md'): "
                "the name keeps its ID stable across updates"
            )
        pairs.append((document.source_id, document.text))
    return pairs


def check_name(name: str) -> PurePosixPath:
    """A relative POSIX path without `..`, empty parts or control characters (it becomes a file name)."""
    path = PurePosixPath(name)
    if (
        not name
        or "\\" in name
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
        or any(ord(c) < 32 or c == "\x7f" for c in name)
    ):
        raise InvalidDocumentName(f"{name!r} is not a relative path like 'notes/faq.md'")
    return path


def write_documents(root: Path, pairs: Sequence[tuple[str, str]]) -> list[Rejected]:
    """Write each text to `root/<name>` (UTF-8) unless it holds that text already; returns the rejected
    ones (a bad name, a text UTF-8 cannot hold) with why, having written the rest."""
    rejected = []
    for name, text in pairs:
        try:
            data = text.encode("utf-8")
            target = root.joinpath(*check_name(name).parts)
        except (InvalidDocumentName, UnicodeEncodeError) as exc:
            rejected.append(Rejected(name, f"{type(exc).__name__}: {exc}"))
            continue
        if target.is_file() and target.read_bytes() == data:
            continue  # unchanged: same size and mtime, so the run skips it
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(target, data)
    return rejected


def _write_atomically(target: Path, data: bytes) -> None:
    """A run listing the folder meanwhile sees the old file or the new one, never half of it."""
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
