"""Segments: each chunk is exactly its segments, no two chunks split one, and shared text is one segment.

Properties over any text and any set of chunk spans (overlapping, nested, touching, empty): the pieces of a
chunk join to its content; every segment is one piece of text between two consecutive boundaries; a
heading chain comes first; a document whose chunks are not at their offsets keeps each chunk whole.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from unichunk.chunking.loaders import load_bytes
from unichunk.chunking.models import Block, Chunk, Document
from unichunk.chunking.segments import between_sentences, code_spans, heading_text, segment_batch
from unichunk.chunking.service import shared_service


def chunk_of(document: Document, index: int, start: int, end: int, chain: tuple[str, ...] = ()) -> Chunk:
    return Chunk(
        chunk_id=f"{document.document_id}-{index}",
        document_id=document.document_id,
        chunk_index=index,
        content=document.text[start:end],
        start_char=start,
        end_char=end,
        token_count=0,
        content_hash="h",
        heading_chain=chain,
    )


@st.composite
def documents_with_chunks(draw: st.DrawFn) -> tuple[Document, list[Chunk]]:
    text = draw(st.text(min_size=1, max_size=300))
    document = Document(document_id="d", text=text)
    spans = draw(
        st.lists(
            st.tuples(st.integers(0, len(text)), st.integers(0, len(text))).map(sorted),
            min_size=1,
            max_size=8,
        )
    )
    chains = st.sampled_from([(), ("Intro",), ("Intro", "Setup")])
    return document, [chunk_of(document, i, s, e, draw(chains)) for i, (s, e) in enumerate(spans)]


@settings(max_examples=300, deadline=None)
@given(documents_with_chunks())
def test_a_chunk_is_its_segments_and_no_chunk_splits_one(case: tuple[Document, list[Chunk]]) -> None:
    document, chunks = case
    segments = segment_batch([(document, chunks)], headings=False)
    assert len(segments.members) == len(chunks)
    assert len(set(segments.texts)) == len(segments.texts)  # one segment per distinct text
    boundaries = {c.start_char for c in chunks} | {c.end_char for c in chunks}
    for chunk, own in zip(chunks, segments.members, strict=True):
        pieces = [segments.texts[i] for i in own]
        # where a piece may start or end: the chunk's own ends, and boundaries between two sentences
        cuts = {chunk.start_char, chunk.end_char} | {
            b for b in boundaries if between_sentences(document.text, b)
        }
        if chunk.content.strip():
            # the pieces, in order, cover the chunk but for whitespace-only pieces left out; each runs
            # from one cut to the next
            assert all(p.strip() for p in pieces)
            at = chunk.start_char
            for piece in pieces:
                found = document.text.index(piece, at)
                assert document.text[at:found].strip() == ""
                assert found in cuts and found + len(piece) in cuts
                assert not any(found < cut < found + len(piece) for cut in cuts)
                at = found + len(piece)
            assert at <= chunk.end_char and document.text[at : chunk.end_char].strip() == ""
        else:
            assert pieces == [chunk.content]


@settings(max_examples=200, deadline=None)
@given(documents_with_chunks())
def test_a_heading_chain_is_a_segment_of_its_own_first(case: tuple[Document, list[Chunk]]) -> None:
    document, chunks = case
    plain = segment_batch([(document, chunks)], headings=False)
    headed = segment_batch([(document, chunks)], headings=True)
    for chunk, own, bare in zip(chunks, headed.members, plain.members, strict=True):
        texts = [headed.texts[i] for i in own]
        if chunk.heading_chain:
            assert texts[0] == heading_text(chunk) == " > ".join(chunk.heading_chain) + ":"
            rest = texts[1:]
        else:
            rest = texts
        if chunk.content.strip() or not chunk.heading_chain:
            assert rest == [plain.texts[i] for i in bare] or rest == [chunk.embed_text]
        else:
            assert rest == []  # the heading alone stands for an all-whitespace chunk


def test_half_overlapping_chunks_share_their_middle_segments() -> None:
    text = "Aaa a. Bbb b! Ccc c?\nDdd d. Eee e."
    document = Document(document_id="d", text=text)
    chunks = [chunk_of(document, 0, 0, 13), chunk_of(document, 1, 7, 20), chunk_of(document, 2, 14, 34)]
    segments = segment_batch([(document, chunks)], headings=False)
    assert segments.texts == ["Aaa a. ", "Bbb b!", "Ccc c?", "\nDdd d. Eee e."]  # " " alone is left out
    assert segments.members == [(0, 1), (1, 2), (2, 3)]


def test_a_boundary_inside_a_sentence_or_a_word_does_not_cut() -> None:
    text = "The crane is old. Alice Moreau maintains the crane schedule. Bruno Lindqvist inspects row R."
    document = Document(document_id="d", text=text)
    name = text.index("Moreau")
    # fixed windows: one ends inside "Moreau", the next starts inside "Alice", a third after a sentence
    after_first = text.index("Alice")
    chunks = [
        chunk_of(document, 0, 0, name + 3),
        chunk_of(document, 1, after_first + 2, len(text)),
        chunk_of(document, 2, 0, len(text)),
    ]
    segments = segment_batch([(document, chunks)], headings=False)
    # the first chunk's end and the second's start fall inside "Moreau" and "Alice": neither cuts, so
    # the whole text is one piece and "Alice Moreau" is read whole
    assert [segments.texts[i] for i in segments.members[2]] == [text]
    assert [segments.texts[i] for i in segments.members[0]] == [text[: name + 3]]
    assert between_sentences(text, after_first) and not between_sentences(text, name + 3)
    assert not between_sentences(text, text.index(" Moreau"))  # between two words of one sentence


def test_two_documents_with_one_passage_embed_it_once_and_headings_are_shared() -> None:
    one = Document(document_id="one", text="Shared passage. Own words one.")
    two = Document(document_id="two", text="Shared passage. Other words.")
    batch = [
        (one, [chunk_of(one, 0, 0, 15, ("Guide",)), chunk_of(one, 1, 16, 30, ("Guide",))]),
        (two, [chunk_of(two, 0, 0, 15, ("Guide",))]),
    ]
    segments = segment_batch(batch, headings=True)
    assert segments.texts == ["Guide:", "Shared passage.", "Own words one."]
    assert segments.members == [(0, 1), (0, 2), (0, 1)]


def test_chunks_not_at_their_offsets_are_kept_whole() -> None:
    document = Document(document_id="d", text="The real text of the document.")
    elsewhere = Chunk(
        chunk_id="c",
        document_id="d",
        chunk_index=0,
        content="Other text",
        start_char=0,
        end_char=10,
        token_count=0,
        content_hash="h",
    )
    inside = chunk_of(document, 1, 4, 13)
    segments = segment_batch([(document, [elsewhere, inside])], headings=False)
    assert [segments.texts[i] for own in segments.members for i in own] == ["Other text", "real text"]


@st.composite
def documents_with_code(draw: st.DrawFn) -> tuple[Document, list[Chunk], list[str], list[str]]:
    """Prose paragraphs and code blocks (`Block`s of kind `code`, as the Markdown and HTML loaders mark
    them), each with a word of its own; any chunk spans. (document, chunks, prose words, code words)"""
    kinds = draw(st.lists(st.booleans(), min_size=1, max_size=8))
    text, blocks, words = "", [], {True: [], False: []}
    for n, is_code in enumerate(kinds):
        text += "\n\n" if text else ""
        word = f"{'code' if is_code else 'prose'}word{n}"
        body = f"let {word} = 1;\nprint({word})" if is_code else f"The {word} is here. It stays."
        if is_code:
            blocks.append(Block(kind="code", start=len(text), end=len(text) + len(body)))
        words[is_code].append(word)
        text += body
    document = Document(document_id="d", text=text, blocks=tuple(blocks))
    spans = draw(
        st.lists(
            st.tuples(st.integers(0, len(text)), st.integers(0, len(text))).map(sorted),
            min_size=1,
            max_size=6,
        )
    )
    return (
        document,
        [chunk_of(document, i, s, e) for i, (s, e) in enumerate(spans)],
        words[False],
        words[True],
    )


@settings(max_examples=200, deadline=None)
@given(documents_with_code(), st.booleans())
def test_without_code_no_segment_holds_code_and_every_prose_word_is_read(
    case: tuple[Document, list[Chunk], list[str], list[str]], cut: bool
) -> None:
    """What spaCy is given (`code=False`), cut at chunk boundaries or not: no character of a code block,
    and every prose word a chunk holds whole in that chunk's segments."""
    document, chunks, prose, code = case
    segments = segment_batch([(document, chunks)], headings=False, code=False, cut=cut)
    assert not [w for w in code for t in segments.texts if w in t]
    for chunk, own in zip(chunks, segments.members, strict=True):
        read = "\n".join(segments.texts[i] for i in own)
        assert all(w in read for w in prose if w in chunk.content)
        assert all(t.strip() for t in (segments.texts[i] for i in own))
    with_code = segment_batch([(document, chunks)], headings=False, cut=cut)
    for chunk, own in zip(chunks, with_code.members, strict=True):  # the default reads code too
        read = "".join(with_code.texts[i] for i in own)
        assert all(w in read for w in code if w in chunk.content)


def test_prose_around_a_code_block_is_joined_by_a_blank_line_and_all_code_reads_nothing() -> None:
    text = "Alice Moreau wrote it.\n\nfn main() {}\n\nBruno Costa ran it."
    start = text.index("fn")
    document = Document(
        document_id="d", text=text, blocks=(Block(kind="code", start=start, end=start + len("fn main() {}")),)
    )
    chunks = [chunk_of(document, 0, 0, len(text)), chunk_of(document, 1, start, start + 12)]
    segments = segment_batch([(document, chunks)], headings=False, code=False, cut=False)
    assert [segments.texts[i] for i in segments.members[0]] == [
        "Alice Moreau wrote it.\n\nBruno Costa ran it."
    ]
    assert segments.members[1] == ()  # all code: nothing for spaCy
    plain = Document(document_id="p", text="No code here. None at all.")
    same = [chunk_of(plain, 0, 0, 13), chunk_of(plain, 1, 14, 26)]
    assert segment_batch([(plain, same)], headings=False, code=False) == segment_batch(
        [(plain, same)], headings=False
    )


def test_markdown_code_is_found_as_its_chunker_finds_it_and_html_code_from_its_blocks() -> None:
    """The loaders keep no blocks of Markdown: its fences, indented code and front matter are found by the
    Markdown chunker's scan; HTML's `<pre>` comes from the blocks its loader marks."""
    markdown = load_bytes(
        b"---\ntitle: x\n---\n# T\n\nAlice Moreau wrote it.\n\n```rust\nfn main() { let satya = 1; }\n```\n\n"
        b"More prose.\n\n    indented(code)\n\nEnd.\n",
        "a.md",
    )
    html = load_bytes(
        b"<h1>T</h1><p>Alice Moreau wrote it.</p><pre>fn main() {}\nlet x = 1;</pre><p>End.</p>", "a.html"
    )
    found = {d.mime_type: [d.text[s:e] for s, e in code_spans(d)] for d in (markdown, html)}
    assert found == {
        "text/markdown": [
            "---\ntitle: x\n---",
            "```rust\nfn main() { let satya = 1; }\n```",
            "    indented(code)",
        ],
        "text/html": ["fn main() {}\nlet x = 1;"],
    }
    for document in (markdown, html):
        chunks = shared_service().chunk(document)
        texts = segment_batch([(document, chunks)], headings=False, code=False).texts
        assert "Alice Moreau wrote it." in "".join(texts) and "End." in "".join(texts)
        assert not [t for t in texts if "main()" in t or "title:" in t or "indented" in t]
    assert code_spans(load_bytes(b"Plain text.\n\n    indented, but not Markdown\n", "a.txt")) == []
