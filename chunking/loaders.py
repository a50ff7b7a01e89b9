"""Turn files (or bytes from a webhook) into `Document`s, or fail with a typed, explanatory error.

Text is kept exactly as decoded (no newline normalisation; only a leading BOM is dropped), because chunk
offsets refer to `Document.text`. Parsers for PDF and HTML are imported only when such a file is loaded:
they cost more to import than the rest of `unichunk.chunking` (benchmarks/README.md, "Why some imports are
lazy").

Failure isolation: whatever goes wrong while reading one document (a parser bug, an input a library never
expected, an e-mail naming a charset Python does not know) leaves here as a `DocumentLoadError` naming the
file and the cause, never as another exception type, so the pipeline fails that document alone.
Plain text must be UTF-8 (or UTF-8/16/32 with a BOM): guessing the encoding of a file that declares none
would silently mis-decode it. An e-mail part is decoded exactly or fails the document (`DamagedEmailError`:
damaged base64, an unknown charset, bytes that are not its charset's text); `_part_text` lists the fallbacks
that decode correctly (UTF-8, UTF-7's spellings) and the one that detects a charset (a part that declares
none).
"""

from __future__ import annotations

import codecs
import io
import os
import re
from email import errors, policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path, PurePosixPath
from typing import Any

from charset_normalizer import from_bytes

from unichunk.chunking.config import DEFAULT_MAX_DOCUMENT_BYTES
from unichunk.chunking.errors import (
    DamagedEmailError,
    DocumentLoadError,
    DocumentTooLarge,
    EmptyDocumentError,
    UndecodableTextError,
    UnsupportedFormatError,
)
from unichunk.chunking.models import Block, Document
from unichunk.chunking.names import storable_name

_TEXT_TYPES = {".txt": "text/plain", ".text": "text/plain", ".log": "text/plain", ".csv": "text/csv"}
_MARKDOWN = {".md", ".markdown"}
_HTML = {".html", ".htm"}

# (BOM, codec): UTF-32 first, its little-endian BOM starts with UTF-16's.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\x7fELF", "an ELF executable"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"PK\x05\x06", "a ZIP archive"),
    (b"%PDF-", "a PDF file"),
)
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_SETEXT_HEADING = re.compile(r"^ {0,3}(\S[^\n]*?)[ \t]*\r?\n {0,3}(?:=+|-+)[ \t]*$", re.MULTILINE)
_EMAIL_HEADERS = ("From", "To", "Cc", "Date", "Subject")
_UTF7 = re.compile(r"(x-|unicode-1-1-)?utf-?7")  # the spellings of UTF-7 that mail software writes
_BASE64_DEFECTS = (
    errors.InvalidBase64CharactersDefect,
    errors.InvalidBase64PaddingDefect,
    errors.InvalidBase64LengthDefect,
)
_SURROGATES = re.compile("[\ud800-\udfff]")  # lone surrogates: a str no store can encode as UTF-8


def load_document(
    path: str | os.PathLike[str],
    *,
    source_system: str = "fs",
    source_id: str | None = None,
    root: str | os.PathLike[str] | None = None,
    max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
) -> Document:
    """Read and decode one file. source_id defaults to the path relative to `root` (POSIX), else absolute.

    Raises `DocumentLoadError` (or a subclass) for anything that goes wrong, expected or not."""
    try:
        return _load_document(path, source_system, source_id, root, max_bytes)
    except DocumentLoadError:
        raise
    except Exception as exc:  # e.g. a symlink loop while resolving the path: this file fails, alone
        raise _unexpected(str(path), exc) from exc


def _load_document(
    path: str | os.PathLike[str],
    source_system: str,
    source_id: str | None,
    root: str | os.PathLike[str] | None,
    max_bytes: int,
) -> Document:
    file = Path(path)
    limit = max_bytes
    given_id = source_id is not None
    if source_id is None:
        absolute = file.resolve()
        try:
            source_id = absolute.relative_to(Path(root).resolve()).as_posix() if root else absolute.as_posix()
        except ValueError as exc:
            raise DocumentLoadError(str(path), f"file is not under the root directory {root}") from exc
        source_id = storable_name(source_id)
    # Errors name the file by its path in the source (`sub/a.txt`), or by its name when none is known.
    label = source_id if root or given_id else storable_name(file.name)
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise DocumentLoadError(label, f"cannot read file: {exc.strerror or exc}") from exc
    if size > limit:
        raise DocumentTooLarge(
            label, f"file is {size} bytes, over the {limit}-byte limit", size=size, limit=limit
        )
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise DocumentLoadError(label, f"cannot read file: {exc.strerror or exc}") from exc
    return load_bytes(
        data,
        file.name,
        source_system=source_system,
        source_id=source_id,
        path=storable_name(str(path)),
        max_bytes=limit,
        label=label,
    )


def load_bytes(
    data: bytes,
    name: str,
    *,
    source_system: str = "fs",
    source_id: str | None = None,
    path: str | None = None,
    max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    label: str | None = None,
) -> Document:
    """Build a `Document` from raw bytes; `name` (a file name) selects the format by its extension, and
    `label` (default: `name`) names the document in errors: a file's path relative to its source root, so
    `sub/a.txt` and `other/a.txt` fail with different messages.

    Raises `DocumentLoadError` (or a subclass) for anything that goes wrong, expected or not."""
    limit = max_bytes
    shown = label or name
    if len(data) > limit:
        raise DocumentTooLarge(
            shown, f"document is {len(data)} bytes, over the {limit}-byte limit", size=len(data), limit=limit
        )
    try:
        return _load_bytes(data, name, shown, source_system, source_id, path)
    except DocumentLoadError:
        raise
    except Exception as exc:  # a parser bug or an input it never expected: this document fails, alone
        raise _unexpected(shown, exc) from exc


def _unexpected(name: str, exc: Exception) -> DocumentLoadError:
    return DocumentLoadError(name, f"cannot load it: {type(exc).__name__}: {exc}")


def _load_bytes(
    data: bytes, file_name: str, name: str, source_system: str, source_id: str | None, path: str | None
) -> Document:
    """`file_name` selects the format and gives the default title; `name` names the document in errors."""
    suffix = PurePosixPath(file_name.replace("\\", "/")).suffix.lower()
    stem = storable_name(PurePosixPath(file_name.replace("\\", "/")).stem or file_name)
    if suffix == ".pdf":
        text, title, mime, extra = _load_pdf(data, name)
        blocks: tuple[Block, ...] = ()
    elif suffix == ".eml":
        text, title, mime, extra = _load_email(data, name)
        blocks = ()
    else:
        text, encoding = decode_text(data, name)
        extra = {"encoding": encoding}
        if suffix in _HTML:
            text, blocks, title = _extract_html(text, name, main_content=True)
            mime = "text/html"
        else:
            blocks = ()
            mime = "text/markdown" if suffix in _MARKDOWN else _TEXT_TYPES.get(suffix, "text/plain")
            title = _markdown_title(text) if suffix in _MARKDOWN else None
    if not text.strip():
        raise EmptyDocumentError(name, "document has no text (empty or whitespace only)")
    return Document(
        text=text,
        source_system=source_system,
        source_id=source_id or storable_name(file_name),
        title=title or stem,
        path=path,
        mime_type=mime,
        metadata=extra,
        blocks=blocks,
    )


def decode_text(data: bytes, name: str) -> tuple[str, str]:
    """(text, encoding): BOM-detected UTF-8/16/32, else strict UTF-8; binary data is refused."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode(data[len(bom) :], encoding, name, len(bom)), encoding
    _refuse_binary(data, name)
    text = _decode(data, "utf-8", name, 0)
    return text, "utf-8"


def _decode(data: bytes, encoding: str, name: str, offset: int) -> str:
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UndecodableTextError(
            name, f"not valid {encoding} text: {exc.reason} at byte offset {exc.start + offset}"
        ) from exc
    return text[1:] if text.startswith("\ufeff") else text


def _refuse_binary(data: bytes, name: str, allow_pdf: bool = False) -> None:
    for magic, kind in _MAGIC:
        if data.startswith(magic) and not (allow_pdf and magic == b"%PDF-"):
            raise UnsupportedFormatError(name, f"binary content: looks like {kind}")
    if b"\x00" in data[:8192]:
        raise UnsupportedFormatError(name, "binary content: NUL bytes in the first 8 KB")


def _markdown_title(text: str) -> str | None:
    head = text[:20000]
    matches = [m for m in (_ATX_HEADING.search(head), _SETEXT_HEADING.search(head)) if m]
    return min(matches, key=lambda m: m.start()).group(1).strip() if matches else None


def _extract_html(
    markup: str, name: str, *, main_content: bool = False
) -> tuple[str, tuple[Block, ...], str | None]:
    """Text, blocks and title of HTML. A web page (`main_content`) keeps its main content only (see
    `unichunk.chunking.html_main`: navigation, site header, footer, sidebars and cookie banners are no chunks);
    an e-mail's HTML body is kept whole, as it has no page chrome and little text to spare."""
    from unichunk.chunking.html_extract import extract_html  # bs4/lxml/trafilatura only when HTML is loaded

    try:
        extracted = extract_html(markup, main_content=main_content)
    except Exception as exc:
        raise DocumentLoadError(name, f"cannot extract text from HTML: {exc}") from exc
    return extracted.text, tuple(extracted.blocks), extracted.title


def _load_pdf(data: bytes, name: str) -> tuple[str, str | None, str, dict[str, Any]]:
    from pypdf import PdfReader  # imported only for PDFs (see the module docstring)
    from pypdf.errors import PyPdfError

    if b"%PDF-" not in data[:1024]:
        _refuse_binary(data, name)
        raise UnsupportedFormatError(name, "not a PDF file (no %PDF- header)")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise DocumentLoadError(name, "PDF is encrypted")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata else None
    except DocumentLoadError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise DocumentLoadError(name, f"cannot read PDF: {exc}") from exc
    text = _scrub("\n\n".join(p.strip("\n") for p in pages if p.strip()))
    if not text.strip():
        raise EmptyDocumentError(name, f"PDF has no text layer ({len(pages)} pages, no extractable text)")
    return text, _scrub(str(title)) if title else None, "application/pdf", {"pages": len(pages)}


def _scrub(text: str) -> str:
    """Replace lone surrogates (a damaged PDF's text layer, raw bytes in e-mail headers) by U+FFFD, one
    character for one, so the text can be stored and sent anywhere."""
    return _SURROGATES.sub("\ufffd", text)


def _load_email(data: bytes, name: str) -> tuple[str, str | None, str, dict[str, Any]]:
    _refuse_binary(data, name)
    message = BytesParser(policy=policy.default).parsebytes(data)
    assert isinstance(message, EmailMessage)
    headers = {h: _header(message, h) for h in _EMAIL_HEADERS}
    header_lines = [f"{h}: {value}" for h, value in headers.items() if value is not None]
    body, extra = "", {}
    part = message.get_body(preferencelist=("plain",))
    if part is not None:
        body, extra = _part_text(part, name)
    else:
        part = message.get_body(preferencelist=("html",))
        if part is not None:
            markup, extra = _part_text(part, name)
            body = _extract_html(markup, name)[0]
    text = "\n".join(header_lines) + "\n\n" + body if header_lines else body
    return _scrub(text), headers["Subject"] or None, "message/rfc822", extra


def _header(message: EmailMessage, name: str) -> str | None:
    """One header as text; a header the parser chokes on is kept as it was written (unfolded)."""
    try:
        value = message[name]
        return None if value is None else _scrub(str(value))
    except Exception:  # the structured header parser has bugs on some malformed values
        raw = next((v for k, v in message.raw_items() if k.lower() == name.lower()), None)
        return None if raw is None else _scrub(re.sub(r"\r?\n[ \t]", " ", str(raw)))


def _part_text(part: EmailMessage, name: str) -> tuple[str, dict[str, str]]:
    """Decode a text part exactly, or fail the document with `DamagedEmailError` naming why.

    Stored garbage is worse than a failure that says what is wrong, so a part fails when its base64 is
    damaged (the parser's `InvalidBase64*Defect`: it would decode to noise), when it names a charset Python
    does not know, or when its bytes are not text in the charset it names. Two fallbacks decode correctly
    and are kept: a part whose bytes are valid UTF-8 is read as UTF-8 when its declared charset is unknown
    or wrong (the commonest mislabel; a non-ASCII byte string that is valid UTF-8 is almost never meant as
    anything else), and every spelling of UTF-7 (`x-utf-7`, `unicode-1-1-utf-7`) is read with Python's
    `utf-7` codec. A part that declares no charset at all (RFC 2045's default, US-ASCII, is often wrong
    in old mail) is decoded with charset_normalizer's detected charset when it is neither ASCII nor UTF-8.
    """
    payload = part.get_payload(decode=True)  # records a base64 defect on the part
    damaged = [d for d in part.defects if isinstance(d, _BASE64_DEFECTS)]
    if damaged:
        raise DamagedEmailError(
            name, f"e-mail {part.get_content_type()} part has damaged base64 ({type(damaged[0]).__name__})"
        )
    data = payload if isinstance(payload, bytes) else b""
    declared = part.get_content_charset()
    codec = _text_codec(declared or "us-ascii")
    if codec is not None:
        try:
            return data.decode(codec), {"encoding": codec}
        except Exception:  # UnicodeDecodeError, or an odd codec's own error (idna, punycode...)
            pass
    try:
        return data.decode("utf-8"), {"encoding": "utf-8", "declared_charset": declared or "us-ascii"}
    except UnicodeDecodeError as exc:
        bad = exc.start
    if declared is None:
        guess = from_bytes(data).best()
        if guess is not None and guess.encoding:
            return str(guess), {"encoding": guess.encoding, "declared_charset": "none"}
        raise DamagedEmailError(
            name, f"e-mail {part.get_content_type()} part declares no charset and none could be detected"
        )
    if codec is None:
        raise DamagedEmailError(
            name,
            f"e-mail {part.get_content_type()} part declares the unknown charset {declared!r}, and is "
            f"not UTF-8 either (byte offset {bad})",
        )
    also = "" if codec == "utf-8" else ", nor UTF-8"
    raise DamagedEmailError(
        name, f"e-mail {part.get_content_type()} part is not valid {declared} text{also} (byte offset {bad})"
    )


def _text_codec(charset: str) -> str | None:
    """Python's codec for a declared charset, or None when unknown or not a text encoding (base64...)."""
    if _UTF7.fullmatch(charset.lower()):
        return "utf-7"
    try:
        name = codecs.lookup(charset).name
        "".encode(name)  # str.encode refuses the codecs that are not text encodings (base64, rot13...)
    except (LookupError, ValueError, TypeError):
        return None
    return name
