"""File names as text that every store, JSON document and terminal accepts, without losing the file.

A POSIX file name is bytes. Python decodes a byte that is not UTF-8 (`caf\\xe9.txt`, a Latin-1 `é` from an old
archive or an SMB share) to a lone surrogate (`'caf\\udce9.txt'`, "surrogateescape"): a `str` no UTF-8 encoder
accepts, so JSON, SQLite, PostgreSQL, Qdrant payloads and Prefect parameters would all refuse it. The rule
(docs/usage.md, "File names"):

- a name that is valid UTF-8 is kept exactly as it is (newlines, control characters and `[markup]` included:
  they are text; the CLI prints them escaped, `unichunk.deployments.cli.console.literal`);
- in a name that is not, each undecodable byte is written `\\xNN` (two lower-case hex digits), as Python's
  `backslashreplace` writes it: `caf\\xe9.txt`. Any other lone surrogate is written `\\udNNN`.

The same bytes always give the same text, so a rescan re-finds the file under the same `source_id` (same
document ID: an edit updates it, a deletion deletes it). The file is still read by its real name (a
`SourceItem`'s `path`); only what is stored and shown is this text. The one ambiguity, a valid name that
spells the escape literally (`caf\\xe9.txt` with a backslash) beside the undecodable one in the same folder,
is refused by the listing for the undecodable one (`DirectorySource.list`), never stored twice.
"""

from __future__ import annotations

import os
import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def storable_name(name: str) -> str:
    """`name` with each undecodable byte (a lone surrogate) written `\\xNN`: valid UTF-8 text; a name that
    has none is returned unchanged."""
    return _SURROGATE.sub(_escape, name)


_ESCAPED_BYTE = re.compile(r"\\x([89a-f][0-9a-f])")


def openable_name(stored: str) -> str:
    """The name to open a file by, from its stored text: the text itself when such a file exists, else the
    text with each `\\xNN` (NN 80 to ff, bytes UTF-8 never holds alone) read back as that byte."""
    if os.path.lexists(stored) or not _ESCAPED_BYTE.search(stored):
        return stored
    return _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), stored)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(name: str) -> str:
    """`name` for a log line: control characters written as in a Python string literal (`\\n`, `\\x1b`),
    so a name holding a newline keeps its line whole (the CLI's own output does the same)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], storable_name(name))
