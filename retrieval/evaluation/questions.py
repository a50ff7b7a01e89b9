"""Questions with references, in the formats teams have, read into one shape (`Question`).

- CSV (the shared evaluation set's): columns `question`, `references` (a JSON list of `{content,
  start_index, end_index}`) and `corpus_id` (the document: a file `<corpus_id>.md` or `.txt` of the
  ingested source);
- JSONL, one object a line: `{question, references: [{source_id | document_id, start_char, end_char,
  content?}]}` (offsets optional when `content` is given: it is then located in the text);
- document level, JSONL too: `{question, relevant: [source_id | document_id, ...]}` (hit@k and MRR only).

A file that cannot be read as one of them raises `QuestionsError` naming the line; references are only
parsed here, located in the documents by `unichunk.retrieval.evaluation.references`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unichunk.retrieval.ranking import RetrievalError


class QuestionsError(RetrievalError):
    """A questions file that cannot be read (its format, a line of it)."""


@dataclass(frozen=True)
class Reference:
    """A span of a document given by the questions: `document` names it (by `by`: a source ID, a
    document ID, or a CSV corpus name), offsets and/or content give the span."""

    document: str
    by: str  # "source_id" | "document_id" | "corpus"
    start: int | None = None
    end: int | None = None
    content: str | None = None

    def preview(self) -> str:
        """The first 80 characters of what the reference names, for a report."""
        if self.content is not None:
            return self.content[:80]
        return f"{self.document}[{self.start}:{self.end}]"


@dataclass(frozen=True)
class Question:
    """One question: character references (span-level) and/or relevant documents (document level)."""

    id: str
    text: str
    references: tuple[Reference, ...] = ()
    relevant: tuple[Reference, ...] = ()  # documents only (no span)


def load_questions(path: str | Path) -> list[Question]:
    """The questions of `path`: CSV by its `.csv` suffix, else JSON lines."""
    file = Path(path)
    if not file.is_file():
        raise QuestionsError(f"no questions file at {file}")
    try:
        text = file.read_bytes().decode("utf-8-sig")  # no newline translation: contents stay exact
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionsError(f"cannot read {file}: {exc}") from exc
    questions = _csv(text, file) if file.suffix.lower() == ".csv" else _jsonl(text, file)
    if not questions:
        raise QuestionsError(f"{file} holds no questions")
    return questions


def split_halves(questions: Sequence[Question]) -> tuple[list[Question], list[Question]]:
    """(tune, report): a deterministic half split, stratified by document, so a setting can be chosen on
    one half and reported on the other without the report half ever steering the choice.

    Within each document (a question's first reference, else its first relevant document), questions are
    ordered by sha256 of their text (then by ID) and dealt alternately, tune first: the split depends on
    neither the file's order nor anything random, each document's questions are halved (an odd one out
    goes to tune), and the halves keep the input's order."""
    groups: dict[str, list[int]] = {}
    for index, question in enumerate(questions):
        named = question.references or question.relevant
        groups.setdefault(named[0].document if named else "", []).append(index)
    report: set[int] = set()
    for indexes in groups.values():
        ordered = sorted(
            indexes,
            key=lambda i: (hashlib.sha256(questions[i].text.encode("utf-8")).hexdigest(), questions[i].id),
        )
        report.update(ordered[1::2])
    tune = [q for i, q in enumerate(questions) if i not in report]
    return tune, [q for i, q in enumerate(questions) if i in report]


def _csv(text: str, file: Path) -> list[Question]:
    rows = csv.DictReader(io.StringIO(text, newline=""))
    missing = {"question", "references", "corpus_id"} - set(rows.fieldnames or ())
    if missing:
        raise QuestionsError(f"{file}: a questions CSV needs the columns {sorted(missing)}")
    out = []
    for line, row in enumerate(rows, start=2):
        where = f"{file}:{line}"
        try:
            refs = json.loads(row["references"] or "[]")
        except json.JSONDecodeError as exc:
            raise QuestionsError(f"{where}: references are not JSON ({exc})") from exc
        if not isinstance(refs, list):
            raise QuestionsError(f"{where}: references must be a JSON list")
        corpus = _text(row.get("corpus_id"), where, "corpus_id")
        parsed = tuple(
            Reference(
                corpus,
                "corpus",
                _offset(ref, "start_index", where),
                _offset(ref, "end_index", where),
                _optional_text(ref, "content", where),
            )
            for ref in (_object(r, where) for r in refs)
        )
        out.append(Question(f"q{len(out) + 1}", _text(row.get("question"), where, "question"), parsed))
    return out


def _jsonl(text: str, file: Path) -> list[Question]:
    out = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{file}:{line}"
        try:
            item = _object(json.loads(raw), where)
        except json.JSONDecodeError as exc:
            raise QuestionsError(f"{where}: not a JSON object ({exc})") from exc
        if "references" not in item and "relevant" not in item:
            raise QuestionsError(f"{where}: a question needs `references` or `relevant`")
        refs = tuple(_reference(_object(r, where), where) for r in _list(item, "references", where))
        relevant = tuple(_named(r, where) for r in _list(item, "relevant", where))
        ident = str(item.get("id") or f"q{len(out) + 1}")
        out.append(Question(ident, _text(item.get("question"), where, "question"), refs, relevant))
    return out


def _reference(ref: dict[str, Any], where: str) -> Reference:
    by = "document_id" if ref.get("document_id") else "source_id"
    document = _text(ref.get(by), where, "source_id or document_id")
    start, end = _offset(ref, "start_char", where), _offset(ref, "end_char", where)
    content = _optional_text(ref, "content", where)
    if content is None and (start is None or end is None):
        raise QuestionsError(f"{where}: a reference needs start_char and end_char, or content")
    return Reference(document, by, start, end, content)


def _named(value: Any, where: str) -> Reference:
    """A `relevant` entry: a source ID, or `{source_id | document_id}`."""
    if isinstance(value, str) and value:
        return Reference(value, "source_id")
    item = _object(value, where)
    by = "document_id" if item.get("document_id") else "source_id"
    return Reference(_text(item.get(by), where, "source_id or document_id"), by)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise QuestionsError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def _list(item: dict[str, Any], key: str, where: str) -> list[Any]:
    value = item.get(key, [])
    if not isinstance(value, list):
        raise QuestionsError(f"{where}: `{key}` must be a list")
    return value


def _text(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QuestionsError(f"{where}: `{what}` must be a non-empty string")
    return value


def _optional_text(item: dict[str, Any], key: str, where: str) -> str | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise QuestionsError(f"{where}: `{key}` must be a non-empty string")
    return value


def _offset(item: dict[str, Any], key: str, where: str) -> int | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QuestionsError(f"{where}: `{key}` must be a non-negative integer")
    return value
