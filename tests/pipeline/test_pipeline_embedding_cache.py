"""Embed what changed, not what was touched: real ingests (qdrant-edge, MiniLM, the embedding cache in the data
dir) count what they embedded and what they reused, and reused vectors are the very vectors stored before.

Also chunk-level progress: the progress callback hears chunks before the first batch is done.
"""

from __future__ import annotations

from pathlib import Path

from qdrant_edge import ScrollRequest

from unichunk import Pipeline
from unichunk.chunking.models import embed_text
from unichunk.index.generations import reading_settings
from unichunk.settings import SinkSettings
from unichunk.sinks.pool import close_all_sinks
from unichunk.sinks.vectors.sink import open_vector_sink

WORDS = [
    "ownership",
    "borrowing",
    "lifetimes",
    "traits",
    "generics",
    "closures",
    "iterators",
    "modules",
    "crates",
    "cargo",
    "tests",
    "errors",
    "panics",
    "results",
    "options",
    "enums",
    "structs",
    "patterns",
    "matching",
    "vectors",
    "strings",
    "slices",
    "maps",
    "threads",
    "channels",
    "mutexes",
    "atomics",
    "async",
    "futures",
    "macros",
    "unsafe",
    "pointers",
    "smart",
    "boxes",
    "references",
]


def paragraph(seed: int, words: int = 60) -> str:
    """A distinct paragraph of `words` words (deterministic)."""
    picked = [WORDS[(seed * 7 + i * (seed % 5 + 1)) % len(WORDS)] for i in range(words)]
    return f"Paragraph {seed} explains " + " ".join(picked) + "."


def markdown(sections: int, *, edit: int | None = None, first: int = 0) -> str:
    parts = ["# The book\n"]
    for s in range(first, first + sections):
        text = paragraph(s)
        if s == edit:
            text = text.replace("explains", "now explains, after an edit,")
        parts.append(f"## Section {s}\n\n{text}\n")
    return "\n".join(parts)


def stored(settings: SinkSettings) -> dict[str, tuple[str, list[float]]]:
    """chunk ID -> (embed text, vector) of every point of the live collection."""
    close_all_sinks()
    with open_vector_sink(reading_settings(settings)) as sink:
        records, _ = sink.shard.scroll(ScrollRequest(limit=100_000, with_payload=True, with_vector=True))
    points = {}
    for record in records:
        payload = record.payload
        vector = record.vector if isinstance(record.vector, list) else next(iter(record.vector.values()))
        points[payload["chunk_id"]] = (
            embed_text(tuple(payload["heading_chain"]), payload["content"]),
            [float(x) for x in vector],
        )
    return points


def test_an_edit_re_embeds_only_the_changed_chunks(pipeline_env: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "book.md").write_text(markdown(30))
    settings = SinkSettings(data_dir=pipeline_env)
    with Pipeline(settings, sinks=("vectors", "keywords")) as pipeline:
        first = pipeline.ingest(corpus)
        before = stored(settings)
        assert first.embedded == len({text for text, _ in before.values()}) and first.reused == 0
        assert first.embedded + first.reused == first.chunks_written["vectors"] == len(before) > 20

        (corpus / "book.md").write_text(markdown(30, edit=17))
        second = pipeline.ingest(corpus)
        after = stored(settings)
    old_vectors = {text: vector for text, vector in before.values()}
    changed = {text for text, _ in after.values()} - set(old_vectors)
    assert 1 <= len(changed) <= 3, changed
    assert (second.embedded, second.reused) == (len(changed), len(after) - len(changed))
    assert second.embedded + second.reused == second.chunks_written["vectors"] == len(after)
    for text, vector in after.values():  # every reused vector is exactly the one stored before
        if text not in changed:
            assert vector == old_vectors[text]


def test_a_shared_passage_is_embedded_once_and_a_rebuild_reuses_every_vector(
    pipeline_env: Path, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shared = markdown(6, first=100)
    (corpus / "a.md").write_text(shared)
    (corpus / "b.md").write_text(shared)  # same text, another document: other chunk IDs
    (corpus / "c.md").write_text(markdown(4, first=200))
    settings = SinkSettings(data_dir=pipeline_env)
    with Pipeline(settings, sinks=("vectors", "keywords")) as pipeline:
        summary = pipeline.ingest(corpus)
        points = stored(settings)
        texts = [text for text, _ in points.values()]
        assert len(texts) > len(set(texts))  # the two copies' chunks share their texts
        assert (summary.embedded, summary.reused) == (len(set(texts)), len(texts) - len(set(texts)))

        # Another generation, same embedder and chunks (only the keyword analyzer changes): all reused.
        other = SinkSettings(data_dir=pipeline_env, bm25_stemming=False)
    with Pipeline(other, sinks=("vectors", "keywords")) as pipeline:
        rebuilt = pipeline.rebuild(corpus)
    assert rebuilt.outcome == "switched", rebuilt
    assert rebuilt.build is not None
    assert (rebuilt.build.embedded, rebuilt.build.reused) == (0, len(texts))
    assert rebuilt.build.chunks_written["vectors"] == len(texts)
    close_all_sinks()


def test_progress_counts_chunks_before_the_first_batch_is_done(pipeline_env: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "long.md").write_text(markdown(120))  # one document, one batch, many embedding calls
    events: list[tuple[str, int, int]] = []
    settings = SinkSettings(data_dir=pipeline_env)
    with Pipeline(settings, sinks=("vectors",), progress=lambda *e: events.append(e)) as pipeline:
        summary = pipeline.ingest(corpus)
    chunks = [e for e in events if e[0] == "chunks"]
    documents = [e for e in events if e[0] == "documents"]
    assert documents[0] == ("documents", 0, 1) and documents[-1] == ("documents", 1, 1)
    # the chunk counts came between the start and the only batch's end, in several steps, rising
    first_done = events.index(documents[-1])
    assert all(events.index(e) < first_done for e in chunks)
    done = [d for _, d, _ in chunks]
    assert len(done) >= 3 and done == sorted(done) and done[0] < done[-1] == summary.embedded + summary.reused
    assert chunks[-1][2] == summary.chunks_written["vectors"]
    close_all_sinks()


def test_the_chunk_estimate_follows_the_documents_and_the_log_says_rate_and_eta() -> None:
    from unichunk.engine.progress import ChunkProgress
    from unichunk.sinks.progress import ChunkEvent

    now = [100.0]
    lines: list[str] = []
    logger = type("Log", (), {"info": lambda self, line: lines.append(line)})()
    tracker = ChunkProgress(logger, clock=lambda: now[0])
    tracker.documents(2, 10)  # two unchanged documents, skipped before any batch
    tracker.event(ChunkEvent("queued", documents=4, chunks=40))  # the first batch: 10 chunks a document
    assert tracker.estimate() == 40 + 4 * 10  # four more documents to come at 10 chunks each
    tracker.event(ChunkEvent("done", reused=8))
    now[0] += 10
    tracker.event(ChunkEvent("done", embedded=32))
    tracker.documents(6, 10)  # the batch is prepared
    tracker.event(ChunkEvent("queued", documents=4, chunks=20))  # the last batch: smaller documents
    assert tracker.estimate() == 60  # every document queued: the estimate is what was queued
    assert lines[0] == "progress: 8 of ~80 chunks (0 embedded, 8 reused), 2 of 10 documents"
    now[0] += 20
    tracker.event(ChunkEvent("done", embedded=10))
    assert lines[-1] == (
        "progress: 50 of ~60 chunks (42 embedded, 8 reused), 6 of 10 documents; 1.4 chunks/s, ETA 7s"
    )
    assert len(lines) == 2  # the middle event came within LOG_SECONDS of the first line
