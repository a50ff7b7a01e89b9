"""Label rules and effective labels: any text given as a label or a rule is either taken, normalised, or
refused with `BadLabel` naming it (Hypothesis over arbitrary text, the hostile kind included); the labels
a listed document gets are its source's, its matching rules' and its own, nothing else.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from unichunk.chunking.access_labels import BadLabel, normalise_labels
from unichunk.chunking.label_rules import LabelRule, effective_labels, parse_rules
from unichunk.chunking.sources import DirectorySource
from unichunk.engine.params import SourceParams

GOOD = st.from_regex(r"[a-z0-9][a-z0-9_.:-]{0,20}", fullmatch=True)


@given(st.lists(st.text(), max_size=4))
def test_any_labels_are_normalised_or_refused_by_name(labels: list[str]) -> None:
    try:
        found = normalise_labels(labels)
    except BadLabel as exc:
        assert "label" in str(exc)
        return
    assert list(found) == sorted(set(found))
    assert all(label == label.strip().casefold() for label in found)
    assert normalise_labels(found) == found  # stable


@given(st.text())
def test_any_rule_text_is_a_rule_or_refused(text: str) -> None:
    try:
        rule = LabelRule.parse(text)
    except BadLabel as exc:
        assert "label" in str(exc)
        return
    assert rule.labels and LabelRule.parse(str(rule)) == rule  # its text form reads back as itself
    rule.matches("a/b.md")  # matching never raises


@given(
    defaults=st.lists(GOOD, max_size=3),
    own=st.lists(GOOD, max_size=3),
    hr=st.lists(GOOD, min_size=1, max_size=3),
    path=st.sampled_from(["hr/pay.md", "HR/deep/pay.md", "eng/hr.md", "notes.md"]),
)
def test_a_documents_labels_are_its_sources_its_matching_rules_and_its_own(
    defaults: list[str], own: list[str], hr: list[str], path: str
) -> None:
    rules = parse_rules([f"hr/**={','.join(hr)}"])
    found = effective_labels(path, defaults, rules, own)
    matched = path.lower().startswith("hr/")
    assert set(found) == set(defaults) | set(own) | (set(hr) if matched else set())


def test_a_source_lists_each_document_with_its_labels(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for rel in ("hr/pay.md", "eng/design.md", "readme.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("text")
    source = DirectorySource(tmp_path).with_access(["Staff"], parse_rules(["hr/**=hr", "*.md=md"]))
    source.document_labels = {"readme.md": ("public",)}
    assert {item.source_id: item.labels for item in source.list()} == {
        "eng/design.md": ("md", "staff"),
        "hr/pay.md": ("hr", "md", "staff"),
        "readme.md": ("md", "public", "staff"),
    }


def test_flow_parameters_refuse_a_bad_label_or_rule_by_name() -> None:
    with pytest.raises(ValidationError, match="bad label 'no way'"):
        SourceParams(root="/x", labels=["ok", "no way"])
    with pytest.raises(ValidationError, match="bad label rule 'hr/\\*\\*'"):
        SourceParams(root="/x", label_rules=["hr/**"])
    params = SourceParams(root="/x", labels=["B", "a", "b"], label_rules=["hr/**=HR, X"])
    assert (params.labels, params.label_rules) == (["a", "b"], ["hr/**=hr,x"])
