"""Any file name is a file name: real files named by arbitrary bytes, listed, loaded and serialised.

POSIX names are bytes (any but `/` and NUL). Hypothesis draws them (Latin-1 bytes, broken UTF-8, newlines,
escape sequences, Rich markup, a literal `\\xe9`), the test creates the files on disk by their bytes, and
checks what every record and store later does with a name: the listing gives it a `source_id` and a
stored path that JSON and UTF-8 accept, the same one each time it is listed; the loader reads it (or fails it
with an error whose text is storable); `covers` agrees, so a deleted file is found deleted. The full CLI
over such names is `tests/faults/test_faults_file_names.py`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from unichunk.chunking.errors import DocumentLoadError
from unichunk.chunking.loaders import load_document
from unichunk.chunking.names import openable_name, storable_name
from unichunk.chunking.sources import DirectorySource, PathsSource, load_item

# A name's bytes: anything POSIX allows in one path component (no `/`, no NUL, not `.` or `..`).
NAME_BYTES = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")
)


def raw(directory: Path, *names: bytes) -> Path:
    """The path of `names` (bytes, as POSIX has them) under `directory`."""
    return Path(os.fsdecode(os.path.join(os.fsencode(directory), *names)))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8")  # raises on a lone surrogate, as JSON, SQLite and Qdrant do


def test_undecodable_bytes_are_written_as_escapes_and_valid_names_kept() -> None:
    assert storable_name(os.fsdecode(b"caf\xe9.txt")) == "caf\\xe9.txt"
    assert storable_name(os.fsdecode(b"\xc3\x28.md")) == "\\xc3(.md"
    for valid in ("café.txt", "[bold]fail[.txt", "new\nline.txt", "tab\there.md", "caf\\xe9.txt"):
        assert storable_name(valid) == valid


def test_a_load_error_names_the_path_in_the_source_safely(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.txt").write_bytes(b"\xc3\x28 not utf-8")
    raw(tmp_path, b"sub", b"caf\xe9.txt").write_bytes(b"\xff not utf-8")
    source = DirectorySource(tmp_path)
    errors = {}
    for item in source.list():
        try:
            load_item(item)
        except DocumentLoadError as exc:
            errors[item.source_id] = str(exc)
    assert errors["sub/bad.txt"].startswith("sub/bad.txt: not valid utf-8 text")
    assert errors["sub/caf\\xe9.txt"].startswith("sub/caf\\xe9.txt: not valid utf-8 text")
    with_root = tmp_path / "sub" / "bad.txt"
    try:
        load_document(with_root, root=tmp_path)
    except DocumentLoadError as exc:
        assert exc.source == "sub/bad.txt"


def test_a_valid_name_spelling_an_escape_keeps_its_id_and_the_undecodable_one_is_not_listed(
    tmp_path: Path,
) -> None:
    """The one ambiguity of the rule: `caf\\xe9.txt` (a backslash) beside `caf<0xE9>.txt`, listed once."""
    (tmp_path / "caf\\xe9.txt").write_text("spelled\n")
    raw(tmp_path, b"caf\xe9.txt").write_bytes(b"latin-1 name\n")
    (item,) = DirectorySource(tmp_path).list()
    assert item.source_id == "caf\\xe9.txt" and item.path == str(tmp_path / "caf\\xe9.txt")
    assert load_item(item).text == "spelled\n"


def test_a_stored_path_opens_the_file_again(tmp_path: Path) -> None:
    named = raw(tmp_path, b"r\xe9sum\xe9.txt")
    named.write_bytes(b"text\n")
    stored = storable_name(str(named))
    assert stored.endswith("r\\xe9sum\\xe9.txt")
    assert Path(openable_name(stored)).read_bytes() == b"text\n"
    assert openable_name(str(tmp_path / "plain.txt")) == str(tmp_path / "plain.txt")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(NAME_BYTES, min_size=1, max_size=4, unique=True))
@example(names=[b"caf\xe9", b"[bold]fail[", b"new\nline", b"\x1b[31mred", b"caf\\xe9", b"\xff\xfe", b"..."])
def test_any_byte_name_is_listed_loaded_and_serialised(tmp_path: Path, names: list[bytes]) -> None:
    root = tmp_path / "names"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nAlice met Bob in Berlin.\n")
    for name in names:  # each name as a file, and as a folder holding one
        raw(root, name + b".txt").write_bytes(b"A file named by bytes.\n")
        raw(root, name).mkdir()
        raw(root, name, b"inner.txt").write_bytes(b"A file in a folder named by bytes.\n")
    source = DirectorySource(root)

    items = source.list()
    ids = [item.source_id for item in items]
    assert "good.md" in ids and len(ids) == len(set(ids))
    # Every name is listed, but for a valid name spelling an undecodable one's escape (listed once).
    assert len(items) == 1 + 2 * len({storable_name(os.fsdecode(name)) for name in names})
    assert [item.source_id for item in source.list()] == ids  # the same IDs at every scan
    for item in items:
        record = {"source_id": item.source_id, "path": item.stored_path, "document_id": item.document_id}
        assert json.loads(json.dumps(record, ensure_ascii=False)) == record
        _utf8(item.source_id + item.stored_path)
        assert source.covers(item.source_id, item.stored_path)  # a rescan finds it, so deletion works
        assert PathsSource([openable_name(item.stored_path)], root=root).list()[0].source_id == item.source_id
        document = load_item(item)
        assert document.source_id == item.source_id and document.path == item.stored_path
        assert document.text == Path(item.path).read_text()
        _utf8(document.model_dump_json())  # the chunk cache's record of it

    for name in names:
        raw(root, name + b".txt").unlink()
        shutil.rmtree(raw(root, name))
    assert [item.source_id for item in source.list()] == ["good.md"]
