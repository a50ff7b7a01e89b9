"""Bytes that look almost like a .txt, .md, .html, .pdf or .eml file: valid seed files built here, and
hypothesis strategies that damage them (bit flips, truncation, inserted, deleted and duplicated runs).

Shared by the loader property tests (`tests/chunking/test_chunking_loader_properties.py`) and the
pipeline-level one (`tests/faults/test_faults_bad_files.py`): a mutated seed gets past a parser's first
check and hits it where it is fragile, which random bytes alone rarely do.
"""

from __future__ import annotations

import base64
import io
import zlib

from hypothesis import strategies as st

SUFFIXES = (".txt", ".md", ".html", ".pdf", ".eml")


def _pdf(stream: bytes, *, compressed: bool = False, title: bytes = b"Seed") -> bytes:
    """A hand-written one-page PDF with a Helvetica text object (optionally a FlateDecode stream)."""
    if compressed:
        stream = zlib.compress(stream)
        header = b"<< /Length %d /Filter /FlateDecode >>" % len(stream)
    else:
        header = b"<< /Length %d >>" % len(stream)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        header + b"\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Title (" + title + b") >>",
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
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\nstartxref\n%d\n%%%%EOF\n"
        % (len(objects) + 1, xref)
    )
    return out.getvalue()


def _pdf_seeds() -> list[bytes]:
    """The hand-written PDF, its compressed twin, and pypdf's rewrite of it (xref, object layout differ)."""
    from pypdf import PdfReader, PdfWriter

    text = b"BT /F1 12 Tf 72 720 Td (Quarterly report: Alice Martin in Lisbon) Tj 0 -14 Td (Page one) Tj ET"
    plain, packed = _pdf(text), _pdf(text, compressed=True)
    writer = PdfWriter()
    writer.add_page(PdfReader(io.BytesIO(packed)).pages[0])
    writer.add_metadata({"/Title": "Rewritten"})
    out = io.BytesIO()
    writer.write(out)
    return [plain, packed, out.getvalue()]


EMAIL_MULTIPART = (
    b"From: Alice <alice@example.com>\r\nTo: Bob <bob@example.com>\r\nCc: =?utf-8?q?Ren=C3=A9e?= <r@example.com>\r\n"
    b"Date: Sat, 21 Nov 2026 10:00:00 +0000\r\nSubject: =?iso-8859-1?q?Caf=E9_report?=\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: multipart/alternative; boundary=XX\r\n\r\n"
    b"--XX\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
    b"Hello Bob,=0D=0Athe numbers are in: Gr=C3=BC=C3=9Fe.\r\n"
    b"--XX\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
    + base64.encodebytes(b"<p>Hello Bob, <b>HTML</b> body.</p>")
    + b"--XX--\r\n"
)
EMAIL_UNKNOWN_CHARSET = (
    b"From: a@example.com\r\nSubject: Made-up charset\r\n"
    b'Content-Type: text/plain; charset="x-made-up-charset"\r\n\r\n'
    + "Grüße aus München: die Zahlen für das dritte Quartal.\r\n".encode()
)
EMAIL_HTML_ONLY = (
    b"From: a@example.com\r\nSubject: Only HTML\r\nContent-Type: text/html; charset=windows-1252\r\n"
    b"Content-Transfer-Encoding: 8bit\r\n\r\n<html><body><p>Rich \x93text\x94 body.</p></body></html>\r\n"
)

SEEDS: dict[str, list[bytes]] = {
    ".txt": [
        "Plain notes: Chen Wei visited Osaka.\r\nSecond line — ünïcödé 漢字 😀\n".encode(),
        b"\xef\xbb\xbfUTF-8 with a BOM.\n",
        "\ufeffUTF-16 notes about Nairobi.\n".encode("utf-16-le"),
    ],
    ".md": [
        b"# Title\n\nIntro paragraph about *Qdrant*.\n\n## Part\n\n- item one\n- item two\n\n```py\nx = 1\n```\n",
        b"Setext title\n============\n\nBody text.\n",
    ],
    ".html": [
        b"<html><head><title>Page</title></head><body><h1>Head</h1><p>First <b>para</b>.</p>"
        b"<ul><li>one</li><li>two</li></ul><table><tr><td>cell</td></tr></table>"
        b"<script>ignored()</script></body></html>",
        "<p>Fragment with ünïcödé &amp; entities &#x1F600;</p>".encode(),
        b'<html><head><title>Chrome</title></head><body><div class="cookie-banner">We use cookies. '
        b'<button>Accept</button></div><header><a href="/">Site</a></header><nav><ul><li><a href="/">Home'
        b'</a></li><li><a href="/about">About</a></li></ul></nav><main><article><h1>Rivers</h1><p>Rivers '
        b"carry water from the hills to the sea, and towns grow on their banks.</p><h2>Deltas</h2><p>A delta "
        b"forms where a river drops its sediment at the coast.</p></article></main><aside><h3>Related</h3>"
        b'<ul><li><a href="/l">Lakes</a></li></ul></aside><footer><p>(c) 2024 Site</p></footer></body></html>',
    ],
    ".pdf": _pdf_seeds(),
    ".eml": [EMAIL_MULTIPART, EMAIL_UNKNOWN_CHARSET, EMAIL_HTML_ONLY],
}


@st.composite
def mutated(draw: st.DrawFn, suffix: str) -> bytes:
    """A seed of the format with a few random edits, each somewhere in the file."""
    data = bytearray(draw(st.sampled_from(SEEDS[suffix])))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "duplicate", "byte"]))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=40))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        elif kind == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 200))]
    return bytes(data)


def inputs(suffix: str) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=2048), mutated(suffix), st.sampled_from(SEEDS[suffix]))
