"""Two `Pipeline`s with different settings, used at the same time from two threads of one process.

Settings reach the flows as values (`unichunk.flows.run_settings`), not through `os.environ`: each index
must hold exactly what its own settings make (its chunk sizes, its stores, its BM25 analyzer, its data
dir), and the environment must be left as it was.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from documents import write_files

from unichunk import Pipeline
from unichunk.chunking.config import ChunkStrategy
from unichunk.engine.params import IngestSummary
from unichunk.index.generations import live_status
from unichunk.sinks.base import SinkName
from unichunk.sinks.config import SinkSettings

SENTENCE = "Alice maintains the keyword index in Berlin while Bob keeps the vectors warm. "
CORPUS = {f"notes/{n}.txt": f"Note {n}. " + SENTENCE * 12 for n in range(4)}
ROUNDS = 3  # each thread ingests, changes a file and ingests again, so the two sides' runs interleave


def _use(p: Pipeline, corpus: Path, start: threading.Barrier) -> list[IngestSummary]:
    """Ingest `corpus` ROUNDS times, one file changed before each later round."""
    start.wait()
    summaries = []
    for round_ in range(ROUNDS):
        if round_:
            (corpus / "notes/0.txt").write_text(f"Round {round_}. " + CORPUS["notes/0.txt"])
        summaries.append(p.ingest(corpus))
    return summaries


def _ours(environ: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in environ.items() if key.startswith("UNICHUNK_")}


def _texts(p: Pipeline) -> dict[str, list[str]]:
    """Every live document's chunks (in order) as the Pipeline's stores hold them, by source ID."""
    rows = live_status(p.settings).rows()
    return {row.source_id: [c.content for c in p.get_chunks(row.chunk_ids)] for row in rows}


def test_two_pipelines_with_different_settings_run_at_once_from_two_threads(
    pipeline_env: Path, tmp_path: Path
) -> None:
    sides: dict[str, tuple[int, bool, tuple[SinkName, ...]]] = {
        "small": (128, True, ("keywords",)),
        "large": (400, False, ("keywords", "vectors")),
    }
    pipelines, corpora = {}, {}
    for name, (size, stemming, sinks) in sides.items():
        settings = SinkSettings(data_dir=tmp_path / f"data-{name}", bm25_stemming=stemming)
        strategy = ChunkStrategy(name="fixed_chars", chunk_size=size, chunk_overlap=0)
        pipelines[name] = Pipeline(settings, strategy=strategy, sinks=sinks)
        corpora[name] = write_files(tmp_path / f"corpus-{name}", CORPUS)
    environment = _ours(os.environ)
    start = threading.Barrier(len(sides))

    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        futures = {name: pool.submit(_use, pipelines[name], corpora[name], start) for name in sides}
        results = {name: future.result() for name, future in futures.items()}

    assert _ours(os.environ) == environment  # no UNICHUNK_* variable was written or changed
    for name, (size, stemming, sinks) in sides.items():
        p, summaries = pipelines[name], results[name]
        assert [(s.listed, s.processed, s.failed) for s in summaries] == [(4, 4, [])] + [(4, 1, [])] * 2
        assert all(s.chunks_written.keys() == set(sinks) for s in summaries), name
        texts = _texts(p)
        assert texts.keys() == set(CORPUS)
        for source_id, chunks in texts.items():
            text = (corpora[name] / source_id).read_text()
            assert "".join(chunks) == text, (name, source_id)  # fixed_chars without overlap: the text, cut
            assert [len(c) for c in chunks[:-1]] == [size] * (len(chunks) - 1), (name, source_id)
        # its own analyzer: "maintaining" finds "maintains" only where the index stems
        hits = p.search("maintaining", k=3, mode="keywords").hits
        assert bool(hits) is stemming, name
        assert (p.settings.data_dir / "generations").is_dir()
        p.close()
    assert not (pipeline_env / "generations").exists()  # the environment's data dir was never used
