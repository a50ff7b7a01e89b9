"""Sources: what a directory or a list of paths yields, with POSIX relative IDs, and what each covers."""

from __future__ import annotations

import os
import re

import pytest

from unichunk.chunking.ids import SOURCE_NAME_PATTERN, derive_document_id
from unichunk.chunking.sources import DirectorySource, PathsSource, default_source_name


def _tree(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_directory_source_lists_matching_files_with_posix_relative_ids(tmp_path):
    _tree(
        tmp_path, {"a.md": "a", "sub/b.TXT": "b", "sub/deeper/c.html": "c", "skip.bin": "x", "sub/d.py": "d"}
    )
    items = DirectorySource(tmp_path).list()
    assert [i.source_id for i in items] == ["a.md", "sub/b.TXT", "sub/deeper/c.html"]
    first = items[0]
    assert first.path == str(tmp_path.resolve() / "a.md")
    assert first.size == 1 and first.mtime_ns == os.stat(tmp_path / "a.md").st_mtime_ns
    # The document ID is (source name, relative path): a named source keeps its IDs wherever it is mounted.
    assert first.document_id == derive_document_id(
        source_system=default_source_name(tmp_path), source_id="a.md"
    )
    moved = DirectorySource(tmp_path, source_system="kb").list()[0]
    assert moved.document_id == derive_document_id(source_system="kb", source_id="a.md")


def test_directory_source_custom_patterns(tmp_path):
    _tree(tmp_path, {"a.md": "a", "notes/b.txt": "b", "notes/c.md": "c"})
    assert [i.source_id for i in DirectorySource(tmp_path, ["notes/*.md"]).list()] == ["notes/c.md"]


def test_symlink_loops_neither_hang_nor_crash(tmp_path):
    _tree(tmp_path, {"a.md": "a", "sub/b.md": "b"})
    (tmp_path / "sub" / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "self").symlink_to(tmp_path / "self")  # a symlink pointing at itself
    (tmp_path / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    (tmp_path / "link.md").symlink_to(tmp_path / "a.md")
    assert [i.source_id for i in DirectorySource(tmp_path).list()] == ["a.md", "sub/b.md"]
    followed = [i.source_id for i in DirectorySource(tmp_path, follow_symlinks=True).list()]
    # Each directory is entered once: the loop back to the root adds nothing; the file link is a file.
    assert followed == ["a.md", "link.md", "sub/b.md"]


def test_directory_source_covers_only_its_root_and_patterns(tmp_path):
    _tree(tmp_path, {"docs/a.md": "a"})
    source = DirectorySource(tmp_path / "docs")
    root = tmp_path.resolve() / "docs"
    assert source.covers("gone.md", str(root / "gone.md"))
    assert not source.covers("gone.md", str(tmp_path.resolve() / "other" / "gone.md"))
    assert not source.covers("gone.py", str(root / "gone.py"))


def test_paths_source_skips_missing_files_and_uses_root(tmp_path):
    _tree(tmp_path, {"a.md": "a", "b/c.txt": "c"})
    source = PathsSource([tmp_path / "b/c.txt", tmp_path / "missing.md"], root=tmp_path)
    assert [i.source_id for i in source.list()] == ["b/c.txt"]
    assert source.covers("missing.md", None) and not source.covers("a.md", None)
    with pytest.raises(ValueError, match="not under the source root"):
        PathsSource(["/etc/hosts"], root=tmp_path).list()


def test_two_roots_with_the_same_relative_paths_never_share_document_ids(tmp_path):
    docs, bulk = tmp_path / "docs", tmp_path / "bulk"
    _tree(docs, {"intro.md": "docs intro"})
    _tree(bulk, {"intro.md": "bulk intro"})
    (a,), (b,) = DirectorySource(docs).list(), DirectorySource(bulk).list()
    assert a.source_id == b.source_id == "intro.md" and a.document_id != b.document_id
    assert DirectorySource(docs).list()[0].document_id == a.document_id  # the same root keeps its IDs
    # One file named under its root gets the ID a scan of that root gives it.
    (one,) = PathsSource([docs / "intro.md"], root=docs).list()
    assert one.document_id == a.document_id


@pytest.mark.parametrize("folder", ["docs", "my docs (2024)", ".hidden", "ünïcode-名前", "---"])
def test_default_source_names_are_readable_and_valid_webhook_source_names(tmp_path, folder):
    root = tmp_path / folder
    root.mkdir()
    name = default_source_name(root)
    assert re.fullmatch(SOURCE_NAME_PATTERN, name), name
    assert name == default_source_name(root / "sub" / "..")  # the absolute, resolved root decides
    assert name != default_source_name(tmp_path)
