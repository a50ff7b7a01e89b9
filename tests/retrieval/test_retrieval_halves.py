"""The tune/report split of evaluation questions (`split_halves`): deterministic, a partition, halved per
document, blind to the file's order; on the shared set, 138 and 138 questions. Fusion settings are chosen on
the tune half and reported on the other (benchmarks/fusion_tuning.py), so a split that leaked or moved
with the file's order would make the reported figures tuned ones."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from unichunk.retrieval.evaluation.questions import Question, Reference, load_questions, split_halves


def _question(ident: int, text: str, document: str | None) -> Question:
    if document is None:
        return Question(f"q{ident}", text)
    return Question(f"q{ident}", text, (Reference(document, "corpus", 0, 1),))


QUESTIONS = st.lists(
    st.tuples(st.text(min_size=1, max_size=12), st.none() | st.sampled_from(["a", "b", "c"])), max_size=40
).map(lambda rows: [_question(i, text, doc) for i, (text, doc) in enumerate(rows)])


def _document(question: Question) -> str:
    return question.references[0].document if question.references else ""


@settings(max_examples=200, deadline=None)
@given(questions=QUESTIONS, seed=st.integers(0, 2**16))
def test_halves_partition_the_questions_per_document_whatever_their_order(
    questions: list[Question], seed: int
) -> None:
    tune, report = split_halves(questions)
    assert sorted(q.id for q in tune + report) == sorted(q.id for q in questions)
    assert not {q.id for q in tune} & {q.id for q in report}
    assert [q.id for q in tune] == [q.id for q in questions if q in tune]  # the input's order kept
    per_tune, per_report = Counter(map(_document, tune)), Counter(map(_document, report))
    for document in set(per_tune) | set(per_report):
        assert per_tune[document] - per_report[document] in (0, 1)  # halved, the odd one to tune
    shuffled = list(questions)
    random.Random(seed).shuffle(shuffled)
    tune_again, report_again = split_halves(shuffled)
    assert {q.id for q in tune_again} == {q.id for q in tune}
    assert {q.id for q in report_again} == {q.id for q in report}


def test_the_shared_set_splits_into_two_halves_of_each_corpus(shared_eval_dir: Path) -> None:
    questions = load_questions(shared_eval_dir / "questions.csv")
    tune, report = split_halves(questions)
    assert (len(tune), len(report)) == (138, 138)
    per_tune, per_report = Counter(map(_document, tune)), Counter(map(_document, report))
    assert set(per_tune) == set(per_report) == {"chatlogs", "state_of_the_union", "wikitexts"}
    assert all(per_tune[d] - per_report[d] in (0, 1) for d in per_tune)
    assert split_halves(questions) == (tune, report)
