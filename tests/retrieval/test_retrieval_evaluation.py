"""The evaluation's parts without stores: question files of any content either parse or are refused with
`QuestionsError` naming the line (never another exception), references are located exactly or reported
with a reason, and the budget filler never hands out more than the budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.index.status import DocumentStatus
from unichunk.retrieval.evaluation.metric import fill_budget, length, spans_scores
from unichunk.retrieval.evaluation.questions import QuestionsError, load_questions
from unichunk.retrieval.evaluation.references import Documents, locate
from unichunk.retrieval.evaluation.run import gate

SEED_JSONL = (
    '{"question": "q?", "references": [{"source_id": "a.md", "start_char": 0, "end_char": 4, "content": "abcd"}]}\n'
    '{"question": "r?", "relevant": ["a.md", {"document_id": "d1"}]}\n'
)
SEED_CSV = (
    'question,references,corpus_id\nq?,"[{""content"": ""ab"", ""start_index"": 0, ""end_index"": 2}]",a\n'
)
KEYS = ["question", "references", "relevant", "source_id", "document_id", "start_char", "end_char", "content"]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=6),
    max_leaves=12,
)


def _mutated(seed: str) -> st.SearchStrategy[bytes]:
    """The seed with a run of it replaced by arbitrary bytes (past the first checks, into the parser)."""
    data = seed.encode()
    return st.tuples(st.integers(0, len(data)), st.integers(0, 20), st.binary(max_size=20)).map(
        lambda t: data[: t[0]] + t[2] + data[t[0] + t[1] :]
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.one_of(
        _mutated(SEED_JSONL),
        _mutated(SEED_CSV),
        st.binary(max_size=200),
        st.lists(JSON_VALUES, max_size=3).map(lambda v: "\n".join(json.dumps(x) for x in v).encode()),
    ),
    suffix=st.sampled_from([".jsonl", ".csv"]),
)
def test_any_questions_file_parses_or_is_refused_naming_where(
    tmp_path: Path, content: bytes, suffix: str
) -> None:
    path = tmp_path / f"questions{suffix}"
    path.write_bytes(content)
    try:
        questions = load_questions(path)
    except QuestionsError as exc:
        assert str(path) in str(exc)
        return
    assert questions and all(
        q.text.strip() and (q.references or q.relevant or suffix == ".csv") for q in questions
    )


def test_the_seeds_parse_as_given(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text(SEED_JSONL)
    (tmp_path / "q.csv").write_text(SEED_CSV)
    first, second = load_questions(tmp_path / "q.jsonl")
    assert (first.references[0].start, first.references[0].content) == (0, "abcd")
    assert [r.by for r in second.relevant] == ["source_id", "document_id"]
    (csv_question,) = load_questions(tmp_path / "q.csv")
    assert csv_question.references[0].document == "a" and csv_question.references[0].by == "corpus"
    with pytest.raises(QuestionsError, match=r"q\.txt"):
        load_questions(tmp_path / "q.txt")  # no such file


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=300), data=st.data())
def test_a_reference_is_located_exactly_or_reported(tmp_path: Path, text: str, data: st.DataObject) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    rows = [
        DocumentStatus(
            document_id="d1", state="processed", source_system="s", source_id="doc.txt", path=str(path)
        )
    ]
    documents = Documents(rows)
    loaded = documents.text("d1")
    if loaded is None:  # unreadable: every reference to it is reported with the loader's reason
        return
    start = data.draw(st.integers(0, len(loaded)))
    end = data.draw(st.integers(start, len(loaded) + 3))
    content = data.draw(st.one_of(st.none(), st.just(loaded[start:end]), st.text(min_size=1, max_size=5)))
    line = {"question": "q?", "references": [{"source_id": "doc.txt", "start_char": start, "end_char": end}]}
    if content:
        line["references"][0]["content"] = content
    if content and data.draw(st.booleans()):  # content only: found by searching the text
        del line["references"][0]["start_char"], line["references"][0]["end_char"]
    file = tmp_path / "q.jsonl"
    file.write_text(json.dumps(line) + "\n")
    (located,), unlocated = locate(load_questions(file), documents)
    spans = located.spans.get("d1", [])
    assert len(spans) + len(unlocated) == 1  # never dropped silently
    for s, e in spans:
        assert 0 <= s < e <= len(loaded)
        assert content is None or loaded[s:e] == content


@given(
    ranked=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 50), st.integers(0, 50)), max_size=8),
    budget=st.integers(1, 60),
)
def test_the_budget_is_never_exceeded_and_scores_are_fractions(ranked: list, budget: int) -> None:
    spans = [(d, min(s, e), max(s, e)) for d, s, e in ranked]
    taken = fill_budget(spans, budget)
    assert sum(length(v) for v in taken.values()) <= budget
    for value in spans_scores({"a": [(5, 20)], "b": [(0, 3)]}, taken):
        assert 0.0 <= value <= 1.0


def _report(live: dict[str, float], candidate: dict[str, float]) -> dict:
    def overall(recalls: dict[str, float]) -> dict:
        return {"chars": {b: {"recall": r, "precision": 0.1, "iou": 0.1} for b, r in recalls.items()}}

    return {"overall": {"live": overall(live), "candidate": overall(candidate)}}


def test_the_gate_refuses_only_beyond_the_tolerance_and_names_the_budget() -> None:
    live = {"1000": 0.60, "2000": 0.80}
    assert gate(_report(live, {"1000": 0.595, "2000": 0.95}), 0.01) == {
        "tolerance": 0.01, "passed": True, "reasons": []
    }  # fmt: skip
    refused = gate(_report(live, {"1000": 0.60, "2000": 0.70}), 0.05)
    assert not refused["passed"] and len(refused["reasons"]) == 1
    assert refused["reasons"][0].startswith(
        "recall at 2,000 characters: candidate 70.0 % against live 80.0 %"
    )
    nothing = gate(_report({}, {}), 0.01)  # document-level questions only: nothing to judge recall on
    assert not nothing["passed"] and "cannot be compared" in nothing["reasons"][0]
