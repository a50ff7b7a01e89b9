"""The Rust book's HTML, the real third-party pages the ingest and chunking benchmarks read.

It ships with every Rust toolchain's docs, at `$(rustc --print sysroot)/share/doc/rust/html/book`, or with
Debian's `rust-doc` package at /usr/share/doc/rust-doc/html/book. Nothing of it is copied in here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

NOT_INSTALLED = (
    "the Rust book is not installed: `rustup component add rust-docs` (then it is under "
    "`rustc --print sysroot`/share/doc/rust/html/book), or `apt-get install rust-doc`"
)


def rust_book() -> Path | None:
    """The Rust book's HTML directory of the active toolchain (or Debian's rust-doc), if installed."""
    candidates = []
    try:
        sysroot = subprocess.run(
            ["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
        candidates.append(Path(sysroot) / "share/doc/rust/html/book")
    except (OSError, subprocess.SubprocessError):
        pass
    candidates.append(Path("/usr/share/doc/rust-doc/html/book"))
    return next((c for c in candidates if (c / "ch01-00-getting-started.html").is_file()), None)


def book_pages(book: Path, n: int) -> list[Path]:
    """The first `n` chapters in name order (the other files are redirects, the index and print.html)."""
    pages = sorted([*book.glob("ch*.html"), *book.glob("appendix-*.html")])
    return pages[:n]
