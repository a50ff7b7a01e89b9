"""A document's new labels are what the next read obeys: hits, context and graph context, on real stores."""

from __future__ import annotations

from pathlib import Path

from access_checks import assert_no_leak, make_corpus

from unichunk import Pipeline
from unichunk.access import Principal
from unichunk.chunking.models import Document

ENG = Principal(name="eng", labels=("eng",))


def _documents(labels: dict[str, tuple[str, ...]]) -> list[Document]:
    corpus = make_corpus(seed=7, size=2)
    return [
        Document(text=d.text, source_id=d.name, metadata={"labels": list(labels[d.name])})
        for d in corpus.documents
    ]


def test_a_label_change_is_obeyed_by_the_next_search(pipeline_env: Path) -> None:
    corpus = make_corpus(seed=7, size=2)
    first, second = (d.name for d in corpus.documents)
    with Pipeline() as owner:
        owner.ingest(_documents({first: ("eng",), second: ("hr",)}), source_name="relabel")
        ids = {row.source_id: row.document_id for row in owner.status().documents}
        corpus.ids.update(ids)
        reader = owner.scoped(ENG)
        query = "Alice Johnson Acme Corporation Berlin payroll"
        before = reader.search(query, k=20)
        assert {h.document_id for h in before.hits} == {ids[first]}

        summary = owner.ingest(_documents({first: ("hr",), second: ("eng", "hr")}), source_name="relabel")
        assert summary.failed == [] and summary.relabelled == 2  # relabelled in place, nothing re-embedded
        corpus.documents = [d.__class__(d.name, labels, d.marker, d.text) for d, labels in zip(
            corpus.documents, (("hr",), ("eng", "hr")), strict=True
        )]  # fmt: skip
        after = reader.search(query, k=20)
        assert {h.document_id for h in after.hits} == {ids[second]}
        assert after.graph is not None and after.graph.entities
        assert_no_leak(corpus, ENG, after, "search after the relabel")
        assert [c.chunk_id for c in reader.document(ids[second]).chunks]
        assert reader.get_chunks([c.chunk_id for c in owner.document(ids[first]).chunks]) == []
