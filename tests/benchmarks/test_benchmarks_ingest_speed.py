"""`benchmarks.rust_book` finds the benchmarks' pages: the Rust book's chapters, never print.html or the redirects."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.rust_book import book_pages, rust_book


def test_pages_are_the_chapters_in_name_order(tmp_path: Path) -> None:
    for name in (
        "ch02-00-guessing.html",
        "ch01-00-getting-started.html",
        "appendix-01-keywords.html",
        "print.html",
        "closures.html",
        "index.html",
        "ch01-01-installation.html",
    ):
        (tmp_path / name).write_text("<html></html>")
    names = [p.name for p in book_pages(tmp_path, 10)]
    assert names == [
        "appendix-01-keywords.html",
        "ch01-00-getting-started.html",
        "ch01-01-installation.html",
        "ch02-00-guessing.html",
    ]
    assert [p.name for p in book_pages(tmp_path, 2)] == names[:2]


def test_the_rust_book_is_found_where_the_toolchain_keeps_it() -> None:
    book = rust_book()
    if book is None:
        pytest.skip("no Rust book here: `rustup component add rust-docs` or `apt-get install rust-doc`")
    assert (book / "ch01-00-getting-started.html").is_file()
    assert len(book_pages(book, 1000)) > 100
