"""`unichunk mcp` as an agent meets it: the real console command started over stdio by the SDK's own client,
on a fresh data dir, the session's FalkorDB and Prefect server. One server process for the whole story (the
embedding model takes ~15 s to load): list the tools, ingest a corpus, search with exact offsets, read a
chunk, its context and the documents resources, and be refused (one line, `isError`) for paths outside the
roots, a `../` escape, a symlink out, an unknown chunk and a bad argument, the server answering after each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextResourceContents

from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import default_source_name
from unichunk.retrieval.context import CHUNK_BOUNDARY

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"search", "get_chunk", "get_context", "entity", "ingest", "status", "list_documents"}
HANDBOOK = "# Handbook\n\n" + "\n\n".join(
    f"## Part {i}\n\n"
    + f"Part {i} tells of the {animal} that live by the river, what they eat and where they sleep. " * 3
    for i, animal in enumerate(["otters", "herons", "lynxes", "badgers", "falcons"])
)
CORPUS = {
    "guide.md": "# Guide\n\nQdrant stores vectors for semantic search.\n\n## Setup\n\nInstall Prefect and run the flow.\n",
    "notes/plain.txt": "BM25 ranks chunks by keyword overlap. Alice maintains the keyword index in Berlin.\n",
    "handbook.md": HANDBOOK,
}


# A file named with a Latin-1 byte (not UTF-8): the MCP `ingest` tool stored nothing while it was there.
LATIN1_NAME = b"caf\xe9.txt"
STORED = len(CORPUS) + 1  # the corpus and the Latin-1 named file


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _data(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    text = result.content[0].text  # type: ignore[union-attr]
    assert "\n" not in text and "Traceback" not in text, text
    return text


def _json(contents: Any) -> Any:
    [content] = contents.contents
    assert isinstance(content, TextResourceContents)
    return json.loads(content.text)


def test_mcp_help_names_the_transports() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "unichunk.deployments.cli.main", "mcp", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "--http" in done.stdout and "--port" in done.stdout and "MCP" in done.stdout


def test_an_agent_ingests_searches_reads_and_is_kept_inside_the_roots(
    pipeline_env: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    corpus = _write(root / "corpus", CORPUS)
    (Path(os.fsdecode(os.path.join(os.fsencode(corpus), LATIN1_NAME)))).write_bytes(b"Cafe opening hours.\n")
    outside = _write(tmp_path / "outside", {"secret.md": "# Secret\n\nThe vault code is 1234.\n"})
    (root / "escape").symlink_to(outside, target_is_directory=True)
    env = {**os.environ, "UNICHUNK_MCP_ROOTS": json.dumps([str(root)])}
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "unichunk.deployments.cli.main", "mcp"], env=env, cwd=str(REPO)
    )
    log = tmp_path / "server.log"
    try:
        with log.open("w", encoding="utf-8") as errlog:
            anyio.run(_agent_session, server, errlog, corpus, outside)
    except BaseException:
        sys.stderr.write(log.read_text(encoding="utf-8")[-5000:])
        raise


async def _agent_session(server: StdioServerParameters, errlog: Any, corpus: Path, outside: Path) -> None:
    stray: list[Exception] = []  # anything on stdout that is not protocol arrives here

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            stray.append(message)

    with anyio.fail_after(300):
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            await session.initialize()
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == TOOLS
            assert all(tool.output_schema for tool in tools.values())
            assert tools["search"].input_schema["properties"]["k"]["maximum"] == 50

            await _ingest_and_read(session, corpus)
            await _refusals(session, corpus, outside)

            status = _data(await session.call_tool("status", {}))
            assert status["counts"]["processed"] == STORED and status["documents"] == []
            again = _data(await session.call_tool("search", {"query": "Alice", "k": 1, "mode": "keywords"}))
            assert again["hits"][0]["source_id"] == "notes/plain.txt"
    assert stray == []


async def _ingest_and_read(session: ClientSession, corpus: Path) -> None:
    summary = _data(await session.call_tool("ingest", {"path": str(corpus)}))
    assert (summary["listed"], summary["processed"], summary["failed"]) == (STORED, STORED, [])

    found = _data(await session.call_tool("search", {"query": "who maintains the keyword index", "k": 3}))
    top = found["hits"][0]
    source = default_source_name(corpus)
    assert (top["source_system"], top["source_id"]) == (source, "notes/plain.txt")
    assert top["document_id"] == derive_document_id(source_system=source, source_id="notes/plain.txt")
    assert CORPUS["notes/plain.txt"][top["start_char"] : top["end_char"]] == top["content"]
    assert top["content"] in top["context"] and top["context_in"] is None
    hits = {hit["chunk_id"]: hit for hit in found["hits"]}
    passages = found["passages"]
    assert passages and passages[0]["chunk_id"] == top["chunk_id"]
    for passage in passages:  # stretches of the hits, at exact document offsets, best first
        hit = hits[passage["chunk_id"]]
        at, end = passage["start_char"] - hit["start_char"], passage["end_char"] - hit["start_char"]
        assert 0 <= at < end <= len(hit["content"]) and hit["content"][at:end] == passage["text"]
    assert [p["score"] for p in passages] == sorted((p["score"] for p in passages), reverse=True)

    chunk = _data(await session.call_tool("get_chunk", {"chunk_id": top["chunk_id"]}))
    assert (chunk["content"], chunk["start_char"], chunk["end_char"]) == (
        top["content"],
        top["start_char"],
        top["end_char"],
    )
    assert chunk["source_id"] == "notes/plain.txt"

    badgers = _data(await session.call_tool("search", {"query": "badgers", "k": 1, "mode": "keywords"}))
    hit = badgers["hits"][0]
    assert hit["source_id"] == "handbook.md" and "badgers" in hit["content"]
    around = _data(await session.call_tool("get_context", {"chunk_id": hit["chunk_id"], "radius": 1}))
    pieces = around["chunks"]
    assert [p["chunk_index"] for p in pieces] == [pieces[0]["chunk_index"] + i for i in range(3)]
    assert hit["chunk_id"] == pieces[1]["chunk_id"]
    assert around["text"].split(CHUNK_BOUNDARY) == [HANDBOOK[p["start_char"] : p["end_char"]] for p in pieces]
    assert (around["start_char"], around["end_char"]) == (pieces[0]["start_char"], pieces[-1]["end_char"])

    documents = _json(await session.read_resource("unichunk://documents"))
    by_source = {d["source_id"]: d for d in documents}
    assert set(by_source) == {*CORPUS, "caf\\xe9.txt"}  # its byte stored as `\xe9` (docs/usage.md)
    assert all(d["state"] == "processed" and d["chunk_count"] >= 1 for d in documents)
    listed = _data(await session.call_tool("list_documents", {}))
    assert listed["total"] == len(documents) and [d["document_id"] for d in listed["documents"]] == [
        d["document_id"] for d in documents
    ]  # the tool, for any caller, lists what the resource lists for the server's own
    assert _data(await session.call_tool("list_documents", {"state": "failed"})) == {
        "total": 0,
        "documents": [],
    }
    assert "invalid state" in _error(await session.call_tool("list_documents", {"state": "lost"}))
    second = _data(await session.call_tool("list_documents", {"offset": 1, "limit": 1}))
    assert second["total"] == len(documents) and second["documents"] == listed["documents"][1:2]
    handbook = _json(await session.read_resource(f"unichunk://documents/{hit['document_id']}"))
    assert len(handbook["chunks"]) == by_source["handbook.md"]["chunk_count"] > 3
    assert all(HANDBOOK[c["start_char"] : c["end_char"]] == c["content"] for c in handbook["chunks"])


async def _refusals(session: ClientSession, corpus: Path, outside: Path) -> None:
    root = corpus.parent
    refused = {
        "/etc/passwd": "outside the allowed roots",
        str(outside / "secret.md"): "outside the allowed roots",
        f"{corpus}/../../outside/secret.md": "must not contain '..'",
        "corpus/../escape/secret.md": "must not contain '..'",
        str(root / "escape" / "secret.md"): "outside the allowed roots",  # a symlink out of the root
        "escape": "outside the allowed roots",
        "corpus/missing.md": "no such file or directory",
        "corpus/bad\x00name.md": "control characters",
    }
    for path, reason in refused.items():
        assert reason in _error(await session.call_tool("ingest", {"path": path})), path
    assert "invalid source_name" in _error(
        await session.call_tool("ingest", {"path": str(corpus), "source_name": "../x"})
    )
    assert "no such chunk" in _error(await session.call_tool("get_chunk", {"chunk_id": "doc_x::chunk::0::0"}))
    assert "invalid k" in _error(await session.call_tool("search", {"query": "x", "k": 500}))
    # a blank query is refused as the API (422) and the CLI (exit 2) refuse it: one rule, one text
    assert "the query is blank" in _error(await session.call_tool("search", {"query": " \t\n "}))
    assert "invalid query" in _error(await session.call_tool("search", {"query": ""}))
    assert "invalid radius" in _error(await session.call_tool("get_context", {"chunk_id": "a", "radius": 9}))
    with pytest.raises(MCPError) as unknown:
        await session.read_resource("unichunk://documents/doc_0000000000000000")
    assert "no such document" in unknown.value.error.message
    # nothing from outside reached the index
    status = _data(await session.call_tool("status", {"failed_only": True}))
    assert status["documents"] == [] and status["counts"]["processed"] == STORED
