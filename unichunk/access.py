"""Who is asking: the principal a request runs as, and what it may read and write.

Every door (CLI, HTTP API, MCP server, adapters, Python) turns its caller into a `Principal` and runs the
operation through `Pipeline.scoped(principal)`; the Pipeline turns the principal into a store filter
(`read_filter`) applied inside every store query, so `k` readable hits come back when `k` exist. A
principal reads a chunk when the chunk carries one of its labels; an admin reads everything; a principal
with no labels reads nothing, and a document without labels is read by admins only (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from unichunk.chunking.access_labels import normalise_labels
from unichunk.errors import UnichunkError
from unichunk.sinks.base import LABELS_FILTER, SearchFilter


class AccessDenied(UnichunkError, PermissionError):
    """The principal may not do this (write without write rights, an admin-only operation)."""


@dataclass(frozen=True)
class Principal:
    """A caller: `labels` it may read, whether it may write (ingest, delete, rebuild) and whether it is an
    admin (everything, including status and verify). `name` is for logs and audit, never a secret."""

    name: str
    labels: tuple[str, ...] = ()
    may_write: bool = False
    admin: bool = False
    token_id: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", normalise_labels(self.labels))

    def readable_labels(self) -> tuple[str, ...] | None:
        """The labels a chunk or document must share one of to be readable (None: any, an admin): the rule
        of `may_read`, as a query asks it of a store (`read_filter`; the status table's listing)."""
        return None if self.admin else self.labels

    def read_filter(self) -> SearchFilter | None:
        """The store filter this principal's reads run under (None: unrestricted, an admin)."""
        labels = self.readable_labels()
        return None if labels is None else {LABELS_FILTER: list(labels)}

    def may_read(self, labels: tuple[str, ...] | list[str]) -> bool:
        """Whether a chunk or document carrying `labels` is readable by this principal."""
        return self.admin or bool(set(self.labels) & set(labels))


# The Python caller who opened the data dir: it owns the files, so it reads and writes everything.
OWNER = Principal(name="owner", may_write=True, admin=True)
