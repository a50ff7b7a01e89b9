"""`DirectorySource.refusal` is the scan's own rule: it takes exactly what `list()` lists (issue 29, item 7).

A webhook may name only a file a scan would list, so the two must never disagree: for any name, the
refusal is None if and only if the listing holds it. Proven over random trees (files with listed and
excluded extensions, subfolders, symlinks to files and folders, FIFOs) and random names, known ones and
arbitrary text alike.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.sources import DirectorySource

NAMES = st.sampled_from(["a.md", "b.txt", "data.bin", "Notes.MD", "x.html", "sub", "deep", "c.eml"])
KINDS = st.sampled_from(["file", "dir", "link_file", "link_dir", "fifo"])


def _build(root: Path, spec: list[tuple[list[str], str]]) -> list[str]:
    """Make each (path parts, kind) that can be made; returns every relative path made (any kind)."""
    made = []
    for parts, kind in spec:
        path = root.joinpath(*parts)
        if os.path.lexists(path):  # taken (writing to a FIFO made before would block)
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "file":
                path.write_text("text\n")
            elif kind == "dir":
                path.mkdir()
            elif kind == "link_file":
                path.symlink_to(root / "target.md")
            elif kind == "link_dir":
                path.symlink_to(root / "target_dir", target_is_directory=True)
            else:
                os.mkfifo(path)
        except OSError:  # a name already taken, a parent that is a file: that entry is not made
            continue
        made.append("/".join(parts))
    return made


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.lists(st.tuples(st.lists(NAMES, min_size=1, max_size=3), KINDS), max_size=12),
    follow=st.booleans(),
    extra=st.lists(st.text(min_size=0, max_size=12), max_size=5),
)
def test_refusal_is_none_exactly_for_what_the_scan_lists(spec, follow, extra):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        outside = Path(tmp)
        (outside / "target.md").write_text("outside\n")
        (outside / "target_dir").mkdir()
        (outside / "target_dir" / "t.md").write_text("outside\n")
        made = _build(root, spec)
        source = DirectorySource(root, follow_symlinks=follow)
        listed = {item.source_id for item in source.list()}
        candidates = set(made) | listed | set(extra) | {f"./{m}" for m in made} | {f"{m}/" for m in made}
        candidates |= {f"{m}/t.md" for m in made}  # through a linked folder
        for name in candidates:
            if "\x00" in name:
                continue  # no file name holds NUL; the webhook refuses it before asking
            refusal = source.refusal(name)
            assert (refusal is None) == (name in listed), (name, refusal, sorted(listed))
