"""The LlamaIndex and LangChain retrievers search as the caller a `principal` or `token` names: their
Pipeline is scoped to it (what the caller may read is then the Pipeline's to enforce); a token that names
nobody, or both given, is refused before any search. Over a real BM25 store and the data dir's real
token store (no models: this is about the adapters' door)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from unichunk.access import OWNER, AccessDenied, Principal
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.integrations.langchain import UnichunkRetriever as LangchainRetriever
from unichunk.integrations.llama_index import UnichunkRetriever as LlamaRetriever
from unichunk.pipeline import Pipeline, Readers
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink
from unichunk.tokens import Tokens


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    monkeypatch.delenv("UNICHUNK_DATABASE_URL", raising=False)
    settings = SinkSettings(data_dir=tmp_path / "data")
    store = BM25Sink(settings, path=tmp_path / "bm25.sqlite")
    document = Document(
        text="The harbour crane lifts containers. " * 40,
        source_system="t",
        source_id="a.txt",
        metadata={"labels": ["eng"]},  # what the `eng` token below may read
    )
    store.upsert(document, ChunkingService().chunk(document, ChunkStrategy(name="sentence", chunk_size=128)))
    readers = Readers.of({"keywords": store})

    @contextmanager
    def provided() -> Iterator[Readers]:
        yield readers

    yield Pipeline(settings, readers=provided)
    store.close()


def test_both_retrievers_search_as_the_token_or_principal_they_are_given(pipeline: Pipeline) -> None:
    token, record = Tokens(pipeline.settings).create(["eng"], name="agent")
    reader = Principal(name="reader", labels=("hr",))
    cases = {
        "llama-token": LlamaRetriever(pipeline, k=2, mode="keywords", token=token),
        "llama-principal": LlamaRetriever(pipeline, k=2, mode="keywords", principal=reader),
        "llama-none": LlamaRetriever(pipeline, k=2, mode="keywords"),
        "langchain-token": LangchainRetriever(pipeline=pipeline, k=2, mode="keywords", token=token),
        "langchain-principal": LangchainRetriever(pipeline=pipeline, k=2, mode="keywords", principal=reader),
        "langchain-none": LangchainRetriever(pipeline=pipeline, k=2, mode="keywords"),
    }
    seen = {name: retriever.pipeline.principal for name, retriever in cases.items()}
    assert seen["llama-token"] == seen["langchain-token"] == Principal(name="agent", labels=("eng",))
    assert seen["llama-token"].token_id == seen["langchain-token"].token_id == record.id
    assert seen["llama-principal"] == seen["langchain-principal"] == reader
    assert seen["llama-none"] == seen["langchain-none"] == OWNER
    assert pipeline.principal == OWNER  # the caller's own Pipeline is left as it was
    assert cases["llama-token"].retrieve("crane")  # and the scoped Pipeline searches the same stores
    assert cases["langchain-token"].invoke("crane")
    assert not cases["llama-principal"].retrieve("crane")  # as an `hr` reader, who may not read it
    assert not cases["langchain-principal"].invoke("crane")
    assert "token" not in repr(cases["langchain-token"].model_dump())  # the secret is not kept


def test_a_token_that_names_nobody_is_refused_before_any_search(pipeline: Pipeline) -> None:
    token, record = Tokens(pipeline.settings).create(["eng"])
    Tokens(pipeline.settings).revoke(record.id)
    for bad in (token, "not-a-token"):
        with pytest.raises(AccessDenied, match="unknown or revoked") as llama:
            LlamaRetriever(pipeline, token=bad)
        with pytest.raises(AccessDenied, match="unknown or revoked") as langchain:
            LangchainRetriever(pipeline=pipeline, token=bad)
        for refusal in (llama, langchain):  # the error never quotes the token
            assert bad not in str(refusal.value) and bad[-12:] not in repr(refusal.value)
    with pytest.raises(TypeError, match="not both"):
        LlamaRetriever(pipeline, token=token, principal=OWNER)
