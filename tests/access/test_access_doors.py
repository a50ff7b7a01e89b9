"""Who may read what, at every door beside Python: the HTTP API, the CLI through the service, the MCP server
and the LlamaIndex and LangChain adapters, each given a token that `unichunk tokens` made.

The index is the one `test_access_pipeline` checks through the Python API (`access_index`, embedded); here the
same property (`access_checks`) is checked on what each door answers, as its caller would see it: JSON from a
real HTTP listener (uvicorn, the service's limits), the CLI's `--json` from its own process, the MCP server's
structured tool results through the SDK's client, the adapters' nodes and documents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from access_checks import (
    ACCESS_CORPUS,
    Index,
    answers_as_missing,
    assert_no_leak,
    check_entity,
    check_graph_search,
    check_search,
    entity_names,
    plain,
    principals,
    queries,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from tests.servers import serving
from unichunk.access import Principal
from unichunk.deployments.mcp.server import create_server
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.errors import NotFound
from unichunk.integrations.langchain import UnichunkRetriever as LangChainRetriever
from unichunk.integrations.llama_index import UnichunkRetriever as LlamaIndexRetriever
from unichunk.tokens import Tokens

# One ingest (embedded records): the doors, not the records backend, are what this module varies.
pytestmark = pytest.mark.parametrize("access_index", ["embedded"], indirect=True)
EXAMPLES = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
CORPUS = ACCESS_CORPUS


@dataclass
class Doors:
    """The served index and a token per label set (made once, through `unichunk.tokens`)."""

    index: Index
    url: str
    http: httpx.Client
    tokens: Tokens
    env: dict[str, str]
    made: dict[tuple[str, ...], str] = field(default_factory=dict)

    def token(self, principal: Principal) -> str:
        if principal.labels not in self.made:
            self.made[principal.labels], _ = self.tokens.create(principal.labels)
        return self.made[principal.labels]

    def get(self, path: str, principal: Principal, **params: Any) -> httpx.Response:
        return self.http.get(
            path, params=params, headers={"Authorization": f"Bearer {self.token(principal)}"}
        )

    def cli(self, principal: Principal, *args: str) -> subprocess.CompletedProcess[str]:
        """The real CLI in its own process, asking the running service with this principal's token."""
        return subprocess.run(
            [sys.executable, "-m", "unichunk.deployments.cli.main", *args],
            env={**self.env, "UNICHUNK_SERVICE_URL": self.url, "UNICHUNK_TOKEN": self.token(principal)},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def mcp(self, principal: Principal, tool: str, arguments: dict[str, Any]) -> Any:
        """A tool's answer from an MCP server that runs as this principal's token (the SDK's client,
        in-process): its structured result, or the error text it answered with."""
        server = create_server(self.index.owner, roots=[], token=self.token(principal))

        async def call() -> Any:
            async with Client(server) as client:
                result = await client.call_tool(tool, arguments)
            if result.is_error:
                return {"error": " ".join(getattr(c, "text", "") for c in result.content)}
            return result.structured_content

        return anyio.run(call)


@pytest.fixture(scope="module")
def doors(access_index: Index, prefect_api_url: str) -> Iterator[Doors]:
    """`unichunk serve`'s app over the access index's data dir (the environment names its stores, as a
    served process's does), listening on a free loopback port in a thread."""
    owner = access_index.owner.settings
    names = {
        "UNICHUNK_DATA_DIR": str(owner.data_dir),
        "UNICHUNK_FALKORDB_URL": str(owner.falkordb_url),
        "UNICHUNK_GRAPH_NAME": owner.graph_name,
    }
    with pytest.MonkeyPatch.context() as env:
        for key, value in names.items():
            env.setenv(key, value)
        for key in ("UNICHUNK_API_TOKEN", "UNICHUNK_TOKEN", "UNICHUNK_DATABASE_URL"):
            env.delenv(key, raising=False)
        tokens = Tokens(owner)
        app = create_app(
            ServiceSettings(webhook_secret="w", webhook_batching=False),
            PrefectEventSink(prefect_api_url),
            data_dir=owner.data_dir,
        )
        child_env = {k: v for k, v in os.environ.items() if k not in {"UNICHUNK_API_TOKEN", "UNICHUNK_TOKEN"}}
        with serving(app) as port:
            url = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=url, timeout=120, trust_env=False) as http:
                yield Doors(access_index, url, http, tokens, {**child_env, **names})


def _hidden_and_readable(index: Index, principal: Principal) -> tuple[list[str], list[str]]:
    ids = index.corpus.ids
    return (
        [ids[d.name] for d in index.corpus.hidden(principal)],
        [ids[d.name] for d in index.corpus.readable(principal)],
    )


@EXAMPLES
@given(principal=principals(), query=queries(CORPUS), k=st.integers(1, 8))
def test_http_search_never_returns_hidden_text(
    doors: Doors, principal: Principal, query: str, k: int
) -> None:
    def search(who: Principal, q: str, top: int) -> Any:
        answer = doors.get("/search", who, q=q, k=top)
        assert answer.status_code == 200, answer.text
        return answer.json()

    check_search(doors.index.corpus, principal, search, query, k, doors.index.readable_chunks(principal))


@EXAMPLES
@given(principal=principals(), query=queries(CORPUS), k=st.integers(1, 8))
def test_graph_mode_at_the_doors_never_returns_hidden_text(
    doors: Doors, principal: Principal, query: str, k: int
) -> None:
    """`mode=graph` over HTTP and through the MCP `search` tool: the graph's hits, none hidden."""

    def http(who: Principal, q: str, top: int) -> Any:
        answer = doors.get("/search", who, q=q, k=top, mode="graph")
        assert answer.status_code == 200, answer.text
        return answer.json()

    check_graph_search(doors.index.corpus, principal, http, query, k)
    mcp = check_graph_search(
        doors.index.corpus,
        principal,
        lambda who, q, top: doors.mcp(who, "search", {"query": q, "k": top, "mode": "graph"}),
        query,
        k,
    )
    assert "error" not in mcp, mcp


@EXAMPLES
@given(principal=principals(), name=entity_names(CORPUS))
def test_http_and_mcp_entity_show_only_what_readable_documents_taught(
    doors: Doors, principal: Principal, name: str
) -> None:
    """`GET /entities/{name}` and the MCP tool `entity` with a reader's token: its documents' share of
    the entity, nothing hidden; a 404 (a tool error) for an entity only hidden documents name."""

    def http(who: Principal, entity_name: str) -> Any:
        answer = doors.get(f"/entities/{quote(entity_name, safe='')}", who)
        assert answer.status_code in (200, 404), answer.text
        return answer.json() if answer.status_code == 200 else None

    def mcp(who: Principal, entity_name: str) -> Any:
        answer = doors.mcp(who, "entity", {"name": entity_name})
        if "error" in answer:
            assert "no such entity" in answer["error"], answer
            return None
        return answer

    try:
        admin: Any = doors.index.owner.entity(name)
    except NotFound:
        admin = None  # a name the extractor never took as an entity: not found at every door
    check_entity(doors.index.corpus, principal, http, admin, name)
    check_entity(doors.index.corpus, principal, mcp, admin, name)


@EXAMPLES
@given(principal=principals(), data=st.data())
def test_http_documents_answer_for_hidden_ones_as_for_missing_ones(
    doors: Doors, principal: Principal, data: st.DataObject
) -> None:
    hidden, readable = _hidden_and_readable(doors.index, principal)
    if hidden:
        document_id = data.draw(st.sampled_from(hidden))

        def answer(identifier: str) -> Any:
            got = doors.get(f"/documents/{identifier}", principal)
            return {"status": got.status_code, "body": got.json()}

        assert answers_as_missing(answer, document_id)["status"] == 404
    if readable:
        shown = doors.get(f"/documents/{data.draw(st.sampled_from(readable))}", principal)
        assert shown.status_code == 200
        assert_no_leak(doors.index.corpus, principal, shown.json(), "GET /documents")


@EXAMPLES
@given(principal=principals(), limit=st.integers(1, 4))
def test_http_lists_exactly_the_documents_the_caller_may_read(
    doors: Doors, principal: Principal, limit: int
) -> None:
    _, readable = _hidden_and_readable(doors.index, principal)
    listed = doors.get("/documents", principal)
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["total"] == len(readable)
    assert sorted(d["document_id"] for d in body["documents"]) == sorted(readable)
    assert all(d["path"] is None for d in body["documents"])
    assert_no_leak(doors.index.corpus, principal, body, "GET /documents")
    pages = [  # page by page, the same documents in the same order
        doors.get("/documents", principal, offset=start, limit=limit).json()
        for start in range(0, len(readable), limit)
    ]
    assert [d for page in pages for d in page["documents"]] == body["documents"]
    assert {page["total"] for page in pages} <= {len(readable)}
    assert doors.get("/documents", principal, state="failed").json() == {"total": 0, "documents": []}
    assert doors.get("/documents", principal, state="processed").json() == body


@EXAMPLES
@given(principal=principals(), query=queries(CORPUS), k=st.integers(1, 8))
def test_mcp_tools_never_return_hidden_text(doors: Doors, principal: Principal, query: str, k: int) -> None:
    corpus, index = doors.index.corpus, doors.index
    check_search(
        corpus,
        principal,
        lambda who, q, top: doors.mcp(who, "search", {"query": q, "k": top}),
        query,
        k,
        index.readable_chunks(principal),
    )
    hidden, readable = _hidden_and_readable(index, principal)
    listed = doors.mcp(principal, "list_documents", {})
    assert sorted(d["document_id"] for d in listed["documents"]) == sorted(readable), listed
    assert_no_leak(corpus, principal, listed, "MCP list_documents")
    for document_id in hidden[:1]:
        chunk_id = index.chunks[document_id][0]
        for tool in ("get_chunk", "get_context"):
            refused = answers_as_missing(
                lambda c, tool=tool: doors.mcp(principal, tool, {"chunk_id": c}), chunk_id
            )
            assert "error" in refused, refused


@EXAMPLES
@given(principal=principals(), query=queries(CORPUS), k=st.integers(1, 8))
def test_the_adapters_never_return_hidden_text(
    doors: Doors, principal: Principal, query: str, k: int
) -> None:
    index = doors.index
    token = doors.token(principal)
    expected = min(k, index.readable_chunks(principal))
    nodes = LlamaIndexRetriever(pipeline=index.owner, k=k, token=token).retrieve(query)
    found = [{"text": n.node.get_content(), "metadata": n.node.metadata} for n in nodes]
    assert_no_leak(index.corpus, principal, found, "LlamaIndex retriever")
    assert len(found) == expected
    documents = LangChainRetriever(pipeline=index.owner, k=k, token=token).invoke(query)
    found = [{"text": d.page_content, "metadata": d.metadata} for d in documents]
    assert_no_leak(index.corpus, principal, found, "LangChain retriever")
    assert len(found) == expected


@pytest.mark.parametrize("labels", [(), ("hr",), ("eng", "ops"), ("legal",)])
def test_the_cli_through_the_service_shows_a_reader_only_its_documents(
    doors: Doors, labels: tuple[str, ...]
) -> None:
    principal = Principal(name="reader", labels=labels)
    for query in ("Alice Johnson payroll", " ".join(d.marker for d in CORPUS.documents)):
        ran = doors.cli(principal, "search", query, "-k", "8", "--json")
        assert ran.returncode == 0, ran.stderr
        check_search(
            doors.index.corpus,
            principal,
            lambda *_, printed=ran.stdout: json.loads(printed),
            query,
            8,
            doors.index.readable_chunks(principal),
        )
    graph_query = "Alice Johnson of Acme Corporation"
    ran = doors.cli(principal, "search", graph_query, "-k", "8", "--mode", "graph", "--json")
    assert ran.returncode == 0, ran.stderr
    found = check_graph_search(
        doors.index.corpus, principal, lambda *_, printed=ran.stdout: json.loads(printed), graph_query, 8
    )
    assert bool(found["hits"]) == bool(doors.index.corpus.readable(principal))  # a readable doc names them
    admin = doors.index.owner.entity("Alice Johnson")
    shown = doors.cli(principal, "entity", "Alice", "Johnson", "--json")  # exit 1 (a 404) when hidden
    check_entity(
        doors.index.corpus,
        principal,
        lambda *_: json.loads(shown.stdout) if shown.returncode == 0 else None,
        admin,
        "Alice Johnson",
    )
    assert shown.returncode in (0, 1), shown.stderr
    if shown.returncode == 1:
        assert "no such entity" in shown.stderr
    status = doors.cli(principal, "status", "--json")
    assert status.returncode == 4, (status.returncode, status.stdout, status.stderr)  # admins only: 403
    assert "`documents` lists the documents you may read" in status.stderr
    assert_no_leak(doors.index.corpus, principal, plain(status.stdout + status.stderr), "CLI status")
    listed = doors.cli(principal, "documents", "--json")  # what status shows an admin, theirs only
    assert listed.returncode == 0, listed.stderr
    _, readable = _hidden_and_readable(doors.index, principal)
    assert sorted(d["document_id"] for d in json.loads(listed.stdout)) == sorted(readable)
    assert_no_leak(doors.index.corpus, principal, json.loads(listed.stdout), "CLI documents")
    table = doors.cli(principal, "documents", "--state", "processed")
    assert table.returncode == 0 and f"{len(readable)} document(s)" in table.stdout, table.stderr
    assert all(identifier in table.stdout for identifier in readable)


def test_a_token_with_no_labels_reads_nothing_at_any_door(doors: Doors) -> None:
    nobody = Principal(name="nobody")
    query = " ".join(d.marker for d in CORPUS.documents)
    assert doors.get("/search", nobody, q=query, k=8).json()["hits"] == []
    assert doors.mcp(nobody, "search", {"query": query, "k": 8})["hits"] == []
    named = "Alice Johnson of Acme Corporation"
    assert doors.get("/search", nobody, q=named, k=8, mode="graph").json()["hits"] == []
    assert doors.mcp(nobody, "search", {"query": named, "k": 8, "mode": "graph"})["hits"] == []
    assert doors.index.owner.entity("Alice Johnson").entity is not None  # the admin sees her
    hidden = doors.get("/entities/Alice%20Johnson", nobody)
    assert hidden.status_code == 404 and "Alice Johnson" in hidden.json()["detail"]
    assert "no such entity" in doors.mcp(nobody, "entity", {"name": "Alice Johnson"})["error"]
    token = doors.token(nobody)
    assert LlamaIndexRetriever(pipeline=doors.index.owner, k=8, token=token).retrieve(query) == []
    assert LangChainRetriever(pipeline=doors.index.owner, k=8, token=token).invoke(query) == []
