"""Failure isolation of the loaders, as a property: whatever bytes arrive under a .txt, .md, .html, .pdf or
.eml name, `load_bytes` returns a `Document` whose text any store can hold, or raises `DocumentLoadError`.

A loader that let any other exception out (a `LookupError` from an e-mail's unknown charset, pypdf's
`NotImplementedError` on a damaged filter name) would crash the pipeline's batch instead of failing that
one document.
Each format gets random bytes and mutations of valid seed files (`tests/hostile_bytes.py`: bit flips,
truncation, inserted and deleted runs, duplicated slices), so the parsers get past their first check and
are hit where they are fragile. 300 examples per format keep the whole file to a few seconds; 3,000 per
format were run once while writing it (the damaged filter name came from that run: kept below as an
explicit example).
"""

from __future__ import annotations

import pytest
from hostile_bytes import EMAIL_UNKNOWN_CHARSET, SEEDS, inputs
from hypothesis import HealthCheck, example, given, settings

from unichunk.chunking.errors import DamagedEmailError, DocumentLoadError
from unichunk.chunking.loaders import load_bytes
from unichunk.chunking.models import Document

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(data: bytes, suffix: str) -> None:
    """The property: a storable `Document`, or a `DocumentLoadError`; no other outcome."""
    try:
        document = load_bytes(data, f"fuzzed{suffix}")
    except DocumentLoadError as exc:
        assert str(exc).startswith(f"fuzzed{suffix}: ") and exc.reason
        return
    assert isinstance(document, Document) and isinstance(document.text, str) and document.text.strip()
    document.text.encode("utf-8")  # no lone surrogates: every store must be able to hold the text
    assert document.title is None or isinstance(document.title, str)
    (document.title or "").encode("utf-8")
    assert all(0 <= b.start <= b.end <= len(document.text) for b in document.blocks)


def test_every_seed_is_a_valid_document() -> None:
    """The mutations start from files that load, so they probe the parsers beyond their first check."""
    for suffix, seeds in SEEDS.items():
        for seed in seeds:
            assert load_bytes(seed, f"seed{suffix}").text.strip(), suffix


@PROPERTY
@given(inputs(".txt"))
def test_txt_loads_or_fails_with_a_load_error(data: bytes) -> None:
    check(data, ".txt")


@PROPERTY
@given(inputs(".md"))
def test_md_loads_or_fails_with_a_load_error(data: bytes) -> None:
    check(data, ".md")


@PROPERTY
@given(inputs(".html"))
@example(b"<p <b>unclosed <i>" * 300 + b"<div>" * 5000)
def test_html_loads_or_fails_with_a_load_error(data: bytes) -> None:
    check(data, ".html")


@PROPERTY
@given(inputs(".pdf"))
@example(b"%PDF-1.4\ntrailer\n<< /Root 1 0 R >>\n%%EOF")
@example(SEEDS[".pdf"][1].replace(b"/FlateDecode", b"/FlateDDecode"))  # pypdf: NotImplementedError
def test_pdf_loads_or_fails_with_a_load_error(data: bytes) -> None:
    check(data, ".pdf")


@PROPERTY
@given(inputs(".eml"))
@example(EMAIL_UNKNOWN_CHARSET.replace(b"x-made-up-charset", b"base64"))
@example(EMAIL_UNKNOWN_CHARSET.replace(b'"x-made-up-charset"', b"utf-8\x01"))
@example(
    b"Subject: caf\xe9 \xff\xfe\r\nContent-Type: text/plain; charset=unicode_escape\r\n\r\n\\ud800 x\r\n"
)
def test_eml_loads_or_fails_with_a_load_error(data: bytes) -> None:
    check(data, ".eml")


def test_an_unknown_email_charset_is_read_as_utf8_or_fails_naming_it() -> None:
    """The issue's file: `charset="x-made-up-charset"` raised LookupError and crashed the whole flow. Its
    UTF-8 text is read as UTF-8; other bytes under an unknown charset fail the document (a detected charset
    stored mojibake), and only a part that declares no charset is decoded with a detected one."""
    document = load_bytes(EMAIL_UNKNOWN_CHARSET, "made-up.eml")
    assert "Grüße aus München" in document.text and "\ufffd" not in document.text
    assert document.title == "Made-up charset"
    assert document.metadata == {"encoding": "utf-8", "declared_charset": "x-made-up-charset"}
    old = "Grüße aus München: die Zahlen für das dritte Quartal.".encode()
    latin = EMAIL_UNKNOWN_CHARSET.replace(
        old, "Grüße aus München: die Zahlen für das dritte Quartal, schöne Grüße.".encode("latin-1")
    )
    with pytest.raises(DamagedEmailError, match="unknown charset 'x-made-up-charset'"):
        load_bytes(latin, "latin.eml")
    undeclared = latin.replace(b'Content-Type: text/plain; charset="x-made-up-charset"\r\n', b"")
    detected = load_bytes(undeclared, "latin.eml")  # no charset named: charset_normalizer's guess decodes it
    assert "Grüße aus München" in detected.text and detected.metadata["declared_charset"] == "none"
