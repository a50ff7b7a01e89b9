"""The service's `/ui`: the browser login (a cookie checked by the API's own token check), the pages with
and without a token, and the escaping of hostile documents and queries (Hypothesis: whatever a document or
a query holds, no markup of it reaches the page as markup). The real-browser test is
`test_service_ui_browser.py`."""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.html_checks import parse_html
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.models import Document
from unichunk.chunking.service import ChunkingService
from unichunk.deployments.service import ui_pages
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.results import (
    ChunkRecord,
    DocumentChunks,
    DocumentInfo,
    GraphResult,
    SearchHit,
    SearchResult,
)
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import BM25Sink

TOKEN = "s3cret-token"
DOC = Document(text="The harbour crane lifts containers. " * 40, source_system="t", source_id="port.txt")


def _app(tmp_path: Path, token: str | None) -> tuple[TestClient, BM25Sink]:
    store = BM25Sink(SinkSettings(data_dir=tmp_path), path=tmp_path / "bm25.sqlite")
    store.upsert(DOC, ChunkingService().chunk(DOC, ChunkStrategy(name="sentence", chunk_size=128)))
    app = create_app(
        ServiceSettings(webhook_secret="w", api_token=token),
        PrefectEventSink("http://127.0.0.1:9/api", timeout=2),
        search_sinks=lambda: {"keywords": store},
        data_dir=tmp_path,
    )
    return TestClient(app, follow_redirects=False), store


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    test_client, store = _app(tmp_path, TOKEN)
    with test_client:
        yield test_client
    store.close()


def test_login_sets_a_strict_http_only_cookie_and_the_pages_follow(
    client: TestClient, tmp_path: Path
) -> None:
    refused = client.get("/ui/evaluation")
    assert refused.status_code == 303 and refused.headers["location"] == "/ui/login?next=%2Fui%2Fevaluation"
    form = client.get("/ui/login", params={"next": "/ui/evaluation"})
    assert form.status_code == 200 and 'name="token"' in form.text
    wrong = client.post("/ui/login", data={"token": "wrong", "next": "/ui/evaluation"})
    assert wrong.status_code == 401 and "not accepted" in wrong.text and "set-cookie" not in wrong.headers
    right = client.post("/ui/login", data={"token": TOKEN, "next": "/ui/evaluation"})
    assert right.status_code == 303 and right.headers["location"] == "/ui/evaluation"
    cookie = right.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    page = client.get("/ui/evaluation")  # the client keeps the cookie, as a browser does
    assert page.status_code == 200 and "No evaluation yet" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    # the cookie opens the pages, not the data API (that takes the bearer header only)
    assert client.get("/search", params={"q": "crane"}).status_code == 401
    # no redirect to another site after login
    away = client.post("/ui/login", data={"token": TOKEN, "next": "//evil.example/x"})
    assert away.headers["location"] == "/ui"
    client.post("/ui/logout")
    assert client.get("/ui").status_code == 303


def test_the_latest_evaluation_is_rendered_and_a_broken_one_is_said(
    client: TestClient, tmp_path: Path
) -> None:
    client.post("/ui/login", data={"token": TOKEN})
    folder = tmp_path / "evaluations"
    folder.mkdir()
    from tests.unichunk.test_unichunk_eval_report_html import two_generations

    (folder / "latest.json").write_text(json.dumps(two_generations()))
    page = client.get("/ui/evaluation")
    assert page.status_code == 200 and "Gate refused" in page.text and "<svg" in page.text
    parse_html(page.text)
    (folder / "latest.json").write_text("{not json")
    assert "cannot be read" in client.get("/ui/evaluation").text


def test_search_page_lists_hits_linking_to_the_highlighted_span(client: TestClient) -> None:
    client.post("/ui/login", data={"token": TOKEN})
    page = client.get("/ui", params={"q": "harbour crane"})
    assert page.status_code == 200
    parsed = parse_html(page.text)
    links = [a["href"] for a in parsed.attrs("a") if "hit-link" in (a.get("class") or "")]
    assert links and all(re.match(r"/ui/documents/[^?]+\?start=\d+&end=\d+&chunk=.+#hit$", h) for h in links)
    assert not parsed.external_refs()
    # the static assets the page names are the service's own
    assert client.get("/ui/static/ui.js").status_code == 200
    assert client.get("/ui/static/ui.css").status_code == 200
    assert client.get("/ui/static/..%2Fui.py").status_code == 404


def test_the_search_page_offers_every_mode_and_searches_in_the_one_chosen(client: TestClient) -> None:
    client.post("/ui/login", data={"token": TOKEN})
    page = client.get("/ui", params={"q": "harbour crane", "mode": "keywords"})
    assert page.status_code == 200
    parsed = parse_html(page.text)
    options = [o.get("value") for o in parsed.attrs("option")]
    assert options == ["hybrid", "keywords", "vectors", "graph"]  # every mode `GET /search` has
    assert [o.get("value") for o in parsed.attrs("option") if "selected" in o] == ["keywords"]
    summary = re.search(r'<p class="muted" id="summary">([^<]*)</p>', page.text)
    assert summary and summary.group(1).endswith("· keywords"), summary
    assert 'class="hit"' in page.text


def test_a_bad_page_parameter_is_said_on_a_page_not_answered_with_json(client: TestClient) -> None:
    """A person types URLs: `k=abc` or a mode that does not exist get the page (with its navigation),
    never FastAPI's JSON 422 (the document page's `start=x`: `test_service_ui_browser.py`)."""
    client.post("/ui/login", data={"token": TOKEN})
    typed = client.get("/ui", params={"q": "harbour crane", "k": "abc", "mode": "keywords"})
    assert typed.status_code == 200 and 'class="hit"' in typed.text  # `k` left at its default
    no_mode = client.get("/ui", params={"q": "harbour crane", "mode": "semantic"})
    assert no_mode.status_code == 422 and no_mode.headers["content-type"].startswith("text/html")
    assert "no search mode &#x27;semantic&#x27;: one of hybrid, keywords, vectors, graph" in no_mode.text
    no_state = client.get("/ui/documents", params={"state": "lost", "offset": "x"})
    assert no_state.status_code == 422 and no_state.headers["content-type"].startswith("text/html")
    assert (
        "no document state &#x27;lost&#x27;: one of pending, processing, processed, failed" in no_state.text
    )
    empty = client.get("/ui/documents", params={"state": "failed", "offset": "-3"})
    assert empty.status_code == 200 and "No documents." in empty.text and "<nav>" in empty.text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    k=st.text(max_size=12) | st.integers(-(10**6), 10**6).map(str),
    mode=st.text(max_size=20) | st.sampled_from(["hybrid", "keywords", "<b>graph</b>"]),
)
def test_whatever_k_and_mode_a_url_holds_the_answer_is_a_page(client: TestClient, k: str, mode: str) -> None:
    """Any `k` and `mode` typed into the search URL: the search page (200, or 422 naming the mode), HTML
    with its navigation, the mode escaped; never JSON, never a server error."""
    client.post("/ui/login", data={"token": TOKEN})
    page = client.get("/ui", params={"q": "harbour crane", "k": k, "mode": mode})
    assert page.status_code in (200, 422), page.text
    assert page.headers["content-type"].startswith("text/html") and "<nav>" in page.text
    assert (page.status_code == 200) == (mode in ("hybrid", "keywords", "vectors", "graph"))
    assert "<b>graph</b>" not in page.text
    parse_html(page.text)


def test_a_reader_is_told_on_a_page_that_the_evaluation_is_for_admins(tmp_path: Path) -> None:
    from unichunk.tokens import Tokens

    test_client, store = _app(tmp_path, TOKEN)
    reader, _ = Tokens(SinkSettings(data_dir=tmp_path)).create(["eng"], name="reader")
    with test_client:
        login = test_client.get("/ui/login")
        assert "unichunk tokens create" in login.text  # a reader's token is not UNICHUNK_API_TOKEN
        test_client.post("/ui/login", data={"token": reader})
        page = test_client.get("/ui/evaluation")
        assert page.status_code == 403 and page.headers["content-type"].startswith("text/html")
        assert "for admin tokens" in page.text and '<nav><a href="/ui">Search</a>' in page.text
        parse_html(page.text)
        # the reader's token revoked while its cookie is kept: the next page says the token was refused
        Tokens(SinkSettings(data_dir=tmp_path)).revoke("reader")
        gone = test_client.get("/ui", params={"q": "crane"})
        assert gone.status_code == 303 and gone.headers["location"].endswith("&failed=1")
        again = test_client.get(gone.headers["location"])
        assert again.status_code == 401 and "not accepted" in again.text
    store.close()


def test_opening_the_login_form_is_not_counted_as_a_refusal(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The form is where a browser without a token goes: no `access denied` line (nor count) for it,
    which every visit once logged as `GET /ui/login reason=missing_token`; the refused page before it,
    and a wrong token sent from it, still are."""
    with caplog.at_level(logging.WARNING, logger="unichunk.deployments.service.auth"):
        assert client.get("/ui/login").status_code == 200
        assert not [r for r in caplog.records if "access denied" in r.getMessage()]
        assert client.get("/ui").status_code == 303
        assert client.post("/ui/login", data={"token": "wrong"}).status_code == 401
    refusals = [r.getMessage() for r in caplog.records if "access denied" in r.getMessage()]
    assert [m.split(" reason=")[1].split()[0] for m in refusals] == ["missing_token", "bad_token"], refusals


def test_without_a_token_there_is_no_login(tmp_path: Path) -> None:
    test_client, store = _app(tmp_path, None)
    with test_client:
        assert test_client.get("/ui").status_code == 200
        assert test_client.get("/ui/login").status_code == 303
        assert test_client.get("/docs").status_code == 200
    store.close()


# --- hostile text -----------------------------------------------------------------------------------------

hostile = st.text(st.characters(blacklist_categories=["Cs"]), max_size=120) | st.sampled_from(
    [
        "<script>alert(1)</script>",
        "</pre><script>alert(1)</script>",
        '"><img src=x onerror=alert(1)>',
        "</mark></span><script src=//evil.example/x.js></script>",
        "<!-- -->--><svg onload=alert(1)>",
        "javascript:alert(1)",
    ]
)


def _document(text: str, headings: list[str]) -> DocumentChunks:
    """Two overlapping chunks over `text` with the given heading chain."""
    half = len(text) // 2
    chunks = [
        ChunkRecord(chunk_id="c0", document_id=text[:20] or "d", chunk_index=0, start_char=0,
                    end_char=max(half + 5, 0) if len(text) > half + 5 else len(text),
                    content=text[: half + 5], heading_chain=headings),
        ChunkRecord(chunk_id="c1", document_id=text[:20] or "d", chunk_index=1, start_char=half,
                    end_char=len(text), content=text[half:], heading_chain=headings),
    ]  # fmt: skip
    info = DocumentInfo(
        document_id=text[:30] or "d", path=text[:40], state="processed", chunk_count=2, updated_at=""
    )
    return DocumentChunks(document=info, chunks=chunks)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile, query=hostile, heading=hostile, entity=hostile, start=st.integers(-5, 200))
@example(
    text="<script>alert(1)</script>" * 3, query="<script>", heading="</div><script>", entity="<b>", start=3
)
def test_no_document_or_query_text_escapes_into_markup(
    text: str, query: str, heading: str, entity: str, start: int
) -> None:
    document = _document(text, [heading])
    graph = GraphResult.model_validate(
        {
            "entities": [{"name": entity, "key": entity, "type": entity, "description": entity}],
            "relations": [
                {"source": entity, "target": heading, "keywords": query, "description": "",
                 "weight": 1.0, "source_chunk_ids": ["c0"]}
            ],
        }
    )  # fmt: skip
    pages = [
        ui_pages.document_page(document, {"c0": graph}, (start, start + 7), graph_error=query or None),
        ui_pages.document_page(document, None, None),
    ]
    hit = SearchHit(
        rank=1, chunk_id=query or "c", document_id=text[:20] or "d", title=heading, start_char=0,
        end_char=len(text), score=0.5, ranks={"keywords": 1}, heading_chain=[heading], content=text,
    )  # fmt: skip
    pages.append(ui_pages.search_page(query, SearchResult(query=query, k=1, route="keywords", hits=[hit])))
    pages.append(ui_pages.search_page(query, None, error=query))
    pages.append(ui_pages.login_page(query, failed=True))
    listed = DocumentInfo(
        document_id=query or "d", source_system=heading, source_id=text, state="failed", chunk_count=start % 3,
        error=entity or "e", updated_at=query,
    )  # fmt: skip
    pages.append(ui_pages.documents_page([listed], state=query, states=[heading], total=start, offset=0))
    pages.append(ui_pages.documents_page([], state=query, error=text))
    for page in pages:
        parsed = parse_html(page)
        # the one script is the service's own, loaded from it; none is inline, none came from content
        assert [a.get("src") for a in parsed.attrs("script")] == ["/ui/static/ui.js"]
        assert parsed.scripts == [""]
        assert not parsed.external_refs()
        assert len(re.findall(r"<script", page, re.IGNORECASE)) == 1
        assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs)
    # the document's text is all there, character for character, in the text layer of the view
    laid = "".join(
        html.unescape(m)
        for m in re.findall(r'<span class="seg [^"]*" data-chunks="[^"]*">(.*?)</span>', pages[1], re.S)
    )
    assert laid == text


def test_overlaps_and_boundaries_are_marked() -> None:
    text = "Alpha beta gamma delta epsilon zeta eta theta."
    page = ui_pages.document_page(_document(text, ["Greek"]), None, (6, 10))
    parsed = parse_html(page)
    overlap = [a for a in parsed.attrs("span") if "overlap" in (a.get("class") or "") and "data-chunks" in a]
    assert len(overlap) == 1 and overlap[0]["data-chunks"] == "0 1"
    assert [
        a["data-chunk"] for a in parsed.attrs("span") if a.get("class") == "boundary" and "data-chunk" in a
    ] == ["0", "1"]
    assert [a for a in parsed.attrs("mark") if a.get("id") == "hit"]
    assert "beta" in page.split('id="hit"')[1].split("</mark>")[0]
