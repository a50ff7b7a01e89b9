"""Where documents come from: a `Source` lists items cheaply and loads one item into a `Document`.

Listing only stats files (no reading), so the pipeline can skip unchanged documents before loading them.
A document is identified by (source name, path within the source): `source_system` names the source and
`source_id` is the path relative to its root in POSIX form. The name defaults to one derived from the
absolute root (`default_source_name`), so two folders that share relative paths (`docs/intro.md`,
`bulk/intro.md`) never share document IDs, and re-ingesting the same folder keeps its IDs; give a name
explicitly (`--source`, a webhook's `source_system`) to keep IDs stable when the folder moves. Only local files are implemented; an S3
bucket or a list of URLs would be another `Source` subclass yielding the same `SourceItem`s.
"""

from __future__ import annotations

import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType

import pathspec

from unichunk.chunking.access_labels import LABELS_KEY, document_labels, normalise_labels
from unichunk.chunking.config import DEFAULT_MAX_DOCUMENT_BYTES
from unichunk.chunking.ids import default_source_name, derive_document_id
from unichunk.chunking.label_rules import LabelRule, effective_labels
from unichunk.chunking.loaders import load_document
from unichunk.chunking.models import Document
from unichunk.chunking.names import storable_name

DEFAULT_PATTERNS: tuple[str, ...] = (
    "**/*.md",
    "**/*.markdown",
    "**/*.txt",
    "**/*.html",
    "**/*.htm",
    "**/*.pdf",
    "**/*.eml",
)


@dataclass(frozen=True)
class SourceItem:
    """One listed document: small and picklable, so tasks pass these rather than file contents."""

    source_system: str
    source_id: str
    path: str
    size: int
    mtime_ns: int
    # The document's access labels as listed (its source's labels, matching rules and its own), put into the
    # loaded document's metadata by `load_item`: unchanged content with other labels is relabelled.
    labels: tuple[str, ...] = ()

    @property
    def document_id(self) -> str:
        return derive_document_id(source_system=self.source_system, source_id=self.source_id)

    @property
    def stored_path(self) -> str:
        """`path` as the status table and the stores keep it (`unichunk.chunking.names.storable_name`);
        `path` itself is the name the file is opened by."""
        return storable_name(self.path)

    @property
    def mtime(self) -> float:
        return self.mtime_ns / 1e9


def load_item(item: SourceItem, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> Document:
    """Read and decode one item (at most `max_bytes`), its listed labels (with any the loader found) in its
    metadata; raises `unichunk.chunking.errors.DocumentLoadError` on unreadable content."""
    document = load_document(
        Path(item.path), source_system=item.source_system, source_id=item.source_id, max_bytes=max_bytes
    )
    return with_labels(document, item.labels)


def with_labels(document: Document, labels: Iterable[str]) -> Document:
    """`document` carrying `labels` besides its own (`Document.metadata["labels"]`, normalised)."""
    merged = normalise_labels([*document_labels(document.metadata), *labels])
    if not merged and LABELS_KEY not in document.metadata:
        return document
    return document.model_copy(update={"metadata": {**document.metadata, LABELS_KEY: merged}})


class Source(ABC):
    """A set of documents the pipeline keeps in sync with the stores; `source_system` is its name, `root`
    the directory its document paths are relative to (None: absolute paths)."""

    source_system: str
    root: Path | None
    # Access labels every listed document gets, and the sidecar rules (`unichunk.chunking.label_rules`).
    labels: tuple[str, ...] = ()
    label_rules: tuple[LabelRule, ...] = ()
    document_labels: Mapping[str, tuple[str, ...]] = MappingProxyType({})  # source_id -> its own labels

    def labels_for(self, source_id: str) -> tuple[str, ...]:
        """The labels a document listed as `source_id` carries."""
        own = self.document_labels.get(source_id, ())
        return effective_labels(source_id, self.labels, self.label_rules, own)

    def with_access(
        self,
        labels: Iterable[str] = (),
        rules: Iterable[LabelRule] = (),
        own: Mapping[str, tuple[str, ...]] | None = None,
    ) -> Source:
        """This source, giving its documents `labels`, the `rules`' labels and their `own` (by source_id)."""
        self.labels, self.label_rules = normalise_labels(labels), tuple(rules)
        if own is not None:
            self.document_labels = dict(own)
        return self

    @abstractmethod
    def list(self) -> list[SourceItem]:
        """Every document currently in the source, sorted by source_id."""

    def load(self, item: SourceItem) -> Document:
        return load_item(item)

    @abstractmethod
    def covers(self, source_id: str, path: str | None) -> bool:
        """Would `list()` return this document if it still existed? Decides what counts as deleted."""


# The source name of files given by absolute path with no root: their paths are unique already.
ABSOLUTE_PATHS_SOURCE = "fs"


def _stat_item(source: Source, source_id: str, path: Path, st: os.stat_result) -> SourceItem:
    """`source_id` as it is stored: undecodable bytes of the name written `\\xNN` (`storable_name`)."""
    stored = storable_name(source_id)
    labels = source.labels_for(stored)
    return SourceItem(source.source_system, stored, str(path), st.st_size, st.st_mtime_ns, labels)


class DirectorySource(Source):
    """Files under `root` matching gitignore-style `patterns` (case-insensitive), walked without loops."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        patterns: Sequence[str] = DEFAULT_PATTERNS,
        *,
        follow_symlinks: bool = False,
        source_system: str | None = None,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        self.patterns = tuple(patterns)
        self.follow_symlinks = follow_symlinks
        self.source_system = source_system or default_source_name(self.root)
        self._spec = pathspec.PathSpec.from_lines("gitwildmatch", [p.lower() for p in self.patterns])

    def matches(self, source_id: str) -> bool:
        # pathspec's `**/` is a regex `.` without DOTALL: a newline in a folder's name would make no file
        # under it match, so the newline is matched as NUL (no path holds one; any `*` or `?` matches it).
        return self._spec.match_file(source_id.lower().replace("\n", "\0"))

    def list(self) -> list[SourceItem]:
        if not self.root.is_dir():
            raise NotADirectoryError(f"source root is not a directory: {self.root}")
        items: dict[str, SourceItem] = {}
        for rel, path, st in self._walk():
            item = _stat_item(self, rel, path, st)
            if not self.matches(item.source_id):
                continue
            # Two names give one ID only where a valid name spells an undecodable one's escape (`caf\\xe9.txt`
            # beside `caf<0xE9>.txt`): the valid name keeps it, the other is not listed (docs/usage.md).
            if item.source_id != rel and item.source_id in items:
                continue
            items[item.source_id] = item
        return sorted(items.values(), key=lambda i: i.source_id)

    def _walk(self) -> Iterator[tuple[str, Path, os.stat_result]]:
        """Depth-first walk; a directory reached twice (symlink loop, bind mount) is entered once."""
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[Path, PurePosixPath]] = [(self.root, PurePosixPath())]
        while stack:
            directory, rel_dir = stack.pop()
            try:
                dst = directory.stat()
                if (dst.st_dev, dst.st_ino) in seen:
                    continue
                seen.add((dst.st_dev, dst.st_ino))
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue  # unreadable or vanished directory: nothing to list there
            for entry in entries:
                rel = rel_dir / entry.name
                try:
                    if self._entry_refusal(entry.is_symlink()):
                        continue
                    st = entry.stat(follow_symlinks=True)
                except OSError:
                    continue  # broken symlink or vanished file
                if stat.S_ISDIR(st.st_mode):
                    stack.append((Path(entry.path), rel))
                elif self._entry_refusal(False, st.st_mode, last=True) is None:
                    yield rel.as_posix(), Path(entry.path), st

    def _entry_refusal(self, is_link: bool, mode: int | None = None, *, last: bool = False) -> str | None:
        """Why the walk does not take one directory entry (None: it does): a link it does not follow, or,
        for the file itself (`last`), anything but a regular file. Shared by `list` and `refusal`."""
        if is_link and not self.follow_symlinks:
            return "is a symbolic link (the scan does not follow links)"
        if last and mode is not None and not stat.S_ISREG(mode):
            return "is a directory" if stat.S_ISDIR(mode) else "is not a regular file"
        return None

    def refusal(self, source_id: str) -> str | None:
        """Why `list()` would not list a file as `source_id`, or None if it would: the one rule for what
        this source holds, which the scan applies to every entry and a webhook to the one it names (so a
        rescan can always delete what a webhook added). `source_id` must be the file's path relative to
        the root as the scan writes it (POSIX, no `.`/`..`/empty parts), match the patterns, and every
        part of it must be an entry the walk takes (no symlink unless followed; a regular file at the end).
        """
        rel = PurePosixPath(source_id)
        if (
            not source_id
            or rel.is_absolute()
            or rel.as_posix() != source_id
            or any(part in (".", "..") for part in rel.parts)
        ):
            return "is not a path relative to the source root as a scan writes it"
        if not self.matches(source_id):
            return f"is excluded by the source's patterns ({', '.join(self.patterns)})"
        path = self.root
        for n, part in enumerate(rel.parts, start=1):
            path = path / part
            last = n == len(rel.parts)
            try:
                link = path.is_symlink()
                st = path.stat()
            except OSError:
                return "is not in the source root (no such file)"
            refused = self._entry_refusal(link, st.st_mode, last=last)
            if refused is None and not last and not stat.S_ISDIR(st.st_mode):
                refused = "is not a path in the source root (a part of it is not a directory)"
            if refused is not None:
                where = "" if last else f" ({rel.parts[n - 1]})"
                return refused + where
        return None

    def covers(self, source_id: str, path: str | None) -> bool:
        """Listed paths are built from the resolved root, so a path under it is compared lexically."""
        if path is None:
            return False
        try:
            rel = PurePosixPath(storable_name(path)).relative_to(storable_name(self.root.as_posix()))
        except ValueError:
            return False
        return rel.as_posix() == source_id and self.matches(source_id)


class PathsSource(Source):
    """An explicit list of files; `source_id` is relative to `root` if given, else the absolute path.

    With a root, the default source name is the root's, so files named one by one (a webhook, `unichunk
    ingest FILE`) get the IDs a scan of that root gives them; without one, the absolute path is the ID.
    """

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        root: str | os.PathLike[str] | None = None,
        source_system: str | None = None,
    ) -> None:
        self.root = Path(root).expanduser().resolve() if root is not None else None
        self.paths = list(dict.fromkeys(Path(p).expanduser().resolve() for p in paths))  # no duplicates
        default = default_source_name(self.root) if self.root is not None else ABSOLUTE_PATHS_SOURCE
        self.source_system = source_system or default

    def source_id_for(self, path: Path) -> str:
        if self.root is not None:
            try:
                return storable_name(path.relative_to(self.root).as_posix())
            except ValueError as exc:
                raise ValueError(storable_name(f"{path} is not under the source root {self.root}")) from exc
        return storable_name(path.as_posix())

    def list(self) -> list[SourceItem]:
        """The listed paths that exist as regular files (a missing one counts as deleted)."""
        items = []
        for path in self.paths:
            try:
                st = path.stat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                items.append(_stat_item(self, self.source_id_for(path), path, st))
        return sorted(items, key=lambda i: i.source_id)

    def covers(self, source_id: str, path: str | None) -> bool:
        return any(self.source_id_for(p) == source_id for p in self.paths)
