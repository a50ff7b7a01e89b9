"""Entity extraction: name normalisation, spaCy NER on the real model, the LLM extractor and its parser."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unichunk.chunking.ids import make_chunk_id, sha256_hex
from unichunk.chunking.models import Chunk
from unichunk.sinks.graph.extraction import ExtractionError, SpacyExtractor, display_name, entity_key
from unichunk.sinks.graph.llm_extraction import (
    COMPLETION_DELIMITER,
    LLMExtractor,
    build_messages,
    parse_extraction_output,
)


def _chunk(text: str, index: int = 0, document_id: str = "doc_x") -> Chunk:
    return Chunk(
        chunk_id=make_chunk_id(document_id, index, text),
        document_id=document_id,
        chunk_index=index,
        content=text,
        start_char=0,
        end_char=len(text),
        token_count=len(text.split()),
        content_hash=sha256_hex(text),
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Apple Inc.", "Apple Inc"),
        ("  Apple   Inc. ", "apple inc"),
        ("APPLE\nINC", "Apple Inc"),
        ("Zoe\u0308 Müller", "Zoë Müller"),  # decomposed vs composed ë
        ("ＡＣＭＥ", "acme"),  # full-width letters
        ("Straße", "STRASSE"),  # casefold, not lower
    ],
)
def test_spellings_of_one_entity_share_a_key(a: str, b: str) -> None:
    assert entity_key(a) == entity_key(b)


@pytest.mark.parametrize(
    ("a", "b"), [("Apple", "Apple Inc"), ("O'Reilly", "OReilly"), ("C++", "C"), ("Zoë", "Zoe")]
)
def test_different_names_keep_different_keys(a: str, b: str) -> None:
    assert entity_key(a) != entity_key(b)


def test_display_name_keeps_case_and_inner_punctuation() -> None:
    assert display_name(' Zoë "Z"  Müller. ') == 'Zoë "Z" Müller'
    assert display_name("Tim O'Reilly,") == "Tim O'Reilly"
    assert display_name("a\x00b") == "a b"
    assert entity_key("...") == ""


def test_spacy_extracts_entities_and_sentence_relations() -> None:
    first = _chunk("Apple Inc. hired Tim Cook in California. The weather was nice.", 0)
    second = _chunk("Tim O'Reilly met Zoë Müller in Berlin. Zoë Müller lives in Berlin.", 1)
    extractions = SpacyExtractor().extract([first, second])

    assert [x.chunk_id for x in extractions] == [first.chunk_id, second.chunk_id]
    names = {entity_key(e.name): e for e in extractions[0].entities}
    assert {"apple inc", "tim cook", "california"} <= set(names)
    assert names["tim cook"].type == "PERSON"
    assert names["tim cook"].description == "Apple Inc. hired Tim Cook in California."
    assert all(e.chunk_id == first.chunk_id for e in extractions[0].entities)
    pairs = {(entity_key(r.source), entity_key(r.target)): r for r in extractions[0].relations}
    hired = pairs[("apple inc", "tim cook")]
    assert hired.keywords == "hire"
    assert hired.weight == 1.0
    assert hired.description == "Apple Inc. hired Tim Cook in California."

    pairs2 = {(entity_key(r.source), entity_key(r.target)): r for r in extractions[1].relations}
    # Zoë Müller and Berlin co-occur in both sentences of the second chunk.
    assert pairs2[("berlin", "zoë müller")].weight == 2.0
    assert all(r.chunk_id == second.chunk_id for r in extractions[1].relations)


def test_spacy_unknown_model_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="not installed"):
        SpacyExtractor(model="no_such_model_xyz").extract([_chunk("Apple hired Tim Cook.")])


MESSY = f"""Sure! Here is the output:
("entity"<|>"Apple Inc."<|>"organization"<|>"Apple Inc. makes phones.")##
(entity<|>Tim Cook<|>person<|>Tim Cook leads Apple; he said "hi"
over two lines.)
##
("entity"<|#|>O'Reilly Media<|#|>ORGANIZATION<|#|>A publisher.)
("entity"<|>  <|>person<|>nameless)
("entity"<|>Broken only two)
garbage line with no delimiters
("relationship"<|>Tim Cook<|>Apple Inc<|>Tim Cook is the CEO of Apple.<|>leadership, employment<|>9)##
("relationship"<|>Tim Cook<|>Apple Inc.<|>Again the same pair.<|>ceo<|>1)
("relationship"<|>Tim Cook<|>Tim Cook<|>self loop<|>x<|>3)
("relationship"<|>O'Reilly Media<|>Apple Inc<|>Both are companies.<|>industry<|>strong)
("content_keywords"<|>technology, leadership)
{COMPLETION_DELIMITER}
("entity"<|>After The End<|>person<|>trailing text after completion)"""


def test_parser_keeps_good_records_and_skips_bad_ones(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="unichunk.sinks.graph.llm_extraction"):
        extraction = parse_extraction_output(MESSY, "c1")
    entities = {entity_key(e.name): e for e in extraction.entities}
    assert set(entities) == {"apple inc", "tim cook", "o'reilly media"}  # not "after the end"
    assert entities["apple inc"].name == "Apple Inc"
    assert entities["apple inc"].type == "ORGANIZATION"
    assert entities["apple inc"].description == "Apple Inc. makes phones."
    assert entities["tim cook"].description == 'Tim Cook leads Apple; he said "hi"\nover two lines.'
    assert entities["o'reilly media"].description == "A publisher."
    relations = {tuple(sorted((entity_key(r.source), entity_key(r.target)))): r for r in extraction.relations}
    assert set(relations) == {("apple inc", "tim cook"), ("apple inc", "o'reilly media")}
    assert relations[("apple inc", "tim cook")].weight == 10.0  # 9 + 1: one relation per pair
    assert relations[("apple inc", "tim cook")].keywords == "leadership, employment"
    assert relations[("apple inc", "o'reilly media")].weight == 1.0  # unparseable strength
    assert all(x.chunk_id == "c1" for x in extraction.entities + extraction.relations)
    skipped = [r.getMessage() for r in caplog.records]
    assert any("garbage line" in m for m in skipped)
    assert any("Broken only two" in m for m in skipped)
    assert any("self loop" in m for m in skipped)
    assert not any("trailing text" in m for m in skipped)  # after the end marker: ignored


@pytest.mark.parametrize("text", ["", "no records at all", "<|COMPLETE|>", "(((", '("entity"<|>', "##\n##"])
def test_parser_never_raises_on_junk(text: str) -> None:
    assert parse_extraction_output(text, "c").entities == ()


def test_prompt_describes_the_delimiter_format() -> None:
    system, user = build_messages("Some text.")
    assert '("entity"<|>' in system["content"] and '("relationship"<|>' in system["content"]
    assert COMPLETION_DELIMITER in system["content"] and "##" in system["content"]
    assert user["content"].startswith("Text:\nSome text.")


class _ChatServer:
    """A real HTTP server on loopback answering /v1/chat/completions with a canned reply."""

    def __init__(self, reply: str, status: int = 200) -> None:
        self.requests: list[dict] = []
        self.arrivals: list[float] = []  # time.monotonic() of each request
        # (status, headers) answered first; status 0 = close the connection without answering
        self.scripted: list[tuple[int, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                outer.arrivals.append(time.monotonic())
                code, headers = outer.scripted.pop(0) if outer.scripted else (status, {})
                if code == 0:
                    self.close_connection = True
                    return
                payload = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]}
                ).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat_server() -> Iterator[_ChatServer]:
    server = _ChatServer(MESSY)
    yield server
    server.close()


def test_llm_extractor_calls_the_chat_api_per_chunk(chat_server: _ChatServer) -> None:
    chunks = [_chunk("Tim Cook runs Apple.", 0), _chunk("O'Reilly publishes books.", 1)]
    extractor = LLMExtractor(chat_server.base_url, "test-model", "sk-test", max_concurrency=2)
    extractions = extractor.extract(chunks)
    extractor.close()

    assert [x.chunk_id for x in extractions] == [c.chunk_id for c in chunks]
    assert {entity_key(e.name) for e in extractions[1].entities} == {
        "apple inc",
        "tim cook",
        "o'reilly media",
    }
    assert len(chat_server.requests) == 2
    request = chat_server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "test-model"
    sent_texts = sorted(r["body"]["messages"][1]["content"] for r in chat_server.requests)
    assert "Tim Cook runs Apple." in sent_texts[1] or "Tim Cook runs Apple." in sent_texts[0]


def test_llm_http_failure_raises_extraction_error() -> None:
    server = _ChatServer("unused", status=500)
    try:
        extractor = LLMExtractor(server.base_url, "m", retries=1, backoff=0.01)
        with pytest.raises(ExtractionError, match=r"after 2 attempts.*HTTP 500"):
            extractor.extract([_chunk("Tim Cook runs Apple.")])
        assert len(server.requests) == 2  # one retry of a 5xx
    finally:
        server.close()


def test_llm_extractor_retries_like_the_embedder(chat_server: _ChatServer) -> None:
    """One retry policy for both OpenAI-compatible clients: Retry-After honoured, a dropped connection and
    a 503 retried, then the answer parsed. (The extractor's own loop ignored Retry-After and gave up on a
    dropped connection.) The wait is a lower bound the client must respect, not a timing of our code."""
    chat_server.scripted += [(429, {"Retry-After": "1"}), (0, {}), (503, {})]
    extractor = LLMExtractor(chat_server.base_url, "m", retries=3, backoff=0.01)
    try:
        (extraction,) = extractor.extract([_chunk("Tim Cook runs Apple.")])
    finally:
        extractor.close()
    assert len(chat_server.requests) == 4
    assert chat_server.arrivals[1] - chat_server.arrivals[0] >= 0.95
    assert {entity_key(e.name) for e in extraction.entities} >= {"tim cook"}


def test_llm_client_error_fails_at_once(chat_server: _ChatServer) -> None:
    chat_server.scripted.append((401, {}))
    extractor = LLMExtractor(chat_server.base_url, "m", retries=3, backoff=0.01)
    try:
        with pytest.raises(ExtractionError, match="HTTP 401"):
            extractor.extract([_chunk("Tim Cook runs Apple.")])
    finally:
        extractor.close()
    assert len(chat_server.requests) == 1


@given(st.text(max_size=40))
@settings(max_examples=400, deadline=None)
def test_entity_keys_never_start_or_end_with_a_space(name: str) -> None:
    """FalkorDB 4.16 crashes on a unique-constraint MERGE whose value starts or ends with a space; NFKC turns
    some characters (U+00B4, U+02D8..U+02DD, U+203E) into a space and a combining mark."""
    key = entity_key(name)
    assert key == key.strip() and "  " not in key


@pytest.mark.parametrize("mark", ["\u00a8", "\u00af", "\u00b4", "\u00b8", "\u02d8", "\u02dd", "\u203e"])
def test_a_spacing_mark_after_a_name_keeps_one_key(mark: str) -> None:
    assert entity_key(f"Reilly{mark}") == entity_key(f"Reilly {mark}") == entity_key(f"Reilly{mark}").strip()


def test_a_key_ending_in_a_spacing_mark_merges_on_the_real_graph(graph_backend) -> None:  # type: ignore[no-untyped-def]
    """The name that took down the test server: stored once, read back, no crash."""
    graph_backend.setup_schema()
    key = entity_key("Reilly\u00b4")
    graph_backend.run("MERGE (e:Entity {name: $name})", {"name": key})
    graph_backend.run("MERGE (e:Entity {name: $name})", {"name": key})
    assert graph_backend.run("MATCH (e:Entity) RETURN count(e) AS n", write=False) == [{"n": 1}]
