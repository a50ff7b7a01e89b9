"""HTML pages keep their main content only (unichunk.chunking.html_main, real trafilatura): no chunk of navigation,
site header, cookie banner, sidebar or footer; offsets exact; headings in the chains; pages without a clear
main content keep all their text."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.errors import ChunkingError, DocumentLoadError
from unichunk.chunking.html import HtmlChunker
from unichunk.chunking.html_extract import extract_html
from unichunk.chunking.loaders import load_bytes
from unichunk.chunking.models import Chunk, Document

ARTICLE = {
    "intro": "Rivers shaped the settlement of Europe for thousands of years. Towns grew at fords and bridges, "
    "and trade followed the water downstream to the sea.",
    "danube": "The Danube flows through ten countries, more than any other river in the world. It rises in "
    "the Black Forest and empties into the Black Sea after almost three thousand kilometres.",
    "delta": "Its delta is one of the largest wetlands in Europe and a refuge for hundreds of bird species.",
    "rhine": "The Rhine carries more freight than any other European river. Barges move coal, grain and "
    "containers between Basel and Rotterdam every day of the year.",
    "length": "Length: 1,230 km",
    "source": "Source: the Swiss Alps",
}
CHROME = [  # text of the page's chrome: none of it may reach the document text
    "We use cookies",
    "Accept all",
    "Example Site",
    "The best site about rivers",
    "Home",
    "About us",
    "Related articles",
    "Lakes of Finland",
    "Subscribe",
    "All rights reserved",
    "Imprint",
    "Posted on",
]

PAGE = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Rivers of Europe | Example Site</title></head>
<body>
<div id="cookie-banner" class="cookie-consent">We use cookies to improve your experience on this website.
  <button>Accept all</button> <a href="/privacy">Privacy policy</a></div>
<header class="site-header"><div class="logo"><a href="/">Example Site</a></div>
  <p class="tagline">The best site about rivers since 1999</p></header>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li><li><a href="/c">Contact</a></li></ul></nav>
<nav aria-label="Breadcrumb"><a href="/">Home</a> » <a href="/europe">Europe</a> » Rivers of Europe</nav>
<main>
<article>
  <h1>Rivers of Europe</h1>
  <p class="byline">Posted on <time datetime="2024-03-02">2 March 2024</time> by Jane Doe</p>
  <p>{ARTICLE["intro"]}</p>
  <h2>The Danube</h2>
  <p>{ARTICLE["danube"]}</p>
  <p>{ARTICLE["delta"]}</p>
  <h2>The Rhine</h2>
  <p>{ARTICLE["rhine"]}</p>
  <ul><li>{ARTICLE["length"]}</li><li>{ARTICLE["source"]}</li></ul>
</article>
</main>
<aside class="sidebar"><h3>Related articles</h3><ul><li><a href="/a">Lakes of Finland</a></li>
  <li><a href="/b">Mountains of Norway</a></li></ul>
  <p>Subscribe to our newsletter for a river every week.</p></aside>
<footer><p>© 2024 Example Site. All rights reserved.</p><p><a href="/imprint">Imprint</a> | <a href="/t">Terms</a></p>
</footer>
</body></html>"""


def chunks_of(document: Document, strategy: ChunkStrategy | None = None) -> list[Chunk]:
    chunks = HtmlChunker(strategy or ChunkStrategy(name="html")).chunk(document)
    for c in chunks:
        assert document.text[c.start_char : c.end_char] == c.content
    for b in document.blocks:
        assert 0 <= b.start < b.end <= len(document.text)
    return chunks


def test_page_chrome_never_becomes_a_chunk() -> None:
    document = load_bytes(PAGE.encode(), "rivers.html")
    assert document.title == "Rivers of Europe | Example Site"
    headings = ["Rivers of Europe", "The Danube", "The Rhine"]
    expected = "\n\n".join([headings[0], ARTICLE["intro"], headings[1], ARTICLE["danube"], ARTICLE["delta"]])
    expected += "\n\n" + "\n\n".join([headings[2], ARTICLE["rhine"], ARTICLE["length"], ARTICLE["source"]])
    assert document.text == expected
    for mode in ("auto", "structured", "flat"):
        chunks = chunks_of(
            document, ChunkStrategy(name="html", html_mode=mode, target_words=20, max_words=40, min_words=5)
        )
        for chrome in CHROME:
            assert not any(chrome in c.content for c in chunks), (mode, chrome)
        assert chunks[0].content.startswith("Rivers of Europe")
    by_text = {
        key: c.heading_chain for c in chunks_of(document) for key, t in ARTICLE.items() if t in c.content
    }
    assert by_text == {
        "intro": ("Rivers of Europe",),
        "danube": ("Rivers of Europe", "The Danube"),
        "delta": ("Rivers of Europe", "The Danube"),
        "rhine": ("Rivers of Europe", "The Rhine"),
        "length": ("Rivers of Europe", "The Rhine"),
        "source": ("Rivers of Europe", "The Rhine"),
    }
    kinds = [(b.kind, document.text[b.start : b.end]) for b in document.blocks]
    assert kinds[0] == ("heading", "Rivers of Europe") and kinds[-1] == ("list_item", ARTICLE["source"])


def block_texts(markup: str, *, main_content: bool = False) -> list[str]:
    page = extract_html(markup, main_content=main_content)
    return [page.text[b.start : b.end] for b in page.blocks]


def is_subsequence(part: list[str], whole: list[str]) -> bool:
    rest = iter(whole)
    return all(item in rest for item in part)


def test_main_content_is_a_selection_of_the_whole_page_blocks() -> None:
    """`extract_html` alone still reads every block (e-mail bodies, the html strategy's own tests); main
    content is a subsequence of those blocks, assembled the same way."""
    whole = block_texts(PAGE)
    for chrome in ("Example Site", "Home", "Related articles", "Lakes of Finland"):
        assert chrome in whole
    main = block_texts(PAGE, main_content=True)
    assert is_subsequence(main, whole) and len(main) < len(whole)
    assert extract_html(PAGE, main_content=True).text == "\n\n".join(main)


def test_a_long_page_is_aligned_exactly() -> None:
    """Past difflib's size the alignment cuts at anchors: every paragraph of a long article is kept, in
    order, repeated ones too, and the chrome around it is not."""
    sentences = [
        f"Section {i} describes gauge station {i * 7} on the river, where the flow reached {i * 13} cubic "
        f"metres per second during the flood of {1900 + i}."
        for i in range(300)
    ]
    body = "".join(f"<p>{s}</p>" + ("<p>The same sentence twice.</p>" * 2 if i % 50 == 0 else "")
                   for i, s in enumerate(sentences))  # fmt: skip
    markup = (
        "<html><head><title>Gauges</title></head><body><nav><a href='/'>Home</a> | <a href='/g'>Gauges</a>"
        f"</nav><main><article><h1>Gauge stations</h1>{body}</article></main>"
        "<footer><p>© 2024 River Office. All rights reserved.</p></footer></body></html>"
    )
    document = load_bytes(markup.encode(), "gauges.html")
    paragraphs = document.text.split("\n\n")
    assert paragraphs[0] == "Gauge stations"
    assert [p for p in paragraphs if p.startswith("Section")] == sentences
    assert paragraphs.count("The same sentence twice.") == 12
    assert "Home" not in document.text and "All rights reserved" not in document.text
    chunks_of(document)


def test_a_page_without_clear_main_content_keeps_all_its_text() -> None:
    """Nothing or too little found as main content: the whole page, as before, so no page is emptied."""
    links = "<ul>" + "".join(f"<li><a href='/x{i}'>link number {i}</a></li>" for i in range(20)) + "</ul>"
    table = "<table>" + "".join(f"<tr><td>r{i}</td><td>v{i}</td></tr>" for i in range(30)) + "</table>"
    tiny = (
        "<html><body><nav><a href='/'>Home</a> | <a href='/a'>About</a> | <a href='/b'>Blog</a></nav>"
        "<p>Short note.</p><footer>© 2024 Example Site</footer></body></html>"
    )
    for markup in (links, table, tiny, "<p>Hello</p>", "<html><body><div>just text</div></body></html>"):
        document = load_bytes(markup.encode(), "page.html")
        assert document.text == extract_html(markup).text, markup
        assert document.blocks == extract_html(markup).blocks
        chunks_of(document)


def test_email_html_bodies_are_kept_whole() -> None:
    email = (
        b"From: a@example.com\r\nSubject: News\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        b"<html><body><nav><a href='/'>Home</a></nav><p>Dear Bob, the report is attached.</p></body></html>"
    )
    assert "Home" in load_bytes(email, "news.eml").text


def test_trafilatura_loads_only_with_html() -> None:
    code = "import sys, chunking; assert 'trafilatura' not in sys.modules, 'imported by import chunking'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


_WORDS = st.sampled_from(
    [
        "river", "delta", "Home", "About", "the", "sea", "water", "towns", "grew", "at", "fords", "and",
        "bridges", "barges", "carry", "coal", "grain", "é", "😀", "中文", "a\u0301", "&amp;", "&nbsp;",
        "&lt;b&gt;", "\r\n",
    ]
)  # fmt: skip
_TAGS = st.sampled_from(
    [
        "<nav>", "</nav>", "<header>", "</header>", "<footer>", "</footer>", "<aside>", "</aside>",
        "<main>", "</main>", "<article>", "</article>", "<section>", "</section>", "<dialog>", "</dialog>",
        '<div role="navigation">', '<div class="cookie-banner">', "<div>", "</div>", "<p>", "</p>",
        "<h1>", "</h1>", "<h2>", "</h2>", "<ul>", "<li>", "</li>", "</ul>", "<table><tr><td>", "</td>",
        "<pre>", "</pre>", "<script>", "</script>", "<!--", "-->", "<title>", "</title>", "<br>", "<",
    ]
)  # fmt: skip
_SENTENCE = st.lists(_WORDS, min_size=1, max_size=30).map(" ".join)
_SOUP = st.lists(st.one_of(_TAGS, _SENTENCE, st.text(max_size=15)), max_size=80).map("".join)
_BLOCK = st.builds(
    lambda tag, text: f"<{tag}>{text}</{tag}>",
    st.sampled_from(["p", "p", "p", "h1", "h2", "h3", "li", "td", "pre", "blockquote", "div", "span"]),
    _SENTENCE,
)
_CONTAINERS = ["nav", "header", "footer", "aside", "dialog", "main", "article", "section", "div", "ul"]
_CONTAINERS += ['div class="cookie-banner"', 'div role="navigation"', 'div role="contentinfo"']
_REGION = st.builds(
    lambda tag, inner: f"<{tag}>{''.join(inner)}</{tag.split()[0]}>",
    st.sampled_from(_CONTAINERS),
    st.lists(st.one_of(_BLOCK, _BLOCK, _TAGS, st.text(max_size=10)), max_size=15),
)
_PAGE = st.lists(st.one_of(_REGION, _BLOCK), max_size=10).map(
    lambda regions: f"<html><head><title>Page</title></head><body>{''.join(regions)}</body></html>"
)
HTMLISH = st.one_of(_SOUP, _PAGE)  # tag soup, and pages with regions of chrome and of content


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markup=HTMLISH)
@example(markup=PAGE)
@example(markup="<nav>" + "river delta " * 50 + "</nav>")
@example(markup="<main>" + "<p>river delta sea</p>" * 200 + "</main><footer>the sea</footer>")
def test_htmlish_input_loads_or_fails_clearly_and_offsets_stay_exact(markup: str) -> None:
    small = ChunkStrategy(name="html", chunk_size=128, target_words=20, max_words=30, min_words=5)
    try:
        document = load_bytes(markup.encode(), "page.html")
        chunks = chunks_of(document, small)
    except (DocumentLoadError, ChunkingError):
        return
    assert document.text.strip() and chunks
    kept = [document.text[b.start : b.end] for b in document.blocks]
    assert document.text == "\n\n".join(kept)
    assert is_subsequence(kept, block_texts(markup.removeprefix("\ufeff")))
