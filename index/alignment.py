"""Prove the stores agree, and put them back in agreement: the alignment check and its repair.

Because every sink stores the same chunk IDs, alignment is a set comparison. The expected set normally
comes from the pipeline's document status (the IDs each processed document was chunked into); without
it, every ID held by any sink is expected, so an ID that some sink lacks is reported missing there.

Holding the right IDs is not enough: a store that altered a chunk's text (dropped a NUL, say) still holds
its ID. So each sink also reports the SHA-256 of the content it actually holds, read back
(`Sink.content_hashes`), and a chunk whose hash does not start with the 8 hex digits its ID carries
(`sha256(content)[:8]`) is reported *altered* in that sink. No other store is needed as a reference: the ID
itself names the content.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import parse_chunk_id
from unichunk.chunking.models import Chunk, Document
from unichunk.chunking.names import openable_name
from unichunk.chunking.service import shared_service
from unichunk.chunking.sources import SourceItem, load_item
from unichunk.index import metrics
from unichunk.index.chunk_cache import ChunkKey
from unichunk.index.generations import reading_settings
from unichunk.index.run import RunConfig
from unichunk.index.status import DocumentStatus, StatusStore
from unichunk.sinks.base import SINK_NAMES, Sink
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import flow_sinks


@dataclass
class AlignmentReport:
    """Missing, extra and altered chunk IDs per sink, compared with `expected_count` expected IDs.

    `altered` holds chunks a sink holds under an expected ID but with other content than the ID names (an
    extra chunk is wrong whatever its content, so it is reported extra only)."""

    expected_count: int
    counts: dict[str, int] = field(default_factory=dict)
    missing: dict[str, set[str]] = field(default_factory=dict)
    extra: dict[str, set[str]] = field(default_factory=dict)
    altered: dict[str, set[str]] = field(default_factory=dict)
    # Chunks a sink holds under an expected ID with other access labels than the records give their
    # document (a relabel that stopped half-way); a store that keeps no labels (`Sink.chunk_labels` not
    # implemented) is left out, not failed.
    mislabelled: dict[str, set[str]] = field(default_factory=dict)
    # One file stored under several document IDs (two sources over it): path -> its document IDs. Every
    # store then holds its text twice, which the ID sets cannot show: `verify` reports it and exits 1,
    # while `ok` stays about the stores agreeing (the stores do agree; a repair cannot tell which to drop).
    stored_twice: dict[str, list[str]] = field(default_factory=dict)
    # The same content under several document IDs (content hash -> their files, by path, or by document
    # ID where a document has no path): two copies of a file are legitimate, so a finding to look at, not
    # a mismatch; `stored_twice` is the case that is wrong.
    same_content: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(v for kind in self._kinds() for v in kind.values())

    def mismatch_count(self) -> int:
        return sum(len(v) for kind in self._kinds() for v in kind.values())

    def _kinds(self) -> tuple[dict[str, set[str]], ...]:
        return (self.missing, self.extra, self.altered, self.mislabelled)

    def as_dict(self, limit: int = 20) -> dict[str, Any]:
        """JSON-friendly summary; at most `limit` example IDs per list so a bad run stays readable."""
        return {
            "ok": self.ok and not self.stored_twice,
            "expected": self.expected_count,
            "sinks": {
                name: {
                    "count": self.counts[name],
                    "missing": len(self.missing[name]),
                    "extra": len(self.extra[name]),
                    "altered": len(self.altered.get(name, ())),
                    "missing_examples": sorted(self.missing[name])[:limit],
                    "extra_examples": sorted(self.extra[name])[:limit],
                    "altered_examples": sorted(self.altered.get(name, ()))[:limit],
                    "mislabelled": len(self.mislabelled.get(name, ())),
                    "mislabelled_examples": sorted(self.mislabelled.get(name, ()))[:limit],
                }
                for name in self.counts
            },
            "stored_twice": {path: ids for path, ids in sorted(self.stored_twice.items())[:limit]},
            "same_content": {h: ids for h, ids in sorted(self.same_content.items())[:limit]},
        }

    def add_documents(self, rows: list[DocumentStatus]) -> None:
        """Find what the chunk IDs cannot show: one file, or one content, under several document IDs."""
        by_path: dict[str, list[str]] = defaultdict(list)
        by_content: dict[str, list[str]] = defaultdict(list)
        for row in rows:
            if row.path:
                by_path[row.path].append(row.document_id)
            if row.content_hash and row.chunk_ids:  # named by the file a user can look at
                by_content[row.content_hash].append(row.path or row.document_id)
        self.stored_twice = {p: sorted(ids) for p, ids in by_path.items() if len(ids) > 1}
        self.same_content = {h: sorted(files) for h, files in by_content.items() if len(files) > 1}


def verify_alignment(
    sinks: Mapping[str, Sink],
    expected: set[str] | None = None,
    labels: Mapping[str, tuple[str, ...]] | None = None,
) -> AlignmentReport:
    """Compare every sink's `chunk_ids()` with `expected` (or with the union of all sinks), the content
    hash of every chunk it holds (`content_hashes()`) with the hash in the chunk's ID, and, given the
    records' `labels` (chunk_id -> labels), the labels it holds for each (`chunk_labels()`)."""
    held = {name: sink.chunk_ids() for name, sink in sinks.items()}
    reference = expected if expected is not None else set().union(*held.values())
    report = AlignmentReport(expected_count=len(reference))
    for name, ids in held.items():
        report.counts[name] = len(ids)
        report.missing[name] = reference - ids
        report.extra[name] = ids - reference
        report.altered[name] = altered_chunks(sinks[name].content_hashes()) - report.extra[name]
        if labels is not None and (held_labels := stored_labels(sinks[name])) is not None:
            report.mislabelled[name] = {
                chunk_id
                for chunk_id, found in held_labels.items()
                if chunk_id in labels and tuple(found) != tuple(labels[chunk_id])
            }
    return report


def stored_labels(sink: Sink) -> dict[str, tuple[str, ...]] | None:
    """The sink's chunk labels, or None for a sink that keeps none (yet)."""
    try:
        return sink.chunk_labels()
    except NotImplementedError:
        return None


def altered_chunks(hashes: Mapping[str, str]) -> set[str]:
    """The chunk IDs whose stored content hash (chunk_id -> SHA-256 hex) is not the one their ID names.

    A malformed ID names no hash and is left out: it is no expected ID, so it is already reported extra."""
    altered = set()
    for chunk_id, digest in hashes.items():
        try:
            named = parse_chunk_id(chunk_id)[2]
        except ValueError:
            continue
        if not digest.startswith(named):
            altered.add(chunk_id)
    return altered


def record_alignment(report: AlignmentReport) -> None:
    """Publish the report as the mismatch gauges (what the alignment alert watches)."""
    for name in report.counts:
        metrics.ALIGNMENT_MISMATCHES.labels(sink=name, kind="missing").set(len(report.missing[name]))
        metrics.ALIGNMENT_MISMATCHES.labels(sink=name, kind="extra").set(len(report.extra[name]))
        metrics.ALIGNMENT_MISMATCHES.labels(sink=name, kind="altered").set(len(report.altered.get(name, ())))
        metrics.ALIGNMENT_MISMATCHES.labels(sink=name, kind="mislabelled").set(
            len(report.mislabelled.get(name, ()))
        )


def verify_run(run: RunConfig) -> AlignmentReport:
    """Compare each of the run's sinks with the chunk IDs its status table expects; publish the gauges."""
    with metrics.timed("verify_alignment"):
        status = run.status_store()
        report = verify_alignment(
            run.open_sinks(), expected=status.expected_chunk_ids(), labels=status.expected_labels()
        )
        report.add_documents(status.rows())
    record_alignment(report)
    return report


# --- repair ------------------------------------------------------------------------------------------------
#
# Repair never guesses: a chunk ID missing from a sink, or held there with altered content, is restored by
# re-writing its document there from the chunk cache (or by re-chunking the file when the cache lost it,
# accepted only if it yields the very IDs the status table expects); every sink's write replaces a stored
# chunk's content when it differs. An extra ID is removed by re-writing its document (writes replace) or,
# if the status table does not know the document, by deleting the document from that sink.


@dataclass
class RepairResult:
    rewritten: dict[str, list[str]] = field(default_factory=dict)  # sink -> document IDs re-written
    deleted: dict[str, list[str]] = field(default_factory=dict)  # sink -> document IDs deleted
    errors: dict[str, str] = field(default_factory=dict)  # document or chunk ID -> why not repaired


def repair(run: RunConfig, report: AlignmentReport) -> RepairResult:
    """Make each sink hold exactly the expected chunk IDs, with their exact content, again (see above)."""
    result = RepairResult()
    sinks, status = run.open_sinks(), run.status_store()
    with metrics.timed("repair_alignment"):
        rewrite: dict[str, set[str]] = defaultdict(set)
        delete: dict[str, set[str]] = defaultdict(set)
        for name in report.counts:
            # A mislabelled chunk too: the re-write carries the recorded labels (`previous_version`), its
            # vectors and extractions come from the stores' result caches.
            restore = (
                report.missing[name] | report.altered.get(name, set()) | report.mislabelled.get(name, set())
            )
            for chunk_id in restore | report.extra[name]:
                try:
                    document_id = parse_chunk_id(chunk_id)[0]
                except ValueError as exc:
                    result.errors[chunk_id] = str(exc)
                    continue
                (rewrite if chunk_id in restore else delete)[name].add(document_id)
        rows = status.get_many({d for ids in (*rewrite.values(), *delete.values()) for d in ids})
        for name, document_ids in delete.items():
            for document_id in sorted(document_ids):
                row = rows.get(document_id)
                if row is not None and row.chunk_ids:
                    rewrite[name].add(document_id)  # known document: a re-write drops its stray chunks
                else:
                    sinks[name].delete(document_id)
                    result.deleted.setdefault(name, []).append(document_id)
        for name, document_ids in rewrite.items():
            for document_id in sorted(document_ids):
                try:
                    row = rows.get(document_id)
                    if row is None:
                        raise KeyError(f"{document_id} is not in the status table")
                    document, chunks = previous_version(row, run)
                    sinks[name].upsert(document, chunks)
                except Exception as exc:
                    result.errors[document_id] = f"[{name}] {type(exc).__name__}: {exc}"
                    continue
                result.rewritten.setdefault(name, []).append(document_id)
    return result


def previous_version(row: DocumentStatus, run: RunConfig) -> tuple[Document, list[Chunk]]:
    """The document's last successfully written chunks, from the chunk cache or by re-chunking the file."""
    if not row.content_hash or not row.chunk_fingerprint:
        raise ValueError(f"{row.document_id} has no recorded successful version")
    # With the recorded labels: those every store held for this version.
    key = ChunkKey(row.document_id, row.content_hash, row.chunk_fingerprint, tuple(row.labels))
    cache = run.chunk_cache()
    try:
        return cache.load(key)
    except KeyError:
        pass
    if not row.path or not row.source_system or not row.source_id:
        raise ValueError(f"{row.document_id}: not in the chunk cache and its source is unknown")
    document = load_item(
        SourceItem(row.source_system, row.source_id, openable_name(row.path), 0, 0, tuple(row.labels)),
        run.settings.max_document_bytes,
    )
    strategy = ChunkStrategy.from_values(row.strategy) if row.strategy else run.strategy
    chunks = shared_service().chunk(document, strategy, run.chunk_embedding(strategy))
    if [c.chunk_id for c in chunks] != row.chunk_ids:
        raise ValueError(f"{Path(row.path).name} changed since it was processed; the next ingest updates it")
    cache.put(document, row.chunk_fingerprint, chunks)
    return document, chunks


def verify_live(settings: SinkSettings) -> AlignmentReport:
    """The live generation's stores against its status table (`unichunk verify`, `Pipeline.verify`);
    publishes the gauges. The stores are opened for the check and closed after, unless already open."""
    pinned = reading_settings(settings)
    with flow_sinks(SINK_NAMES, pinned) as sinks:
        status = StatusStore.of(pinned, readonly=True)
        report = verify_alignment(
            sinks, expected=status.expected_chunk_ids(), labels=status.expected_labels()
        )
        report.add_documents(status.rows())
    record_alignment(report)
    return report
