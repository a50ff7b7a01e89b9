"""A full disk is an error, never a crash: with the data dir on a small file system that fills, `ingest`,
`verify` and `search` exit 3 with one line naming the data dir, no signal kills them, every store keeps
the previous version of what was refused and no status row stays `processing`; once space is freed, the
next run converges.

The file system is real: a tmpfs (which also fills the holes of a memory map that is only read) and a
loop-mounted ext4 image, each mounted by the test and unmounted when it ends; skipped where the test cannot
mount (not root, no `mount`). The CLI runs as a user runs it, in a subprocess, so a SIGBUS would show as a
negative return code. The graph is the session's FalkorDB server: off this disk, as a server store is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_checks import assert_converged, make_corpus

from unichunk.index.generations import live_status
from unichunk.index.status import StatusStore, failed_fields
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import dispose_engines
from unichunk.sinks.disk_space import DiskFull, free_bytes
from unichunk.sinks.pool import close_all_sinks

UNICHUNK = str(Path(sys.executable).parent / "unichunk")
MIB = 1024 * 1024
MARGIN = 64 * MIB  # the default of UNICHUNK_MIN_FREE_BYTES, which the test does not change
DOCUMENTS = 8
REVISED = "zeppelin"  # a word only the changed documents hold


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError as exc:
        pytest.skip(f"cannot mount a file system here: {exc}")


def _mount(kind: str, where: Path, scratch: Path, size: str = "160m") -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    where.mkdir(parents=True)
    if kind == "tmpfs":
        done = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    else:
        image = scratch / "disk.img"
        _run("truncate", "-s", "200M", str(image))
        made = _run("mkfs.ext4", "-q", "-F", str(image))
        if made.returncode != 0:
            pytest.skip(f"cannot make an ext4 image: {made.stderr.strip()}")
        done = _run("mount", "-o", "loop", str(image), str(where))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {kind} here: {done.stderr.strip()}")


@pytest.fixture(params=["tmpfs", "ext4"])
def small_disk(request, tmp_path: Path, fault_env: Path, monkeypatch) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """A data dir on a small file system of its own (tmpfs or a loop-mounted ext4 image), unmounted at the
    end whatever happened."""
    where = tmp_path / "disk"
    _mount(request.param, where, tmp_path)
    data_dir = where / "data"
    monkeypatch.setenv("UNICHUNK_DATA_DIR", str(data_dir))
    try:
        yield data_dir
    finally:
        close_all_sinks()
        _unmount(where)


def _unmount(where: Path) -> None:
    if _run("umount", str(where)).returncode != 0:
        _run("umount", "-l", str(where))  # a process still holding a file: detach now, freed when it ends


def _unichunk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UNICHUNK, *args],
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _shown(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def _refused(result: subprocess.CompletedProcess[str], data_dir: Path) -> str:
    """Exit 3 (no signal), and one line on stderr: the disk-full error naming the data dir."""
    assert result.returncode == 3, _shown(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, _shown(result)
    assert lines[0].startswith("error: disk full: the data dir ") and str(data_dir) in lines[0], _shown(
        result
    )
    assert "free" in lines[0] and "needs" in lines[0], _shown(result)

    return lines[0]


def _fill(data_dir: Path, filler: Path, leave: int) -> None:
    """Take the disk's free space down to about `leave` bytes with one allocated file."""
    take = free_bytes(data_dir) - leave
    assert take > 0, (free_bytes(data_dir), leave)
    with filler.open("wb") as out:
        os.posix_fallocate(out.fileno(), 0, take)
    assert free_bytes(data_dir) <= leave + MIB


def _revise(corpus: Path) -> None:
    """Longer versions (about 10 KB each), so a batch of 4 needs far more than the few KiB the run's own
    records take before it opens the stores (status rows, the run's process record, the caches)."""
    for n in range(DOCUMENTS):
        notes = " ".join(f"Note {i} of report {n} lists item {i * 7} for review." for i in range(250))
        (corpus / f"doc_{n:04d}.txt").write_text(
            f"Report {n} revised: the {REVISED} left Osaka at dawn. {notes}\n"
        )


def _converged(data_dir: Path) -> None:
    """Every store holds exactly what the status table expects; the stores are closed again after, as the
    embedded vector store admits one process at a time and the CLI runs next."""
    try:
        assert_converged(data_dir)
    finally:
        close_all_sinks()


def _states(data_dir: Path) -> dict[str, str]:
    return {row.document_id: row.state for row in live_status(SinkSettings(data_dir=data_dir)).rows()}


def test_a_full_disk_refuses_the_batch_and_the_next_run_converges(small_disk: Path, tmp_path: Path) -> None:
    data_dir = small_disk
    corpus = tmp_path / "corpus"
    make_corpus(corpus, DOCUMENTS)
    first = _unichunk("ingest", str(corpus), "--batch-size", "4")
    assert first.returncode == 0, _shown(first)
    opened = _unichunk("verify")  # loads the vector store: on tmpfs its memory maps take their full size now
    assert opened.returncode == 0, _shown(opened)
    before = _states(data_dir)
    chunk_ids = {
        row.document_id: row.chunk_ids for row in live_status(SinkSettings(data_dir=data_dir)).rows()
    }

    # Room to open every store and write the run's records, less than a batch of 4 revised documents needs
    # (over 500 KiB by the estimate).
    filler = data_dir.parent / "filler"
    _fill(data_dir, filler, MARGIN + 256 * 1024)
    _revise(corpus)
    refused = _unichunk("ingest", str(corpus), "--batch-size", "4")
    line = _refused(refused, data_dir)
    assert "writing batch 1 (4 documents)" in line, line

    # Nothing half written: every store holds the previous versions, no row is left `processing`, and the
    # chunk IDs the status table expects are the previous ones.
    states = _states(data_dir)
    assert "processing" not in states.values(), states
    assert set(states) == set(before)
    assert sorted(states.values()).count("pending") in (4, 8), states  # the refused batch (and the next one)
    rows = {row.document_id: row.chunk_ids for row in live_status(SinkSettings(data_dir=data_dir)).rows()}
    assert rows == chunk_ids
    filler.unlink()
    _converged(data_dir)
    old = _unichunk("search", "review index shard 3 of the Qdrant cluster")
    assert old.returncode == 0 and "shard 3 of the Qdrant cluster" in old.stdout, _shown(old)
    assert REVISED not in old.stdout, _shown(old)
    aligned = _unichunk("verify")
    assert aligned.returncode == 0, _shown(aligned)

    # Space freed: the next run writes every new version.
    again = _unichunk("ingest", str(corpus), "--batch-size", "4")
    assert again.returncode == 0, _shown(again)
    assert set(_states(data_dir).values()) == {"processed"}
    _converged(data_dir)
    new = _unichunk("search", f"the {REVISED} left Osaka")
    assert new.returncode == 0 and REVISED in new.stdout, _shown(new)
    assert _unichunk("verify").returncode == 0


def test_verify_and_search_on_a_full_disk_say_so(small_disk: Path, tmp_path: Path) -> None:
    data_dir = small_disk
    corpus = tmp_path / "corpus"
    make_corpus(corpus, 4)
    assert _unichunk("ingest", str(corpus)).returncode == 0
    filler = data_dir.parent / "filler"
    _fill(data_dir, filler, MIB)  # less than the kept margin: no store is opened
    for command in (("verify",), ("search", "Alice Martin in Berlin")):
        _refused(_unichunk(*command), data_dir)
    status = _unichunk("status")  # reads the records only: it still answers
    assert status.returncode == 0, _shown(status)
    changed = corpus / "doc_0001.txt"
    changed.write_text(f"Report 1 revised: the {REVISED} left Lisbon.\n")
    _refused(_unichunk("ingest", str(corpus)), data_dir)
    assert "processing" not in _states(data_dir).values()

    filler.unlink()
    assert _unichunk("verify").returncode == 0
    assert _unichunk("ingest", str(corpus)).returncode == 0
    found = _unichunk("search", f"the {REVISED} left Lisbon")
    assert found.returncode == 0 and REVISED in found.stdout, _shown(found)
    _converged(data_dir)
    assert shutil.disk_usage(data_dir).free > MARGIN


def test_sqlite_full_names_the_records_file(tmp_path: Path) -> None:
    """SQLite's own "database or disk is full" (a records file filling the disk first) is the same one-line
    error, naming the file, and what was committed before stays readable."""
    where = tmp_path / "tiny"
    _mount("tmpfs", where, tmp_path, size="2m")
    try:
        settings = SinkSettings(data_dir=where / "data")
        status = StatusStore.of(settings)
        with pytest.raises(DiskFull) as raised:
            for n in range(100):  # 100 KiB a row: the 2 MiB disk is full well before the end
                status.upsert(f"doc-{n}", **failed_fields("x" * 100_000, source_id=f"doc-{n}.txt"))
        message = str(raised.value)
        assert "\n" not in message and message.startswith("disk full: writing the records file "), message
        assert str(settings.status_path) in message and "database or disk is full" in message, message
        assert status.get("doc-0") is not None
    finally:
        dispose_engines()
        _unmount(where)
