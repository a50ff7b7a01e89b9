"""Any file name is a file name, and a damaged e-mail fails alone: the real `unichunk` CLI on real files.

A file named with a Latin-1 byte (`caf\\xe9.txt` as bytes on disk) made the first ingest of its folder exit 3
with a PydanticSerializationError, store nothing, and every later run fail the same way. Now it is stored
under the source_id `caf\\xe9.txt` (a backslash escape: docs/usage.md, "File names"), the run exits 0, the
nightly re-index of the folder completes, and deleting the file deletes the document. A Hypothesis property
drives the CLI over arbitrary byte names (few examples: each runs real ingests;
`tests/chunking/test_chunking_names.py` draws many names through the listing and the loader alone).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fault_checks import assert_converged, make_corpus
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.names import storable_name
from unichunk.chunking.sources import default_source_name
from unichunk.engine.params import IngestParams, SourceParams
from unichunk.flows.reindex import reindex
from unichunk.index.generations import live_status
from unichunk.sinks.config import SinkSettings

UNICHUNK = str(Path(sys.executable).parent / "unichunk")
NAME_BYTES = st.binary(min_size=1, max_size=30).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")
)
BAD_BASE64_MAIL = (
    b"From: a@example.com\r\nSubject: Damaged\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Transfer-Encoding: base64\r\n\r\nSGVsbG8*gd29ybGQ=\r\n"
)


def _unichunk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UNICHUNK, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )


def _shown(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def raw(directory: Path, *names: bytes) -> Path:
    """The path of `names` (bytes, as POSIX has them) under `directory`."""
    return Path(os.fsdecode(os.path.join(os.fsencode(directory), *names)))


def _rows(data_dir: Path, root: Path) -> dict[str, str]:
    """source_id -> state of the documents of the folder `root`'s source."""
    source = default_source_name(root)
    return {
        r.source_id: r.state
        for r in live_status(SinkSettings(data_dir=data_dir)).rows()
        if r.source_system == source
    }


def test_a_latin1_file_name_is_stored_and_the_nightly_reindex_passes(fault_env: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 2)
    raw(corpus, b"caf\xe9.txt").write_bytes(b"Dara Okafor opened a cafe in Lisbon.\n")
    raw(corpus, b"new\nline.md").write_bytes(b"# Newline\n\nEmil Novak in Osaka.\n")

    first = _unichunk("ingest", str(corpus))
    assert first.returncode == 0, _shown(first)
    assert first.stdout.startswith("ingest: 4 listed, 4 processed"), _shown(first)
    rows = _rows(fault_env, corpus)
    assert rows == dict.fromkeys(
        ["caf\\xe9.txt", "doc_0000.txt", "doc_0001.txt", "new\nline.md"], "processed"
    )
    row = live_status(SinkSettings(data_dir=fault_env)).get(
        derive_document_id(source_system=default_source_name(corpus), source_id="caf\\xe9.txt")
    )
    assert row is not None and row.path == str(corpus / "caf\\xe9.txt")

    status = _unichunk("status")  # piped: tab-separated, one line per document, the newline escaped
    assert status.returncode == 0, _shown(status)
    lines = status.stdout.splitlines()
    assert any("\tcaf\\xe9.txt\tprocessed\t" in line for line in lines), _shown(status)
    assert any("\tnew\\nline.md\tprocessed\t" in line for line in lines), _shown(status)

    # The nightly re-index of the folder, and `unichunk ingest` of every source, pass: nothing to do.
    state = reindex(IngestParams(source=SourceParams(root=str(corpus))), return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert (summary.processed, summary.skipped, summary.failed) == (0, 4, [])
    again = _unichunk("ingest", "--json")
    assert again.returncode == 0, _shown(again)
    assert json.loads(again.stdout)["skipped"] == 4

    # The file is re-found by each scan, so its edit updates it and its deletion deletes it.
    raw(corpus, b"caf\xe9.txt").write_bytes(b"Dara Okafor sold the cafe in Lisbon.\n")
    edited = _unichunk("ingest", str(corpus))
    assert edited.returncode == 0 and "1 processed" in edited.stdout, _shown(edited)
    raw(corpus, b"caf\xe9.txt").unlink()
    deleted = _unichunk("ingest", str(corpus))
    assert deleted.returncode == 0 and "1 deleted" in deleted.stdout, _shown(deleted)
    assert "caf\\xe9.txt" not in _rows(fault_env, corpus)
    verify = _unichunk("verify")
    assert verify.returncode == 0, _shown(verify)
    assert_converged(fault_env)


def test_failures_name_the_path_in_the_source_and_a_damaged_email_fails_alone(
    fault_env: Path, tmp_path: Path
) -> None:
    """A load error of a file in a subfolder names the folder too; Rich markup and an undecodable byte in
    its name print as they are stored; bad base64 fails its e-mail with the reason, the rest is stored."""
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 2)
    (corpus / "sub").mkdir()
    raw(corpus, b"sub", b"[bold]caf\xe9[.txt").write_bytes(b"not \xff UTF-8\n")
    (corpus / "sub" / "damaged.eml").write_bytes(BAD_BASE64_MAIL)

    ingested = _unichunk("ingest", str(corpus))
    assert ingested.returncode == 1, _shown(ingested)  # documents failed
    lines = ingested.stdout.splitlines()
    assert lines[0].startswith("ingest: 4 listed, 2 processed") and "2 failed" in lines[0], _shown(ingested)
    assert sorted(lines[1:]) == [
        "  failed  sub/[bold]caf\\xe9[.txt: load failed: sub/[bold]caf\\xe9[.txt: not valid utf-8 text: "
        "invalid start byte at byte offset 4",
        "  failed  sub/damaged.eml: load failed: sub/damaged.eml: e-mail text/plain part has damaged base64 "
        "(InvalidBase64CharactersDefect)",
    ], _shown(ingested)
    assert _rows(fault_env, corpus) == {
        "doc_0000.txt": "processed",
        "doc_0001.txt": "processed",
        "sub/[bold]caf\\xe9[.txt": "failed",
        "sub/damaged.eml": "failed",
    }
    assert_converged(fault_env)


_EXAMPLES = iter(range(1_000_000))


@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(names=st.lists(NAME_BYTES, min_size=1, max_size=3, unique=True))
@example(names=[b"caf\xe9", b"caf\\xe9", b"[bold]fail[", b"new\nline", b"\x1b[31m\xff\xfe"])
def test_any_byte_name_ingests_through_the_cli(fault_env: Path, tmp_path: Path, names: list[bytes]) -> None:
    """The run completes (exit 0), the good file and every byte-named file get a processed row, `--json`
    parses, and `verify` finds the stores aligned. Each example is a new folder (a new source) in the same
    data dir, so the checks also hold after the previous examples' runs."""
    root = tmp_path / f"names{next(_EXAMPLES)}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nAlice Martin met Bruno Costa in Berlin.\n")
    for name in names:
        raw(root, name + b".txt").write_bytes(b"Chen Wei filed a report in Nairobi.\n")

    # One document per name, but for a valid name spelling an undecodable one's escape (docs/usage.md).
    expected = {"good.md"} | {storable_name(os.fsdecode(name + b".txt")) for name in names}

    ingested = _unichunk("ingest", str(root), "--json")
    assert ingested.returncode == 0, _shown(ingested)
    summary = json.loads(ingested.stdout)
    assert summary["failed"] == [] and summary["processed"] == summary["listed"] == len(expected)
    assert _rows(fault_env, root) == dict.fromkeys(expected, "processed")
    verify = _unichunk("verify", "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], _shown(verify)
    # the byte-named files are copies of one text: named by their files, as stored, to be looked at
    copies = {str(root / name) for name in expected - {"good.md"}}
    if len(copies) > 1:
        named = json.loads(verify.stdout)["same_content"].values()
        assert any(copies <= set(files) for files in named), _shown(verify)
