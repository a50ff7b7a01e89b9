"""A corpus of hostile files through the real ingest flow: each fails alone with a clear error in the
status table, or is handled; the rest ingests, and the stores agree.

The two huge inputs are tested for what is meaningful on 2 cores: a 50 MB text would be ~14k chunks of
900 tokens (~25 min of MiniLM), so (1) loading and chunking it alone is shown to take bounded memory, in a
fresh process, with chunks that tile the text exactly; (2) in a run, the size limit
(UNICHUNK_MAX_DOCUMENT_BYTES, lowered here to 8 MB) refuses it clearly while a 5 MB single line without
spaces beside it is chunked and indexed (BM25 only: its ~4.5k chunks would take minutes to embed).
"""

from __future__ import annotations

import io
import json
import os
import random
import string
import subprocess
import sys
import textwrap

import pytest
from fault_checks import assert_converged

from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.ingest import ingest
from unichunk.index.chunk_cache import ChunkCache, ChunkKey
from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
)
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4


def _blank_pdf() -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(612, 792)  # a "scan" without a text layer
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _write_corpus(root) -> None:  # type: ignore[no-untyped-def]
    root.mkdir()
    files: dict[str, bytes] = {
        "empty.txt": b"",
        "blank.md": b"  \n\t\n   \r\n",
        "picture.txt": PNG,  # binary under a text extension
        "program.md": ELF,
        "latin1.txt": "Caf\xe9 in Lisbon".encode("latin-1"),
        "scan.pdf": _blank_pdf(),
        "utf16.txt": "\ufeffUTF-16 notes: Chen Wei visited Osaka.\n".encode("utf-16-le"),
        "nested.html": (
            "<html><body>"
            + "<div><span>" * 5000
            + "<p>Deep text about Nairobi.</p>"
            + "<p <b>unclosed <i>tags" * 200
            + "</td></tr></table>" * 5
        ).encode(),
        "fences.md": b"# Fences\n\nIntro text.\n\n```python\nprint('never closed')\n\n## Not a heading\n\nmore\n",
        "name\nwith newline.txt": b"A file name with a newline, about Toronto.\n",
        "na\u00efve \u65e5\u672c\u8a9e.md": "# \u65e5\u672c\u8a9e\n\nNon-ASCII name; Emil Novak in Berlin.\n".encode(),
        "ok.txt": b"An ordinary document: Alice Martin reviews the BM25 index.\n",
        "image.png": PNG,  # not a readable format: never listed
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    (root / "sub").mkdir()
    (root / "sub" / "deeper.txt").write_text("Inside a directory a symlink loops back to.\n")
    (root / "sub" / "loop").symlink_to(root, target_is_directory=True)  # sub/loop -> root: a cycle
    (root / "self-a.md").symlink_to(root / "self-b.md")
    (root / "self-b.md").symlink_to(root / "self-a.md")  # a symlink loop between files


FAILS = {
    "empty.txt": "no text (empty or whitespace only)",
    "blank.md": "no text (empty or whitespace only)",
    "picture.txt": "binary content: looks like a PNG image",
    "program.md": "binary content: looks like an ELF executable",
    "latin1.txt": "not valid utf-8 text",
    "scan.pdf": "PDF has no text layer",
}
HANDLED = {
    "utf16.txt": "Chen Wei visited Osaka",
    "nested.html": "Deep text about Nairobi.",
    "fences.md": "print('never closed')",
    "name\nwith newline.txt": "about Toronto",
    "na\u00efve \u65e5\u672c\u8a9e.md": "Emil Novak in Berlin",
    "ok.txt": "Alice Martin",
    "sub/deeper.txt": "symlink loops back",
}


def test_hostile_files_fail_alone_with_clear_errors_and_the_rest_ingests(fault_env, tmp_path):
    root = tmp_path / "corpus"
    _write_corpus(root)
    params = IngestParams(source=SourceParams(root=str(root), follow_symlinks=True))
    state = ingest(params, return_state=True)
    summary = state.result(raise_on_failure=False)

    assert state.is_failed() and f"{len(FAILS)} document(s) failed" in state.message
    assert summary.listed == len(FAILS) + len(HANDLED)  # the loop entered once, the .png not listed
    rows = {r.source_id: r for r in live_status(SinkSettings(data_dir=fault_env)).rows()}
    assert set(rows) == set(FAILS) | set(HANDLED)
    for name, message in FAILS.items():
        assert rows[name].state == "failed" and message in rows[name].error, (name, rows[name].error)
        assert rows[name].error.startswith("load failed:") and rows[name].chunk_ids == []
    store = live_status(SinkSettings(data_dir=fault_env))
    chunks = ChunkCache.of(SinkSettings(data_dir=fault_env))
    for name, phrase in HANDLED.items():
        row = rows[name]
        assert row.state == "processed" and row.chunk_ids, (name, row.error)
        document, stored = chunks.load(ChunkKey(row.document_id, row.content_hash, row.chunk_fingerprint))
        assert phrase in document.text and "\ufffd" not in document.text
        assert all(document.text[c.start_char : c.end_char] == c.content for c in stored)
    assert len(assert_converged(fault_env)) == len(store.expected_chunk_ids())

    # A second run does not read the unchanged bad files again: it reports them as known unreadable, not
    # as new failures, so it ends Completed; it touches nothing else, and their rows stay as they were.
    rows_before = {r.source_id: r.as_dict() for r in live_status(SinkSettings(data_dir=fault_env)).rows()}
    state = ingest(params, return_state=True)
    again = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert (again.processed, again.skipped, len(again.failed)) == (0, len(HANDLED), 0)
    assert {u.source_id: u.error for u in again.unreadable} == {n: rows[n].error for n in FAILS}
    assert f"{len(FAILS)} known unreadable" in again.line()
    assert {
        r.source_id: r.as_dict() for r in live_status(SinkSettings(data_dir=fault_env)).rows()
    } == rows_before
    assert len(assert_converged(fault_env)) == len(store.expected_chunk_ids())

    # A changed file is tried again: fixed, it is processed; still bad, it is a new failure of that run.
    (root / "latin1.txt").write_text("Café in Lisbon, now in UTF-8.\n", encoding="utf-8")
    (root / "empty.txt").write_bytes(b"\n\n")
    state = ingest(params, return_state=True)
    third = state.result(raise_on_failure=False)
    assert state.is_failed() and "1 document(s) failed" in state.message
    assert third.processed == 1 and [f.source_id for f in third.failed] == ["empty.txt"]
    assert len(third.unreadable) == len(FAILS) - 2
    assert (
        live_status(SinkSettings(data_dir=fault_env)).get(rows["latin1.txt"].document_id).state == "processed"
    )


_CHUNK_50MB = textwrap.dedent(
    """
    import json, sys
    from unichunk.chunking.loaders import load_document
    from unichunk.chunking.service import ChunkingService
    document = load_document(sys.argv[1])
    chunks = ChunkingService().chunk(document)
    text = document.text
    tiled = all(text[c.start_char : c.end_char] == c.content for c in chunks)
    # the sentence strategy (auto's choice for text) drops only the whitespace between chunks and at the end
    covered = not text[: chunks[0].start_char].strip() and not text[chunks[-1].end_char :].strip()
    # VmHWM, the peak of this process's own memory map: ru_maxrss would also count the parent's (pytest's)
    # peak, which the kernel carries into a child's figure when it forks and execs.
    status = open("/proc/self/status").read()
    peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
    print(json.dumps({"chars": len(text), "chunks": len(chunks), "tiled": tiled, "covered": covered,
                      "max_tokens": max(c.token_count for c in chunks), "peak": peak,
                      "strategy": chunks[0].metadata.get("strategy")}))
    """
)


@pytest.mark.timeout(300)
def test_a_50_mb_text_chunks_alone_in_bounded_memory(tmp_path, shared_eval_dir):
    base = (shared_eval_dir / "corpora" / "wikitexts.md").read_text(encoding="utf-8")
    big = tmp_path / "big.txt"
    with big.open("w", encoding="utf-8") as out:
        written, copy = 0, 0
        while written < 50_000_000:  # varied copies, so no cache or repetition flatters the chunker
            piece = f"[copy {copy}] {base}"
            written += out.write(piece)
            copy += 1
    # The shipped default chunker, whatever UNICHUNK_* settings an earlier test left in this process.
    env = {key: value for key, value in os.environ.items() if not key.startswith("UNICHUNK_")}
    result = subprocess.run(
        [sys.executable, "-c", _CHUNK_50MB, str(big)], capture_output=True, text=True, timeout=280, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["strategy"] == "sentence", report  # auto's choice for plain text
    assert report["chars"] >= 50_000_000 and report["tiled"] and report["covered"]
    assert report["chunks"] > 10_000 and report["max_tokens"] <= 900
    # Measured 1.1 GB (~22 bytes per character: text, token offsets, chunk copies, the interpreter):
    # linear in the input, so the 64 MB document limit keeps one document under ~1.5 GB.
    assert report["peak"] < 1.5 * 1024**3, report


@pytest.mark.timeout(600)
def test_size_limit_refuses_50_mb_while_a_5_mb_line_without_spaces_is_indexed(
    fault_env, tmp_path, monkeypatch
):
    monkeypatch.setenv("UNICHUNK_MAX_DOCUMENT_BYTES", str(8 * 1024 * 1024))
    root = tmp_path / "corpus"
    root.mkdir()
    with (root / "huge.txt").open("wb") as out:
        out.truncate(50 * 1024 * 1024)  # sparse: the size is what is refused, before any read
    rng = random.Random(7)
    line = "".join(rng.choices(string.ascii_letters + string.digits + "/+_-", k=5_000_000))
    (root / "line.txt").write_text(line)
    (root / "ok.txt").write_text("An ordinary document beside the huge ones.\n")
    params = IngestParams(source=SourceParams(root=str(root)), sinks=["keywords"])
    state = ingest(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_failed() and [f.source_id for f in summary.failed] == ["huge.txt"]
    assert "over the 8388608-byte limit" in summary.failed[0].error
    rows = {r.source_id: r for r in live_status(SinkSettings(data_dir=fault_env)).rows()}
    assert rows["line.txt"].state == rows["ok.txt"].state == "processed"
    assert rows["line.txt"].chunk_count > 1000  # token windows, exact offsets (checked by the chunker)
    keywords = get_sinks(["keywords"], reading_settings(SinkSettings()))["keywords"]
    expected = live_status(SinkSettings(data_dir=fault_env)).expected_chunk_ids()
    assert keywords.chunk_ids() == expected
    hits = keywords.search(line[1_000_000 : 1_000_000 + 0] or "ordinary document", k=3)
    assert hits and hits[0].chunk_id in set(rows["ok.txt"].chunk_ids)
