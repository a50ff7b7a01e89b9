"""Loaders: every format, every bad input, built from bytes in the test (real pypdf, real email parser)."""

from __future__ import annotations

import codecs
import io
from pathlib import Path

import pytest

from unichunk.chunking.errors import (
    DamagedEmailError,
    DocumentLoadError,
    EmptyDocumentError,
    UndecodableTextError,
    UnsupportedFormatError,
)
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.loaders import load_bytes, load_document


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_text_file_keeps_crlf_and_derives_ids_from_relative_path(tmp_path: Path) -> None:
    path = write(tmp_path, "sub/notes.txt", "line one\r\nline two é\r\n".encode())
    document = load_document(path, root=tmp_path)
    assert document.text == "line one\r\nline two é\r\n"
    assert document.source_system == "fs" and document.source_id == "sub/notes.txt"
    assert document.document_id == derive_document_id(source_system="fs", source_id="sub/notes.txt")
    assert document.title == "notes" and document.mime_type == "text/plain"
    assert load_document(path).source_id == path.resolve().as_posix()
    assert load_document(path, source_system="s3", source_id="bucket/key").source_id == "bucket/key"


@pytest.mark.parametrize(
    ("bom_and_codec"),
    [
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (codecs.BOM_UTF32_BE, "utf-32-be"),
    ],
)
def test_bom_detected_encodings_strip_only_the_bom(tmp_path: Path, bom_and_codec: tuple[bytes, str]) -> None:
    bom, codec = bom_and_codec
    text = "Grüße 漢字 😀\r\nline\ufeff"
    document = load_document(write(tmp_path, "a.txt", bom + text.encode(codec)))
    assert document.text == text
    assert document.metadata["encoding"] == codec


def test_invalid_utf8_names_document_and_byte_offset(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.txt", b"valid start \xff\xfe rest")
    with pytest.raises(UndecodableTextError) as error:
        load_document(path)
    assert error.value.source == "bad.txt"
    assert "byte offset 12" in error.value.reason


def test_utf16_without_bom_is_binary(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormatError, match="NUL"):
        load_document(write(tmp_path, "u16.txt", "hello".encode("utf-16-le")))


@pytest.mark.parametrize(
    ("name", "data", "kind"),
    [
        ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "PNG"),
        ("photo.dat", b"\xff\xd8\xff\xe0\x00\x10JFIF", "JPEG"),
        ("anim.md", b"GIF89a\x01\x00", "GIF"),
        ("program", b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8, "ELF"),
        ("archive.txt", b"PK\x03\x04\x14\x00", "ZIP"),
        ("fake.txt", b"%PDF-1.4\n1 0 obj", "PDF"),
        ("nul.log", b"text\x00with nul", "NUL"),
    ],
)
def test_binary_inputs_are_unsupported(tmp_path: Path, name: str, data: bytes, kind: str) -> None:
    with pytest.raises(UnsupportedFormatError, match=kind):
        load_document(write(tmp_path, name, data))


@pytest.mark.parametrize(
    "data", [b"", b"   \n\t\r\n  ", codecs.BOM_UTF8, codecs.BOM_UTF16_LE + " \n".encode("utf-16-le")]
)
def test_empty_or_whitespace_only(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(EmptyDocumentError):
        load_document(write(tmp_path, "empty.txt", data))


def test_unknown_extension_is_read_as_text_when_it_decodes(tmp_path: Path) -> None:
    document = load_document(write(tmp_path, "config.ini", b"[section]\nkey = value\n"))
    assert document.text == "[section]\nkey = value\n" and document.mime_type == "text/plain"


def test_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "big.txt", b"x" * 2000)
    with pytest.raises(DocumentLoadError, match="over the 1000-byte limit"):
        load_document(path, max_bytes=1000)
    with pytest.raises(DocumentLoadError, match="1500-byte limit"):
        load_bytes(b"x" * 2000, "big.txt", max_bytes=1500)
    assert load_document(path, max_bytes=2000).text == "x" * 2000
    monkeypatch.setenv("UNICHUNK_MAX_DOCUMENT_BYTES", "1500")  # the caller's limit, not the environment's
    assert load_bytes(b"x" * 2000, "big.txt").text == "x" * 2000


def test_file_outside_root(tmp_path: Path) -> None:
    path = write(tmp_path, "a/x.txt", b"text")
    with pytest.raises(DocumentLoadError, match="not under the root"):
        load_document(path, root=tmp_path / "b")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DocumentLoadError, match="cannot read"):
        load_document(tmp_path / "nope.txt")


def test_markdown_title_from_first_heading(tmp_path: Path) -> None:
    document = load_document(
        write(tmp_path, "guide.md", b"Intro line\n\n## Getting started ##\n\nText.\n# Later\n")
    )
    assert document.mime_type == "text/markdown" and document.title == "Getting started"
    setext = load_bytes(b"Big Title\n=========\n\nBody.\n", "x.markdown")
    assert setext.title == "Big Title"
    assert load_bytes(b"no heading here\n", "plain.md").title == "plain"


def test_html_uses_extracted_text_blocks_and_title(tmp_path: Path) -> None:
    pytest.importorskip("unichunk.chunking.html_extract")
    markup = (
        b"<html><head><title>Page Title</title></head><body><h1>Head</h1><p>First para.</p></body></html>"
    )
    document = load_document(write(tmp_path, "page.html", markup))
    assert document.mime_type == "text/html" and document.title == "Page Title"
    assert "Head" in document.text and "First para." in document.text and "<p>" not in document.text
    assert document.blocks and all(0 <= b.start < b.end <= len(document.text) for b in document.blocks)
    with pytest.raises(EmptyDocumentError):
        load_bytes(b"<html><body><script>x()</script></body></html>", "empty.htm")


def _minimal_text_pdf(text: str) -> bytes:
    """A hand-written one-page PDF with a Helvetica text object (pypdf can extract it)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def test_pdf_with_text_layer(tmp_path: Path) -> None:
    document = load_document(write(tmp_path, "hello.pdf", _minimal_text_pdf("Hello world")))
    assert document.text == "Hello world"
    assert document.mime_type == "application/pdf" and document.title == "hello"
    assert document.metadata["pages"] == 1


def test_pdf_pages_joined_by_blank_lines(tmp_path: Path) -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for word in ("First", "Second"):
        writer.add_page(PdfReader(io.BytesIO(_minimal_text_pdf(f"{word} page"))).pages[0])
    out = io.BytesIO()
    writer.write(out)
    assert load_bytes(out.getvalue(), "two.pdf").text == "First page\n\nSecond page"


def test_pdf_without_text_layer_is_empty(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(EmptyDocumentError, match="no text layer"):
        load_document(write(tmp_path, "blank.pdf", out.getvalue()))


def test_broken_pdf(tmp_path: Path) -> None:
    with pytest.raises(DocumentLoadError):
        load_document(write(tmp_path, "broken.pdf", b"%PDF-1.4\nthis is not really a pdf"))
    with pytest.raises(UnsupportedFormatError):
        load_document(write(tmp_path, "notpdf.pdf", b"\x89PNG\r\n\x1a\n"))


EMAIL_PLAIN = (
    b"From: Alice <alice@example.com>\r\nTo: Bob <bob@example.com>\r\nCc: carol@example.com\r\n"
    b"Date: Sat, 21 Nov 2026 10:00:00 +0000\r\nSubject: Quarterly report\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: multipart/alternative; boundary=XX\r\n\r\n"
    b"--XX\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHello Bob,\r\nthe numbers are in.\r\n"
    b"--XX\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>Hello Bob, <b>HTML</b></p>\r\n--XX--\r\n"
)


def test_email_headers_then_plain_body(tmp_path: Path) -> None:
    document = load_document(write(tmp_path, "mail.eml", EMAIL_PLAIN))
    header, _, body = document.text.partition("\n\n")
    assert header.splitlines() == [
        "From: Alice <alice@example.com>",
        "To: Bob <bob@example.com>",
        "Cc: carol@example.com",
        "Date: Sat, 21 Nov 2026 10:00:00 +0000",
        "Subject: Quarterly report",
    ]
    assert "Hello Bob," in body and "numbers are in." in body and "HTML" not in body
    assert document.title == "Quarterly report" and document.mime_type == "message/rfc822"


def test_email_with_only_html_body(tmp_path: Path) -> None:
    pytest.importorskip("unichunk.chunking.html_extract")
    data = (
        b"From: a@example.com\r\nSubject: Only HTML\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        b"<html><body><p>Rich <i>text</i> body.</p></body></html>\r\n"
    )
    document = load_bytes(data, "rich.eml")
    assert document.text.startswith("From: a@example.com\nSubject: Only HTML\n\n")
    assert "Rich" in document.text and "body." in document.text and "<p>" not in document.text


def _mail(content_type: bytes, body: bytes, transfer_encoding: bytes | None = None) -> bytes:
    head = b"From: a@example.com\r\nSubject: Damaged\r\nContent-Type: " + content_type + b"\r\n"
    if transfer_encoding:
        head += b"Content-Transfer-Encoding: " + transfer_encoding + b"\r\n"
    return head + b"\r\n" + body + b"\r\n"


@pytest.mark.parametrize(
    ("body", "defect"),
    [
        (b"SGVsbG8*gd29ybGQ=", "InvalidBase64CharactersDefect"),  # a character base64 has not
        (b"aGVsbG8gd29ybGQ", "InvalidBase64PaddingDefect"),  # cut short: the padding is missing
        (b"!!!!not*base64@@@", "InvalidBase64LengthDefect"),  # nothing of it decodes
    ],
)
def test_an_email_part_with_damaged_base64_fails_naming_the_defect(body: bytes, defect: str) -> None:
    with pytest.raises(
        DamagedEmailError, match=f"text/plain part has damaged base64 \\({defect}\\)"
    ) as error:
        load_bytes(_mail(b"text/plain; charset=utf-8", body, b"base64"), "sub/mail.eml")
    assert error.value.source == "sub/mail.eml"


def test_an_email_part_in_an_unknown_charset_fails_unless_it_is_utf8() -> None:
    latin = "Grüße aus München".encode("latin-1")
    with pytest.raises(DamagedEmailError, match="declares the unknown charset 'x-made-up'"):
        load_bytes(_mail(b'text/plain; charset="x-made-up"', latin), "mail.eml")
    utf8 = load_bytes(_mail(b'text/plain; charset="x-made-up"', "Grüße aus München".encode()), "mail.eml")
    assert utf8.text.endswith("\n\nGrüße aus München\r\n")


def test_an_email_part_that_is_not_its_declared_charset_fails() -> None:
    with pytest.raises(DamagedEmailError, match="part is not valid utf-8 text \\(byte offset 2\\)"):
        load_bytes(_mail(b"text/plain; charset=utf-8", "Grüße".encode("latin-1")), "mail.eml")


@pytest.mark.parametrize("charset", [b"utf-7", b"UTF-7", b"x-utf-7", b"unicode-1-1-utf-7", b"utf7"])
def test_a_utf7_email_part_is_decoded_in_every_spelling(charset: bytes) -> None:
    document = load_bytes(_mail(b"text/plain; charset=" + charset, b"+AGEAYgBj- and Gr+APw-+AN8-e"), "m.eml")
    assert document.text.endswith("\n\nabc and Grüße\r\n") and document.metadata == {"encoding": "utf-7"}
