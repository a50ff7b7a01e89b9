"""`/ui` and `/docs` in a real browser: Debian's Chromium driven by playwright (`executable_path`: playwright
downloads no browser), against the service over a real index (ingested through `Pipeline`, the graph in
a real FalkorDB). Every request the browser makes to anything but the service is refused and recorded:
the pages must work with the network off. Screenshots go to the test's folder and must not be blank.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.servers import serving
from tests.unichunk.test_unichunk_eval_report_html import two_generations
from unichunk.chunking.config import ChunkStrategy
from unichunk.deployments.service.webhook import PrefectEventSink, create_app
from unichunk.deployments.settings import ServiceSettings
from unichunk.pipeline import Pipeline

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "browser-s3cret"
HARBOUR = """# Harbour operations

## Cranes

The harbour crane lifts containers from the ships onto the quay. Each crane is inspected every morning by
the shift lead, who logs its hours and any fault. Alice Moreau maintains the crane schedule for the north
quay in Rotterdam.

The gantry cranes run on rails along the quay. They move slowly when loaded, and the operator watches the
wind gauge: above fifty kilometres an hour the cranes stop.

## Storage

Containers wait in the yard until a truck collects them. The yard planner assigns each container a slot
by destination, so trucks for the same city queue together. Refrigerated containers are plugged into
power points in row R, which Bruno Lindqvist inspects on Fridays.
"""
BIRDS = "Cranes fly south over the marshes in winter. The birds rest in Hornborga in April.\n" * 3


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (.ci/setup installs it)")
    # pipeline_env is function-scoped; this module's one index is built with the same fixtures by hand
    data_dir: Path = request.getfixturevalue("ui_index")
    app = create_app(
        ServiceSettings(webhook_secret="w", api_token=TOKEN),
        PrefectEventSink(request.getfixturevalue("prefect_api_url")),
        data_dir=data_dir,
    )
    with serving(app) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def ui_index(
    tmp_path_factory: pytest.TempPathFactory, falkordb_url: str, prefect_api_url: str
) -> Iterator[Path]:
    import os
    import uuid

    from unichunk.sinks.pool import close_all_sinks

    data_dir = tmp_path_factory.mktemp("ui") / "data"
    corpus = data_dir.parent / "corpus"
    corpus.mkdir()
    (corpus / "harbour.md").write_text(HARBOUR)
    (corpus / "birds.txt").write_text(BIRDS)
    (corpus / "scan.pdf").write_bytes(
        b"a scan that never became a PDF"
    )  # listed failed on the Documents page
    saved = {
        k: os.environ.get(k) for k in ("UNICHUNK_DATA_DIR", "UNICHUNK_FALKORDB_URL", "UNICHUNK_GRAPH_NAME")
    }
    os.environ.update(
        UNICHUNK_DATA_DIR=str(data_dir),
        UNICHUNK_FALKORDB_URL=falkordb_url,
        UNICHUNK_GRAPH_NAME=f"test_{uuid.uuid4().hex[:12]}",
    )
    try:
        # fixed windows with an overlap: the view must draw overlapping chunks
        with Pipeline(strategy=ChunkStrategy(name="fixed_chars", chunk_size=200, chunk_overlap=40)) as p:
            done = p.ingest(corpus)
            assert [f.source_id for f in done.failed] == ["scan.pdf"], done
        (data_dir / "evaluations").mkdir()
        (data_dir / "evaluations" / "latest.json").write_text(json.dumps(two_generations()))
        yield data_dir
    finally:
        close_all_sinks()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _not_blank(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 20, f"{path.name} looks blank"


def test_login_search_open_a_hit_and_the_report_and_docs_offline(service: str, tmp_path: Path) -> None:
    host = urlsplit(service).netloc
    refused: list[str] = []
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 900})

        def only_the_service(route, req) -> None:  # type: ignore[no-untyped-def]
            if urlsplit(req.url).netloc == host:
                route.continue_()
            else:
                refused.append(req.url)
                route.abort()

        context.route("**/*", only_the_service)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        page.goto(f"{service}/ui")
        assert "/ui/login" in page.url  # no token yet: the login form
        page.fill("#token", "wrong")
        page.click("#login")
        assert page.locator("#login-error").is_visible()
        page.fill("#token", TOKEN)
        page.click("#login")
        page.wait_for_url(f"{service}/ui")

        # every mode the API has, chosen on the page: the graph finds the chunks naming the entity
        page.fill("#q", "Alice Moreau")
        page.select_option("#mode", "graph")
        page.press("#q", "Enter")
        page.wait_for_selector(".hit")
        assert page.locator("#summary").inner_text().endswith("· graph")
        assert "Alice Moreau" in page.locator(".hit .snippet").first.inner_text()
        assert page.locator("#mode").input_value() == "graph"  # the choice stays for the next query
        page.select_option("#mode", "hybrid")
        page.fill("#q", "who maintains the crane schedule")
        page.press("#q", "Enter")
        page.wait_for_selector(".hit")
        first = page.locator(".hit").first
        assert first.locator(".hit-link").inner_text() == "Harbour operations"  # the document's title
        assert "harbour.md" in first.inner_text()  # and its file
        page.screenshot(path=str(tmp_path / "search.png"), full_page=True)
        first.locator(".hit-link").click()

        page.wait_for_selector("mark#hit")
        assert page.locator(".chunk-item.focus").count() == 1  # the hit's chunk, marked in the list
        document_url = page.url
        hit = page.locator("mark#hit")
        assert hit.is_visible() and "Alice Moreau" in hit.inner_text()
        box = hit.bounding_box()
        assert box is not None and box["width"] > 0 and box["height"] > 0
        assert page.locator("#doc-text span.boundary[data-chunk]").count() >= 3
        assert page.locator("#doc-text span.seg.overlap").count() >= 2
        assert (
            page.locator(".chunk-item").count() == page.locator("#doc-text span.boundary[data-chunk]").count()
        )
        entities = page.locator(".chunk-item .entity").all_inner_texts()
        assert any("Alice Moreau" in e for e in entities), entities
        page.locator(".chunk-item").nth(1).click()  # the script marks that chunk's text
        assert page.locator("#doc-text span.seg.focus").count() >= 1
        page.screenshot(path=str(tmp_path / "document.png"), full_page=True)

        # a phone: one column, nothing wider than the screen (a long file name in the title was)
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(document_url.replace("start=", "start=x&was="))  # a mistyped number: the page still
        page.wait_for_selector("#doc-text")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        text_box, list_box = page.locator("#doc-text").bounding_box(), page.locator(".chunks").bounding_box()
        assert text_box and list_box and list_box["y"] >= text_box["y"] + text_box["height"]  # list below
        page.screenshot(path=str(tmp_path / "phone.png"))
        page.goto(f"{service}/ui/documents")
        page.wait_for_selector("table.documents")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.goto(f"{service}/ui/evaluation")  # its wide tables scroll in their own box
        page.wait_for_selector("#gate-verdict")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(document_url)

        page.click("nav >> text=Documents")  # what the index holds, failures with their errors
        page.wait_for_selector("table.documents")
        assert page.locator("#summary").inner_text() == "3 documents"
        assert page.locator("tr.document").count() == 3
        failure = page.locator("tr.failure td").inner_text()
        assert failure.startswith("load failed: scan.pdf: ") and "PDF" in failure
        page.screenshot(path=str(tmp_path / "documents.png"), full_page=True)
        page.click("#filters >> text=failed")
        page.wait_for_url("**/ui/documents?state=failed")
        assert page.locator("tr.document").all_inner_texts()[0].startswith("scan.pdf")
        assert page.locator("tr.document").count() == 1
        page.click("#filters >> text=all")
        page.click("tr.document >> text=harbour.md")  # a stored document opens in its view
        page.wait_for_selector("#doc-text")
        assert "/ui/documents/doc_" in page.url

        page.click("text=Evaluation")
        page.wait_for_selector("#gate-verdict")
        assert "Gate refused" in page.locator("#gate-verdict").inner_text()
        assert page.locator("svg polyline").count() == 4
        page.screenshot(path=str(tmp_path / "evaluation.png"), full_page=True)

        page.goto(f"{service}/docs")
        page.wait_for_selector(".swagger-ui .info", timeout=30_000)
        assert "unichunk service" in page.locator(".swagger-ui .info").inner_text()
        page.wait_for_selector(".swagger-ui .opblock")  # the operations, read from /openapi.json
        assert page.locator(".swagger-ui .btn.authorize").count() == 1  # the declared bearer scheme
        page.screenshot(path=str(tmp_path / "docs.png"), full_page=True)
        browser.close()

    assert refused == [], f"the pages asked for something beyond the service: {refused}"
    assert errors == [], errors
    for name in ("search", "document", "phone", "evaluation", "docs"):
        _not_blank(tmp_path / f"{name}.png")
