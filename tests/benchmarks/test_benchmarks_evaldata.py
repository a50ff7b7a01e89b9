"""The one eval-data locator the benchmarks share, and the benchmarks from a clean clone: each imports and
answers --help, the BM25 one runs on the bundled sample corpus, the retrieval one says what data it needs.

Directory layouts are real ones under tmp_path; the locator's roots are passed in (or the environment
variable set) rather than anything being mocked.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from benchmarks import evaldata
from benchmarks.evaldata import (
    ENV_VAR,
    REPO_ROOT,
    SAMPLE_CORPUS,
    corpora_or_sample,
    corpus_files,
    find_eval_dir,
    questions_file,
    require_eval_dir,
)

BENCHMARKS = ("chunking_speed", "bm25_speed", "retrieval_quality", "pipeline_speed")


def _eval_dir(path: Path, questions: bool = True) -> Path:
    """A directory laid out like the evaluation data: corpora/*.md and questions.csv."""
    (path / "corpora").mkdir(parents=True)
    (path / "corpora" / "tiny.md").write_text("A tiny corpus. It has two sentences.\n", encoding="utf-8")
    if questions:
        (path / "questions.csv").write_text("question,references,corpus_id\n", encoding="utf-8")
    return path


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """<tmp>/checkout/repo (the repo root) beside <tmp>/checkout/shared/eval, and an unrelated cwd."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    repo = tmp_path / "checkout" / "repo"
    repo.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere" / "cwd"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    return {"repo": repo, "shared": tmp_path / "checkout" / "shared" / "eval", "cwd": elsewhere}


def test_the_default_roots_are_this_checkout_and_its_sample_corpus() -> None:
    assert (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "benchmarks" / "evaldata.py").is_file()
    assert {p.suffix for p in corpus_files(SAMPLE_CORPUS)} == {".md", ".txt"}


def test_repo_relative_shared_eval_is_found(layout: dict[str, Path]) -> None:
    assert find_eval_dir(repo_root=layout["repo"]) is None
    _eval_dir(layout["shared"])
    assert find_eval_dir(repo_root=layout["repo"]) == layout["shared"].resolve()
    assert require_eval_dir("test", repo_root=layout["repo"]) == layout["shared"].resolve()


def test_cwd_relative_shared_eval_is_found_last(layout: dict[str, Path], tmp_path: Path) -> None:
    beside_cwd = _eval_dir(tmp_path / "elsewhere" / "shared" / "eval")
    assert find_eval_dir(repo_root=layout["repo"]) == beside_cwd.resolve()
    _eval_dir(layout["shared"])  # the repo-relative place comes first
    assert find_eval_dir(repo_root=layout["repo"]) == layout["shared"].resolve()


def test_a_directory_without_corpora_does_not_count(layout: dict[str, Path]) -> None:
    layout["shared"].mkdir(parents=True)
    (layout["shared"] / "questions.csv").write_text("question,references,corpus_id\n", encoding="utf-8")
    assert find_eval_dir(repo_root=layout["repo"]) is None


def test_the_environment_variable_wins(
    layout: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _eval_dir(layout["shared"])
    chosen = _eval_dir(tmp_path / "chosen")
    monkeypatch.setenv(ENV_VAR, str(chosen))
    assert find_eval_dir(repo_root=layout["repo"]) == chosen
    assert evaldata.corpora_dir("test") == chosen / "corpora"
    assert questions_file("test") == chosen / "questions.csv"


def test_an_empty_environment_variable_counts_as_unset(
    layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _eval_dir(layout["shared"])
    monkeypatch.setenv(ENV_VAR, "")
    assert find_eval_dir(repo_root=layout["repo"]) == layout["shared"].resolve()


def test_an_environment_variable_naming_no_data_is_not_replaced_by_another_copy(
    layout: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _eval_dir(layout["shared"])  # would be found if the setting were ignored
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(ENV_VAR, str(empty))
    assert find_eval_dir(repo_root=layout["repo"]) is None
    with pytest.raises(SystemExit) as raised:
        require_eval_dir("retrieval_quality", repo_root=layout["repo"])
    message = str(raised.value.code)
    assert f"{ENV_VAR}={empty}" in message and "retrieval_quality" in message
    assert str(layout["shared"]) not in message  # it was not looked at


def test_missing_data_exits_with_a_message_naming_the_variable_and_the_places(
    layout: dict[str, Path],
) -> None:
    with pytest.raises(SystemExit) as raised:
        require_eval_dir("retrieval_quality", repo_root=layout["repo"])
    message = raised.value.code
    assert isinstance(message, str) and "\n" not in message  # one paragraph, printed by Python on exit
    assert ENV_VAR in message and "retrieval_quality" in message and "questions.csv" in message
    assert str(layout["shared"].resolve()) in message
    assert str((layout["cwd"] / ".." / "shared" / "eval").resolve()) in message
    assert "never copied" in message


def test_questions_file_missing_from_the_data_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(_eval_dir(tmp_path / "eval", questions=False)))
    with pytest.raises(SystemExit, match=r"questions\.csv"):
        questions_file("retrieval_quality")


def test_without_data_the_text_benchmarks_use_the_sample_corpus_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert corpora_or_sample("bm25_speed") == SAMPLE_CORPUS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bm25_speed" in err and "sample corpus" in err and ENV_VAR in err
    monkeypatch.setenv(ENV_VAR, str(_eval_dir(tmp_path / "eval")))
    assert corpora_or_sample("bm25_speed") == tmp_path / "eval" / "corpora"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_imports_and_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as raised:
        module.main(["--help"])
    assert raised.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_retrieval_quality_without_data_stops_with_the_locator_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks.retrieval_quality import main

    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(SystemExit) as raised:
        main(["--quick", "--cache-dir", ""])
    assert ENV_VAR in str(raised.value.code) and "retrieval_quality" in str(raised.value.code)


def test_bm25_speed_runs_on_the_sample_corpus_without_eval_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.bm25_speed import main

    monkeypatch.setenv(ENV_VAR, str(tmp_path))  # names no data: ../shared/eval is not looked at either
    main(["--chunks", "300", "--queries", "5", "--baseline-queries", "2", "--repeats", "1"])
    captured = capsys.readouterr()
    assert "sample corpus" in captured.err
    lines = captured.out.splitlines()
    assert lines[0].startswith("corpus: 300 chunks in 15 documents")
    header = next(line for line in lines if "ours (BM25Sink)" in line)
    assert "rank_bm25.BM25Okapi" in header
    p50 = [
        cell.strip()
        for cell in next(line for line in lines if line.startswith("query latency p50")).split("|")
    ]
    assert re.fullmatch(r"\d+\.\d+ ms \(5 q\)", p50[1]), p50  # unichunk's BM25Sink
    assert re.fullmatch(r"\d+\.\d+ ms \(2 q\)", p50[2]), p50  # rank_bm25
    rebuild = [
        cell.strip() for cell in next(line for line in lines if line.startswith("add 1 document")).split("|")
    ]
    assert re.fullmatch(r"\d+ ms", rebuild[1]) and re.fullmatch(r"\d+\.\d+ s \(rebuild\)", rebuild[2]), (
        rebuild
    )
    assert re.search(r"target p50 <= 10 ms: (met|MISSED)", captured.out)
    assert re.search(r"build / rank_bm25's \(target <= 5x\) +\| \d+\.\dx wall, \d+\.\dx CPU", captured.out)
    assert "saved index loaded on open: yes" in captured.out  # a reopen loads it, never rebuilds
