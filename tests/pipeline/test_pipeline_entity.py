"""`Pipeline.entity`: one entity explored, on a real FalkorDB server, through the application layer.

A scripted extractor fixes what each chunk names (as in `tests/sinks/test_sinks_graph_resolution.py`), so
every alias case is exact: an acronym in one document and its expansion in another are shown as "also
known as" both ways, never merged; a bare surname that two people of two documents share answers with both
as ambiguous candidates; a merge inside a document is listed with its chunk and goes with that document's
delete; a filter hides what only another reader's chunks taught; and any text as a name is a not-found or
a usage error, never another failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from tests.documents import make_document
from unichunk import Pipeline
from unichunk.access import Principal
from unichunk.chunking.models import Chunk
from unichunk.deployments.mcp.server import create_server
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.errors import NotFound, UsageError
from unichunk.retrieval.entity_view import explore_entity
from unichunk.retrieval.readers import Readers
from unichunk.sinks.base import SearchFilter
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.backends import FalkorDBBackend
from unichunk.sinks.graph.extraction import (
    EntityExtractor,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
)
from unichunk.sinks.graph.sink import KnowledgeGraphSink

Entities = list[tuple[str, str]]
Relations = list[tuple[str, str]]

SCRIPT: dict[str, tuple[Entities, Relations]] = {
    # doc_acme: the expansion, and a title form merged into a person's full name
    "International Business Machines hired Margaret Okafor.": (
        [("International Business Machines", "ORG"), ("Margaret Okafor", "PERSON")],
        [("Margaret Okafor", "International Business Machines")],
    ),
    "Dr. Okafor's lab grew in Nairobi.": (
        [("Dr. Okafor's", "PERSON"), ("Nairobi", "GPE")],
        [("Dr. Okafor's", "Nairobi")],
    ),
    "The Nairobi lab is Margaret Okafor's.": ([("Margaret Okafor's", "PERSON")], []),
    # doc_news: the acronym alone, and another Okafor
    "IBM opened an office.": ([("IBM", "ORG")], []),
    "John Okafor runs the bakery.": ([("John Okafor", "PERSON")], []),
    # doc_race: a bare surname, of nobody in its document
    "Okafor won the race.": ([("Okafor", "PERSON")], []),
}
DOCUMENTS = {
    "doc_acme": list(SCRIPT)[:3],
    "doc_news": list(SCRIPT)[3:5],
    "doc_race": list(SCRIPT)[5:],
}


class _Scripted(EntityExtractor):
    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        return [_extraction(c.chunk_id, *SCRIPT.get(c.content, ([], []))) for c in chunks]


def _extraction(chunk_id: str, entities: Entities, relations: Relations) -> Extraction:
    return Extraction(
        chunk_id,
        tuple(ExtractedEntity(n, t, f"{n} ({t})", chunk_id) for n, t in entities),
        tuple(ExtractedRelation(s, t, "works with", f"{s} and {t}", 1.0, chunk_id) for s, t in relations),
    )


@pytest.fixture
def graph(falkordb_url: str) -> Iterator[KnowledgeGraphSink]:
    sink = KnowledgeGraphSink(FalkorDBBackend(falkordb_url, f"test_{uuid.uuid4().hex[:12]}"), _Scripted())
    batch = []
    for document_id, pieces in DOCUMENTS.items():
        document, chunks = make_document(document_id, pieces, title=document_id.upper())
        # each document's chunks carry its own label, so a reader of one label sees one document
        document.metadata["labels"] = [document_id.removeprefix("doc_")]
        batch.append((document, chunks))
    sink.write(sink.prepare(batch))
    yield sink
    sink.drop()
    sink.close()


@pytest.fixture
def pipeline(graph: KnowledgeGraphSink, tmp_path: Path) -> Pipeline:
    @contextmanager
    def readers() -> Iterator[Readers]:
        yield Readers(graph=graph)

    return Pipeline(SinkSettings(data_dir=tmp_path / "data"), readers=readers)


def test_an_acronym_and_its_expansion_in_two_documents_know_each_other(pipeline: Pipeline) -> None:
    long = pipeline.entity("International Business Machines")
    assert long.matched_by == "name" and long.entity is not None
    assert long.entity.key == "international business machines" and long.entity.type == "ORG"
    assert [(a.key, a.via, a.ambiguous, a.document_ids) for a in long.also_known_as] == [
        ("ibm", "acronym", False, ["doc_news"])
    ]
    short = pipeline.entity("IBM")
    assert short.entity is not None and short.entity.key == "ibm"  # the entity of that name, not merged
    assert [s.document_id for s in short.entity.sources] == ["doc_news"]
    assert [(a.key, a.via, a.ambiguous) for a in short.also_known_as] == [
        ("international business machines", "expansion", False)
    ]
    assert pipeline.entity("I.B.M.'s").entity.key == "ibm"  # typed as the write side keys it


def test_a_bare_surname_of_two_people_is_ambiguous_never_the_same(pipeline: Pipeline) -> None:
    found = pipeline.entity("Okafor")
    # "okafor" is an entity itself (doc_race): shown, with both full names as ambiguous candidates for it
    assert found.entity is not None and found.entity.key == "okafor"
    assert [(a.key, a.via, a.ambiguous) for a in found.also_known_as] == [
        ("john okafor", "full name", True),
        ("margaret okafor", "full name", True),
    ]
    margaret = pipeline.entity("Margaret Okafor")
    assert margaret.entity is not None
    # the bare surname may be either Okafor; John Okafor, who only shares it, is not listed at all
    assert [(a.key, a.via, a.ambiguous) for a in margaret.also_known_as] == [("okafor", "surname", True)]


def test_a_name_only_aliases_reach_lists_every_candidate(
    pipeline: Pipeline, graph: KnowledgeGraphSink
) -> None:
    graph.delete("doc_race")  # no entity "okafor" any more: the surname is only the alias of two people
    found = pipeline.entity("Mr. Okafor")
    assert found.entity is None and found.matched_by == "alias"
    assert [(c.key, [s.document_id for s in c.sources]) for c in found.candidates] == [
        ("john okafor", ["doc_news"]),
        ("margaret okafor", ["doc_acme", "doc_acme", "doc_acme"]),  # a source per chunk
    ]
    one = pipeline.entity("IBM's")  # one entity of that alias: that one, found through it
    assert one.matched_by == "name" and one.entity.key == "ibm"


def test_a_merge_is_listed_with_its_chunk_and_goes_with_its_document(
    pipeline: Pipeline, graph: KnowledgeGraphSink
) -> None:
    found = pipeline.entity("Dr. Margaret Okafor")
    assert found.entity is not None and found.entity.key == "margaret okafor"
    _, chunks = make_document("doc_acme", DOCUMENTS["doc_acme"])
    # a decision (a title and a surname for the full name) apart from a mere variant (a possessive)
    assert [(m.chunk_id, m.document_id, m.merged_from, m.variants, m.into) for m in found.merges] == [
        (chunks[1].chunk_id, "doc_acme", ["dr. okafor's"], [], "margaret okafor"),
        (chunks[2].chunk_id, "doc_acme", [], ["margaret okafor's"], "margaret okafor"),
    ]
    assert [(s.chunk_id, s.written) for s in found.entity.sources] == [
        (chunks[0].chunk_id, "Margaret Okafor"),
        (chunks[1].chunk_id, ""),  # it wrote only the merged form
        (chunks[2].chunk_id, "Margaret Okafor"),
    ]
    assert {n.key for n in found.neighbours} == {"international business machines", "nairobi"}
    assert {(r.source, r.target) for r in found.relations} >= {
        ("international business machines", "margaret okafor")
    }
    graph.delete("doc_acme")
    with pytest.raises(NotFound, match="no such entity"):
        pipeline.entity("Dr. Margaret Okafor")
    # what doc_acme taught is gone from the others' views too
    assert pipeline.entity("IBM").also_known_as == []


def test_a_readers_filter_hides_another_readers_entity_aliases_and_merges(
    pipeline: Pipeline, graph: KnowledgeGraphSink
) -> None:
    news: SearchFilter = {"labels": ["news"]}
    # the graph's own filter: what only doc_acme's and doc_race's chunks taught is not there
    ibm = explore_entity(graph, "IBM", filter=news)
    assert ibm is not None and ibm.entity is not None and ibm.also_known_as == []
    assert explore_entity(graph, "International Business Machines", filter=news) is None
    assert explore_entity(graph, "Margaret Okafor", filter=news) is None
    okafor = explore_entity(graph, "Okafor", filter=news)  # one Okafor visible: that one, by its alias
    assert okafor is not None and okafor.matched_by == "alias" and okafor.candidates == []
    assert okafor.entity is not None and okafor.entity.key == "john okafor"
    assert okafor.merges == [] and okafor.also_known_as == []
    acme = explore_entity(graph, "Margaret Okafor", filter={"labels": ["acme"]})
    assert acme is not None and [m.merged_from for m in acme.merges] == [["dr. okafor's"], []]
    assert acme.also_known_as == []  # the bare "okafor" of doc_race is hidden
    # through the Pipeline a reader is also checked against the documents' records, which this provided
    # graph has none of: it sees nothing (tests/access check a real ingest, records and all)
    with pytest.raises(NotFound):
        pipeline.scoped(Principal(name="reader", labels=("news",))).entity("IBM")


def test_hops_and_limit_are_checked(pipeline: Pipeline) -> None:
    with pytest.raises(UsageError, match="hops"):
        pipeline.entity("IBM", hops=4)
    with pytest.raises(UsageError, match="blank"):
        pipeline.entity("  ")
    with pytest.raises(UsageError, match="at most"):
        pipeline.entity("x" * 10_000)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.one_of(
        st.text(),
        st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc"]), min_size=1),
        st.builds(lambda a, b: a + "\x00" + b, st.text(max_size=20), st.text(max_size=20)),
        st.builds(lambda a, b: a + "\ud800" + b, st.sampled_from(["IBM", "Okafor", ""]), st.text(max_size=5)),
        st.just("x" * 10_000),
    )
)
def test_any_text_as_a_name_is_found_not_found_or_a_usage_error(pipeline: Pipeline, name: str) -> None:
    try:
        found = pipeline.entity(name)
    except (NotFound, UsageError) as exc:
        assert str(exc)
        return
    assert found.entity is not None or found.candidates


# --- the doors -------------------------------------------------------------------------------------------

TOKEN = "entity-test-token"


@pytest.fixture
def client(graph: KnowledgeGraphSink, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(
        ServiceSettings(webhook_secret="w", api_token=TOKEN),
        PrefectEventSink("http://127.0.0.1:9/api", timeout=2),
        search_sinks=lambda: {"graph": graph},
        data_dir=tmp_path / "data",
    )
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as test_client:
        yield test_client


def test_http_serves_an_entity_and_a_404_for_an_unknown_one(client: TestClient) -> None:
    found = client.get("/entities/IBM", params={"hops": 2})
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["entity"]["key"] == "ibm"
    assert [a["key"] for a in body["also_known_as"]] == ["international business machines"]
    missing = client.get("/entities/Nobody%20Here")
    assert missing.status_code == 404 and "no such entity" in missing.json()["detail"]
    assert client.get("/entities/%20%20").status_code == 422
    assert client.get("/entities/IBM", params={"hops": 9}).status_code == 422
    assert client.get("/entities/IBM", headers={"Authorization": "Bearer wrong"}).status_code == 401


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.one_of(st.text(min_size=1), st.just("x" * 10_000), st.just("IBM\x00\ud800/..%")))
def test_http_answers_any_name_with_a_200_404_or_422(client: TestClient, name: str) -> None:
    # a lone surrogate goes out as the bytes Python would write for it, which are no UTF-8
    answer = client.get(f"/entities/{quote(name, safe='', errors='surrogatepass')}")
    assert answer.status_code in (200, 404, 422), (answer.status_code, answer.text[:300])
    if answer.status_code != 200:
        assert answer.json()["detail"]


def _mcp_entity(pipeline: Pipeline, arguments: dict[str, object]) -> dict[str, object]:
    """The MCP tool `entity` through the SDK's in-process client: its structured result, or its error."""
    server = create_server(pipeline, roots=[])

    async def call() -> dict[str, object]:
        async with Client(server) as client:
            result = await client.call_tool("entity", arguments)
        if result.is_error:
            return {"error": " ".join(getattr(c, "text", "") for c in result.content)}
        return dict(result.structured_content or {})

    return anyio.run(call)


def test_mcp_entity_answers_an_entity_or_a_one_line_error(pipeline: Pipeline) -> None:
    found = _mcp_entity(pipeline, {"name": "International Business Machines", "hops": 2})
    assert found["entity"]["key"] == "international business machines"  # type: ignore[index]
    assert [a["via"] for a in found["also_known_as"]] == ["acronym"]  # type: ignore[union-attr]
    missing = _mcp_entity(pipeline, {"name": "Nobody Here"})
    assert "no such entity in the knowledge graph: 'Nobody Here'" in missing["error"]  # type: ignore[operator]
    for bad in ({"name": ""}, {"name": "x" * 10_000}, {"name": "IBM", "hops": 0}):
        answer = _mcp_entity(pipeline, bad)
        assert "error" in answer and "\n" not in str(answer["error"]), answer


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.text(min_size=1, max_size=40) | st.just("IBM\x00\ud800"))
def test_mcp_entity_answers_any_name_without_a_traceback(pipeline: Pipeline, name: str) -> None:
    answer = _mcp_entity(pipeline, {"name": name})
    if "error" in answer:
        error = str(answer["error"])
        assert error and "Traceback" not in error and "\n" not in error, error
    else:
        assert answer.get("entity") or answer.get("candidates")


def test_the_cli_refuses_a_blank_or_overlong_name_before_anything_starts(tmp_path: Path) -> None:
    """Exit 2 with one `error:` line, and no store or server opened for it (the data dir stays empty)."""
    env = {**os.environ, "UNICHUNK_DATA_DIR": str(tmp_path / "data")}
    env.pop("UNICHUNK_SERVICE_URL", None)
    for name in ("  ", "x" * 3000):
        ran = subprocess.run(
            [sys.executable, "-m", "unichunk.deployments.cli.main", "entity", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 2, (ran.returncode, ran.stderr)
        assert ran.stderr.startswith("error: the entity name") and ran.stdout == ""
    assert not (tmp_path / "data").exists()


def test_the_cli_text_says_what_is_merged_what_is_only_related_and_what_is_ambiguous(
    pipeline: Pipeline, graph: KnowledgeGraphSink, capsys: pytest.CaptureFixture[str]
) -> None:
    from unichunk.deployments.cli.main import _print_entity

    _print_entity(pipeline.entity("Margaret Okafor"))
    shown = capsys.readouterr().out
    assert "Margaret Okafor  (PERSON, key 'margaret okafor')" in shown
    assert "sources (3 chunks):" in shown
    assert '"dr. okafor\'s" -> margaret okafor  in doc_acme' in shown  # the chunk's names, as keys
    assert "(1 chunk wrote the name with an article, a possessive, a title or dots" in shown
    assert "Okafor (surname, ambiguous: several entities claim it)  in doc_race" in shown
    graph.delete("doc_race")
    _print_entity(pipeline.entity("Okafor"))
    shown = capsys.readouterr().out
    assert shown.startswith("Okafor is the alias of 2 entities; the graph cannot tell which is meant:")
    assert (
        "1. John Okafor (PERSON, john okafor)" in shown
        and "2. Margaret Okafor (PERSON, margaret okafor)" in shown
    )


# --- end to end: a real ingest (spaCy), a real delete (the Prefect flow) ------------------------------

LAB = (
    "# The lab\n\nInternational Business Machines hired Dr. Margaret Okafor in 2019 to run its research lab "
    "in Nairobi.\nDr. Okafor's lab grew quickly. Okafor later partnered with the University of Lagos.\n"
)
NEWS = "IBM opened a new office in Lagos this spring. The office is run by John Okafor, who joined IBM from Microsoft.\n"


def test_a_merge_from_a_real_ingest_goes_with_the_documents_delete(pipeline_env: Path) -> None:
    """spaCy extracts the names; resolution merges the bare surname into the full name of the same
    document; `Pipeline.delete` (the delete flow) takes the entity, its merge and its alias link away."""
    with Pipeline() as pipeline:
        summary = pipeline.ingest({"lab.md": LAB, "news.txt": NEWS}, source_name="t")
        assert summary.failed == [] and summary.processed == 2, summary
        margaret = pipeline.entity("Dr. Okafor's")  # the surname: two Okafors, only one of them a key
        assert margaret.entity is None and {c.key for c in margaret.candidates} == {
            "margaret okafor",
            "john okafor",
        }
        found = pipeline.entity("Margaret Okafor")
        assert found.entity is not None and [s.source_id for s in found.entity.sources] == ["lab.md"]
        assert [m.merged_from for m in found.merges] == [["okafor"]]
        lab = found.entity.sources[0].document_id
        pipeline.delete(lab)
        with pytest.raises(NotFound):
            pipeline.entity("Margaret Okafor")
        john = pipeline.entity("Okafor")  # one Okafor left: that one, through his surname
        assert john.entity is not None and john.entity.key == "john okafor" and john.matched_by == "alias"
