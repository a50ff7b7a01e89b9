"""Locating the questions' references in the documents as unichunk loaded them.

A reference names its document by source ID (exact, or the file's stem when only one document has it: a
CSV's `corpus_id` `wikitexts` is the file `wikitexts.md`) or by document ID, and gives offsets and/or the
referenced text. Offsets are into the document text as unichunk loads it (`load_document`, the ingest's
own loader, so a PDF's or an e-mail's offsets are those of its extracted text). Given only its content, a
reference is located in that text (the first occurrence). A reference whose document is unknown, whose
offsets fall outside the text, whose offsets disagree with its content, or whose content is not in the
text is `Unlocated` with the reason, and reported, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from unichunk.chunking.errors import DocumentLoadError
from unichunk.chunking.loaders import load_document
from unichunk.index.status import DocumentStatus
from unichunk.retrieval.evaluation.metric import Interval
from unichunk.retrieval.evaluation.questions import Question, Reference


@dataclass(frozen=True)
class Unlocated:
    question: str
    reference: str  # the first 80 characters of what it names
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"question": self.question, "reference": self.reference, "reason": self.reason}


@dataclass
class Located:
    """One question's references as character spans per document ID, and its relevant documents."""

    question: Question
    spans: dict[str, list[Interval]] = field(default_factory=dict)
    documents: set[str] = field(default_factory=set)  # relevant at document level


class Documents:
    """The documents of one generation's status table, found by source ID, stem or document ID, and
    their text loaded once each."""

    def __init__(self, rows: Sequence[DocumentStatus]) -> None:
        self.rows = {row.document_id: row for row in rows if row.state == "processed"}
        self.by_source: dict[str, list[str]] = {}
        self.by_stem: dict[str, list[str]] = {}
        for row in self.rows.values():
            if row.source_id:
                self.by_source.setdefault(row.source_id, []).append(row.document_id)
                self.by_stem.setdefault(PurePosixPath(row.source_id).stem, []).append(row.document_id)
        self.texts: dict[str, str] = {}
        self.errors: dict[str, str] = {}

    def find(self, ref: Reference) -> tuple[str | None, str]:
        """(document ID, '') or (None, why not)."""
        if ref.by == "document_id":
            return (ref.document, "") if ref.document in self.rows else (None, "no such document ID")
        found = self.by_source.get(ref.document) or self.by_stem.get(PurePosixPath(ref.document).stem, [])
        if len(found) == 1:
            return found[0], ""
        if not found:
            return None, f"no ingested document has the source ID or file name {ref.document!r}"
        return None, f"{len(found)} documents match {ref.document!r}; name it by its full source ID"

    def text(self, document_id: str) -> str | None:
        """The document's text as the ingest loads it (None, with `errors[document_id]`, if unreadable)."""
        if document_id not in self.texts and document_id not in self.errors:
            row = self.rows[document_id]
            try:
                document = load_document(
                    row.path or "", source_system=row.source_system or "fs", source_id=row.source_id
                )
                self.texts[document_id] = document.text
            except DocumentLoadError as exc:
                self.errors[document_id] = f"the document cannot be loaded: {exc}"
        return self.texts.get(document_id)


def locate(questions: Sequence[Question], documents: Documents) -> tuple[list[Located], list[Unlocated]]:
    """Every question with its located references; every reference that could not be, with why."""
    located, unlocated = [], []
    for question in questions:
        found = Located(question)
        for ref in question.references:
            document_id, why = documents.find(ref)
            span = None
            if document_id is not None:
                text = documents.text(document_id)
                span, why = (None, documents.errors[document_id]) if text is None else _span(ref, text)
            if span is None or document_id is None:
                unlocated.append(Unlocated(question.text, ref.preview(), why))
                continue
            found.spans.setdefault(document_id, []).append(span)
            found.documents.add(document_id)
        for ref in question.relevant:
            document_id, why = documents.find(ref)
            if document_id is None:
                unlocated.append(Unlocated(question.text, ref.preview(), why))
            else:
                found.documents.add(document_id)
        located.append(found)
    return located, unlocated


def _span(ref: Reference, text: str) -> tuple[Interval | None, str]:
    """The reference's span in `text`, or (None, why not)."""
    if ref.start is not None and ref.end is not None:
        if not ref.start < ref.end <= len(text):
            return None, f"offsets [{ref.start}:{ref.end}] are outside the document ({len(text)} characters)"
        if ref.content is not None and text[ref.start : ref.end] != ref.content:
            return None, f"the text at [{ref.start}:{ref.end}] is not the reference's content"
        return (ref.start, ref.end), ""
    assert ref.content is not None  # questions.py admits no reference with neither
    start = text.find(ref.content)
    if start < 0:
        return None, "the content is not in the document's text"
    return (start, start + len(ref.content)), ""
