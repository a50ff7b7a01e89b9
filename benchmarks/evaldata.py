"""Where the benchmarks find the evaluation data: one locator, so all four look in the same places.

The evaluation data (the chroma chunking-evaluation corpora and its questions with reference offsets) is
third-party and licensed separately, so it never lives in this repository: it is read in place from a
directory holding `corpora/*.md` and `questions.csv`. Places looked, first match wins:

1. `UNICHUNK_EVAL_DIR`, when set (and not empty). It is then the *only* place looked: an explicit
   setting that names no data is reported as such, never silently replaced by another copy found
   elsewhere. Pointing it at an empty directory is thus also how to run without the data on a machine
   that has `../shared/eval` (the tests do this);
2. `<repo root>/../shared/eval`, the layout of the machine the published figures were measured on;
3. `<cwd>/../shared/eval`, for a checkout run from a sibling directory of the data.

A directory counts when it has a `corpora/` subdirectory. Benchmarks that only need text (chunking speed,
BM25 speed, the pipeline) fall back to the sample corpus shipped in `deployments/sample_corpus/` and say
so (`corpora_or_sample`); the retrieval-quality benchmark needs the questions and stops with
`require_eval_dir`'s message instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_VAR = "UNICHUNK_EVAL_DIR"
REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CORPUS = REPO_ROOT / "deployments" / "sample_corpus"
TEXT_SUFFIXES = (".md", ".txt")
_RELATIVE = Path("..") / "shared" / "eval"


def is_eval_dir(path: Path) -> bool:
    """Whether `path` holds evaluation data (a `corpora/` directory; the questions are checked on use)."""
    return (path / "corpora").is_dir()


def _env_dir() -> Path | None:
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value).expanduser() if value else None


def candidates(repo_root: Path | None = None, cwd: Path | None = None) -> list[Path]:
    """The directories looked at, in order: `UNICHUNK_EVAL_DIR` alone when set, else the two
    `../shared/eval` places (relative to `repo_root` and `cwd`, by default this checkout and the current
    directory; tests pass other roots), without duplicates."""
    explicit = _env_dir()
    if explicit is not None:
        return [explicit]
    roots = [repo_root or REPO_ROOT, cwd or Path.cwd()]
    places = [(root / _RELATIVE).resolve() for root in roots]
    return list(dict.fromkeys(places))


def find_eval_dir(repo_root: Path | None = None, cwd: Path | None = None) -> Path | None:
    """The evaluation data directory, or None when no candidate holds `corpora/`."""
    return next((path for path in candidates(repo_root, cwd) if is_eval_dir(path)), None)


def _not_found(what: str, repo_root: Path | None, cwd: Path | None) -> str:
    looked = candidates(repo_root, cwd)
    explicit = _env_dir()
    if explicit is not None:
        where = f"{ENV_VAR}={explicit} is set, and it has no corpora/ directory (nothing else is looked at when it is set)"
    else:
        where = f"{ENV_VAR} is not set, and neither " + " nor ".join(str(p) for p in looked) + " has corpora/"
    return (
        f"{what} needs the evaluation data: the third-party corpora (corpora/*.md) and questions with "
        f"reference offsets (questions.csv) of the chroma chunking-evaluation set, read in place and never "
        f"copied into this repository. {where}. Set {ENV_VAR} to the directory that holds corpora/ and "
        f"questions.csv, or put it at ../shared/eval beside the checkout."
    )


def require_eval_dir(what: str, repo_root: Path | None = None, cwd: Path | None = None) -> Path:
    """The evaluation data directory; SystemExit with a one-paragraph message (what the data is, the
    places looked, `UNICHUNK_EVAL_DIR`) when there is none, so a fresh clone fails with advice, not a
    traceback about a missing file."""
    found = find_eval_dir(repo_root, cwd)
    if found is None:
        raise SystemExit(_not_found(what, repo_root, cwd))
    return found


def corpora_dir(what: str) -> Path:
    """`corpora/` of the evaluation data (SystemExit as `require_eval_dir` when there is none)."""
    return require_eval_dir(what) / "corpora"


def questions_file(what: str) -> Path:
    """`questions.csv` of the evaluation data; SystemExit when the data or the file is missing."""
    path = require_eval_dir(what) / "questions.csv"
    if not path.is_file():
        raise SystemExit(f"{what} needs {path} (questions with reference offsets); the directory has none")
    return path


def corpora_or_sample(what: str) -> Path:
    """`corpora/` of the evaluation data, else the bundled sample corpus after one line on stderr saying
    so: the benchmarks that only need text still run from a clean clone, on less (and different) text,
    so their figures are not comparable with the published ones."""
    found = find_eval_dir()
    if found is not None:
        return found / "corpora"
    explicit = _env_dir()
    reason = f"{ENV_VAR}={explicit} has no corpora/" if explicit else f"{ENV_VAR} unset, no ../shared/eval"
    print(
        f"{what}: no evaluation data ({reason}); using the bundled sample corpus {SAMPLE_CORPUS} "
        f"(its .md/.txt files), so the figures are not comparable with benchmarks/README.md",
        file=sys.stderr,
    )
    return SAMPLE_CORPUS


def corpus_files(directory: Path) -> list[Path]:
    """The text files of a corpus directory (*.md, *.txt), sorted; SystemExit when there are none."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in TEXT_SUFFIXES)
    if not files:
        raise SystemExit(f"no corpora (*.md, *.txt) in {directory}")
    return files
