"""The README's Python blocks run as written: a user who copies them gets what they say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Use it from Python, LlamaIndex, LangChain or an agent"


def _blocks() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_has_the_python_llama_index_and_langchain_blocks() -> None:
    blocks = _blocks()
    assert len(blocks) == 3
    assert "from unichunk import Pipeline" in blocks[0]
    assert "unichunk.integrations.llama_index" in blocks[1]
    assert "unichunk.integrations.langchain" in blocks[2]


def test_the_readme_blocks_run(pipeline_env: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(REPO)  # the blocks name the sample corpus relative to the checkout
    namespace: dict[str, object] = {}
    try:
        for block in _blocks():
            exec(compile(block, "README.md", "exec"), namespace)
    finally:
        pipeline = namespace.get("p")
        if pipeline is not None:
            pipeline.close()  # type: ignore[attr-defined]
    printed = re.search(r"^(doc_\S+) (\d+) (\d+) ", capsys.readouterr().out, re.M)
    assert printed is not None and int(printed[2]) < int(printed[3])
    assert len(namespace["nodes"]) >= 1  # type: ignore[arg-type]
    assert len(namespace["nodes_with_scores"]) == 3  # type: ignore[arg-type]
    documents = namespace["documents"]
    assert [d.metadata["chunk_id"] for d in documents] == [
        n.node.node_id for n in namespace["nodes_with_scores"]
    ]  # type: ignore[attr-defined]
