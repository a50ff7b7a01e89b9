"""Embedders: the bundled MiniLM model for real, and the OpenAI-compatible client against a real HTTP server."""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from unichunk.chunking.tokenizer import get_encoding
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.openai_http import parse_retry_after
from unichunk.sinks.vectors.base import Embedder, EmbedderError
from unichunk.sinks.vectors.embedders import make_embedder
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.openai_compatible import OpenAICompatibleEmbedder


def fake_vector(text: str, dimension: int) -> list[float]:
    """Deterministic vector for `text`: what the fake endpoint returns and the tests expect."""
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % len(digest)] / 255.0 for i in range(dimension)]


@dataclass
class FakeEmbeddingServer:
    """State of a tiny OpenAI-compatible `/v1/embeddings` endpoint running in a thread."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    # responses served first; status 0 = close the connection without answering
    scripted: list[tuple[int, dict[str, str], str]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() of each request
    default_dimension: int = 6


def _handler(state: FakeEmbeddingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(body)
            state.headers.append({k.lower(): v for k, v in self.headers.items()})
            state.arrivals.append(time.monotonic())
            if self.path != "/v1/embeddings":
                return self._send(404, {}, '{"error": "no such route"}')
            if state.scripted:
                status, headers, text = state.scripted.pop(0)
                if status == 0:
                    self.close_connection = True  # a dropped connection: no status line at all
                    return None
                return self._send(status, headers, text)
            dimension = body.get("dimensions", state.default_dimension)
            data = [
                {"object": "embedding", "index": i, "embedding": fake_vector(text, dimension)}
                for i, text in enumerate(body["input"])
            ]
            data.reverse()  # servers may answer out of order; the client must sort by index
            self._send(200, {}, json.dumps({"object": "list", "data": data, "model": body["model"]}))

        def _send(self, status: int, headers: dict[str, str], text: str) -> None:
            payload = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def embedding_server() -> Iterator[FakeEmbeddingServer]:
    state = FakeEmbeddingServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def client_for(server: FakeEmbeddingServer, **kwargs: Any) -> OpenAICompatibleEmbedder:
    kwargs.setdefault("backoff", 0.01)
    return OpenAICompatibleEmbedder(server.url, "fake-embed", **kwargs)


# --- OpenAI-compatible ------------------------------------------------------------------------------


def test_openai_embeds_in_batches_in_input_order(embedding_server: FakeEmbeddingServer) -> None:
    texts = [f"text number {i}" for i in range(5)]
    embedder = client_for(embedding_server, api_key="sk-test", dimensions=6, batch_size=2)
    try:
        vectors = embedder.embed(texts)
    finally:
        embedder.close()
    assert vectors == [fake_vector(t, 6) for t in texts]
    assert [r["input"] for r in embedding_server.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    assert all(r["model"] == "fake-embed" and r["dimensions"] == 6 for r in embedding_server.requests)
    assert embedding_server.headers[0]["authorization"] == "Bearer sk-test"


def test_openai_dimension_is_probed_once_when_not_configured(embedding_server: FakeEmbeddingServer) -> None:
    embedder = client_for(embedding_server)
    assert embedder.dimension == embedding_server.default_dimension
    assert embedder.dimension == embedding_server.default_dimension
    assert len(embedding_server.requests) == 1
    assert "dimensions" not in embedding_server.requests[0]
    assert "authorization" not in embedding_server.headers[0]
    assert embedder.embed_query("q") == fake_vector("q", embedding_server.default_dimension)


def test_openai_retries_a_429_then_succeeds(embedding_server: FakeEmbeddingServer) -> None:
    embedding_server.scripted.append((429, {"Retry-After": "0"}, '{"error": "rate limited"}'))
    embedding_server.scripted.append((503, {}, '{"error": "loading"}'))
    embedder = client_for(embedding_server, dimensions=6)
    assert embedder.embed(["a", "b"]) == [fake_vector("a", 6), fake_vector("b", 6)]
    assert len(embedding_server.requests) == 3


def test_openai_honours_retry_after_and_retries_a_dropped_connection(
    embedding_server: FakeEmbeddingServer,
) -> None:
    """The server's Retry-After wins over the (here tiny) backoff; a connection closed without an answer
    is transient too. The waits are lower bounds the client must respect, not timings of our code."""
    embedding_server.scripted.append((429, {"Retry-After": "1"}, '{"error": "slow down"}'))
    embedding_server.scripted.append((0, {}, ""))
    embedder = client_for(embedding_server, dimensions=6)
    assert embedder.embed(["a"]) == [fake_vector("a", 6)]
    assert len(embedding_server.requests) == 3
    assert embedding_server.arrivals[1] - embedding_server.arrivals[0] >= 0.95


def test_retry_after_is_read_in_both_forms() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("1.5") == 1.5
    now = 1_700_000_000.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:40 GMT", now=now) == 20.0
    for bad in (None, "", "soon", "-3", "inf", "nan"):
        assert parse_retry_after(bad) is None, bad


def test_openai_gives_up_after_max_retries(embedding_server: FakeEmbeddingServer) -> None:
    embedding_server.scripted.extend([(500, {}, '{"error": "boom"}')] * 5)
    embedder = client_for(embedding_server, dimensions=6, max_retries=2)
    with pytest.raises(EmbedderError, match=r"after 3 attempts.*HTTP 500"):
        embedder.embed(["a"])
    assert len(embedding_server.requests) == 3


def test_openai_client_error_fails_at_once_with_server_message(embedding_server: FakeEmbeddingServer) -> None:
    embedding_server.scripted.append((401, {}, '{"error": "invalid api key"}'))
    embedder = client_for(embedding_server, dimensions=6)
    with pytest.raises(EmbedderError, match=r"rejected, HTTP 401.*invalid api key"):
        embedder.embed(["a"])
    assert len(embedding_server.requests) == 1


def test_openai_unreachable_server_is_a_clear_error() -> None:
    embedder = OpenAICompatibleEmbedder(
        "http://127.0.0.1:9/v1", "m", dimensions=4, max_retries=1, backoff=0.01
    )
    with pytest.raises(EmbedderError, match=r"127\.0\.0\.1:9/v1/embeddings.*after 2 attempts.*ConnectError"):
        embedder.embed(["a"])


def test_openai_wrong_vector_size_is_rejected(embedding_server: FakeEmbeddingServer) -> None:
    embedding_server.scripted.append((200, {}, json.dumps({"data": [{"index": 0, "embedding": [0.1, 0.2]}]})))
    embedder = client_for(embedding_server, dimensions=6)
    with pytest.raises(EmbedderError, match="2-d vectors"):
        embedder.embed(["a"])


def test_openai_counts_tokens_with_cl100k() -> None:
    embedder = OpenAICompatibleEmbedder("http://127.0.0.1:9/v1", "m")
    texts = ["Hello, world!", "tokenisation of <|endoftext|> as plain text", ""]
    encoding = get_encoding("cl100k_base")
    assert embedder.count_tokens(texts) == [len(encoding.encode_ordinary(t)) for t in texts]
    assert embedder.max_tokens == 8191


# --- MiniLM ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_minilm_vectors_are_normalised_and_semantic(minilm: MiniLMEmbedder) -> None:
    cat, kitten, tax = minilm.embed(
        ["A cat sleeps on the sofa.", "A kitten naps on the couch.", "Quarterly tax filing deadlines."]
    )
    assert len(cat) == minilm.dimension == 384
    assert math.isclose(math.fsum(x * x for x in cat), 1.0, rel_tol=1e-4)

    def cosine(a: list[float], b: list[float]) -> float:
        return math.fsum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(cat, kitten) > cosine(cat, tax) + 0.3
    query = minilm.embed_query("A cat sleeps on the sofa.")
    assert cosine(query, cat) == pytest.approx(1.0, abs=1e-5)


def test_minilm_counts_word_pieces_with_special_tokens(minilm: MiniLMEmbedder) -> None:
    short, long = minilm.count_tokens(["hello world", "word " * 300])
    assert short == 4  # [CLS] hello world [SEP]
    assert long == 302
    assert minilm.max_tokens == 256
    assert minilm.embed([]) == [] and minilm.count_tokens([]) == []


# --- factory ---------------------------------------------------------------------------------------


def test_make_embedder_follows_settings(tmp_path: Any) -> None:
    default = make_embedder(SinkSettings(data_dir=tmp_path, embedder="minilm", embedding_batch_size=7))
    assert isinstance(default, MiniLMEmbedder) and default.batch_size == 7
    openai = make_embedder(
        SinkSettings(
            data_dir=tmp_path,
            embedder="openai",
            embedding_base_url="http://localhost:11434/v1/",
            embedding_model="nomic-embed-text",
            embedding_api_key="secret",
            embedding_dimensions=768,
        )
    )
    assert isinstance(openai, OpenAICompatibleEmbedder) and isinstance(openai, Embedder)
    assert openai.url == "http://localhost:11434/v1/embeddings"
    assert (openai.name, openai.dimension) == ("nomic-embed-text", 768)
    openai.close()
