"""Access labels: which readers may see a document, carried on the document and stored with every chunk.

A label is a short lower-case name (`hr`, `eng`, `customer:acme`); a document's labels live in
`Document.metadata[LABELS_KEY]` as a sorted tuple, so every store reads them from the document it is
given, as it reads the title. A document without labels is readable by admin principals only: access
fails closed (`unichunk.access`). This module is the one place a label is checked and normalised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from unichunk.chunking.errors import ChunkingError

LABELS_KEY = "labels"
_LABEL = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,62}")


class BadLabel(ChunkingError, ValueError):
    """A label that is not a short lower-case name; the request carrying it must change."""


def normalise_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """`labels` casefolded, stripped, checked, without repeats, sorted; `BadLabel` names the first bad one."""
    out: set[str] = set()
    for raw in labels:
        if not isinstance(raw, str):
            raise BadLabel(f"a label must be a string, not {type(raw).__name__}")
        label = raw.strip().casefold()
        if not _LABEL.fullmatch(label):
            raise BadLabel(
                f"bad label {raw!r}: 1-63 characters of a-z, 0-9, '_', '.', ':' or '-', starting with a letter "
                "or digit"
            )
        out.add(label)
    return tuple(sorted(out))


def document_labels(metadata: dict[str, object]) -> tuple[str, ...]:
    """The labels a document's metadata carries (none: admin-only)."""
    found = metadata.get(LABELS_KEY) or ()
    return normalise_labels([found] if isinstance(found, str) else found)  # type: ignore[list-item,arg-type]
