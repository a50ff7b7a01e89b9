"""Checks the fault tests share: a small corpus, and whether the stores agree and hold nothing twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from unichunk.index.generations import live_status, reading_settings
from unichunk.sinks.base import SINK_NAMES
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import get_sinks


def make_corpus(root: Path, count: int, start: int = 0) -> list[Path]:
    """`count` one-sentence documents (one chunk each, so MiniLM stays cheap), each naming entities."""
    root.mkdir(parents=True, exist_ok=True)
    people = ["Alice Martin", "Bruno Costa", "Chen Wei", "Dara Okafor", "Emil Novak"]
    cities = ["Berlin", "Lisbon", "Nairobi", "Osaka", "Toronto"]
    paths = []
    for n in range(start, start + count):
        path = root / f"doc_{n:04d}.txt"
        path.write_text(
            f"Report {n}: {people[n % 5]} met {people[(n + 2) % 5]} in {cities[n % 5]} "
            f"to review index shard {n} of the Qdrant cluster.\n"
        )
        paths.append(path)
    return paths


def held(names: Sequence[str] = SINK_NAMES) -> dict[str, set[str]]:
    return {
        name: sink.chunk_ids() for name, sink in get_sinks(names, reading_settings(SinkSettings())).items()
    }


def duplicates(names: Sequence[str] = SINK_NAMES) -> dict[str, dict[str, int]]:
    """Anything stored more than once: Qdrant points, BM25 index entries, graph nodes by their key."""
    sinks = get_sinks(names, reading_settings(SinkSettings()))
    found: dict[str, dict[str, int]] = {}
    if "vectors" in sinks:
        vectors = sinks["vectors"]
        ids = [str(payload["chunk_id"]) for payload in _payloads(vectors)]
        found["vectors"] = {k: v for k, v in Counter(ids).items() if v > 1}
        if len(ids) != vectors.count():
            found["vectors"]["<count mismatch>"] = vectors.count()
    if "keywords" in sinks:
        found["keywords"] = _keyword_duplicates(sinks["keywords"])
    if "graph" in sinks:
        found["graph"] = _graph_duplicates(sinks["graph"])
    return {name: dups for name, dups in found.items() if dups}


def _keyword_duplicates(keywords) -> dict[str, int]:  # type: ignore[no-untyped-def]
    rows = keywords.chunk_ids()  # the store's table (its primary key forbids duplicates there)
    snapshot = keywords._current()  # the in-memory BM25 index searches run on
    indexed = snapshot.live_chunk_ids if snapshot is not None else []
    found = {k: v for k, v in Counter(indexed).items() if v > 1}
    if set(indexed) != rows:
        found["<index differs from the table>"] = len(indexed)
    return found


def _graph_duplicates(graph) -> dict[str, int]:  # type: ignore[no-untyped-def]
    found: dict[str, int] = {}
    for label, key in (("Chunk", "chunk_id"), ("Document", "document_id"), ("Entity", "name")):
        query = f"MATCH (n:{label}) WITH n.{key} AS k, count(*) AS c WHERE c > 1 RETURN k, c"
        found.update({f"{label}:{r['k']}": r["c"] for r in graph.backend.run(query, write=False)})
    return found


def _payloads(vectors):  # type: ignore[no-untyped-def]
    """Every stored point's chunk_id, through the sink's engine-neutral scan (qdrant-edge or qdrant-client)."""
    return [payload for _id, payload in vectors._store_scroll(None, ["chunk_id"])]


def assert_converged(data_dir: Path, names: Sequence[str] = SINK_NAMES) -> set[str]:
    """verify's check: every sink (of `names`) holds exactly the expected IDs, and nothing twice."""
    expected = live_status(SinkSettings(data_dir=data_dir)).expected_chunk_ids()
    assert held(names) == dict.fromkeys(names, expected)
    assert duplicates(names) == {}
    return expected
