"""Prove the stores agree: compare the chunk IDs each sink holds with the IDs that should exist.

Because every sink stores the same chunk IDs, alignment is a set comparison. The expected set normally
comes from the pipeline's document status (the IDs each processed document was chunked into); without
it, every ID held by any sink is expected, so an ID that some sink lacks is reported missing there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sinks.base import Sink


@dataclass
class AlignmentReport:
    """Missing and extra chunk IDs per sink, compared with `expected_count` expected IDs."""

    expected_count: int
    counts: dict[str, int] = field(default_factory=dict)
    missing: dict[str, set[str]] = field(default_factory=dict)
    extra: dict[str, set[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.missing.values()) and not any(self.extra.values())

    def mismatch_count(self) -> int:
        return sum(len(v) for v in self.missing.values()) + sum(len(v) for v in self.extra.values())

    def as_dict(self, limit: int = 20) -> dict[str, Any]:
        """JSON-friendly summary; at most `limit` example IDs per list so a bad run stays readable."""
        return {
            "ok": self.ok,
            "expected": self.expected_count,
            "sinks": {
                name: {
                    "count": self.counts[name],
                    "missing": len(self.missing[name]),
                    "extra": len(self.extra[name]),
                    "missing_examples": sorted(self.missing[name])[:limit],
                    "extra_examples": sorted(self.extra[name])[:limit],
                }
                for name in self.counts
            },
        }


def verify_alignment(sinks: Mapping[str, Sink], expected: set[str] | None = None) -> AlignmentReport:
    """Compare every sink's `chunk_ids()` with `expected` (or with the union of all sinks)."""
    held = {name: sink.chunk_ids() for name, sink in sinks.items()}
    reference = expected if expected is not None else set().union(*held.values())
    report = AlignmentReport(expected_count=len(reference))
    for name, ids in held.items():
        report.counts[name] = len(ids)
        report.missing[name] = reference - ids
        report.extra[name] = ids - reference
    return report
