"""Sources: what a directory or a list of paths yields, with POSIX relative IDs, and what each covers."""

from __future__ import annotations

import os

import pytest

from chunking.ids import derive_document_id
from chunking.sources import DirectorySource, PathsSource


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
    # The document ID depends on the relative ID only, so another checkout location gives the same ID.
    assert first.document_id == derive_document_id(source_system="fs", source_id="a.md")


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
