"""Where a document's access labels come from when it is listed: its source's default labels and the
source's sidecar rules (a path pattern -> labels, `hr/**=hr`), united with any the document carries itself.

A rule is written `PATTERN=LABEL[,LABEL...]`; the pattern is a gitignore-style glob matched, without
regard to case, against the document's path in its source (`source_id`), as the source's own patterns
are. Every rule that matches adds its labels: the rules only ever widen who may read, on top of the
source's defaults.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import pathspec

from unichunk.chunking.access_labels import BadLabel, normalise_labels


@dataclass(frozen=True)
class LabelRule:
    """One sidecar rule: the documents whose source path matches `pattern` carry `labels` too."""

    pattern: str
    labels: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> LabelRule:
        """`PATTERN=LABEL[,LABEL...]` as a rule; `BadLabel` says what is wrong with a bad one."""
        pattern, sep, labels = text.rpartition("=")
        pattern = pattern.strip()
        if not sep or not pattern:
            raise BadLabel(f"bad label rule {text!r}: write it PATTERN=LABEL[,LABEL...], e.g. 'hr/**=hr'")
        found = normalise_labels(part for part in labels.split(",") if part.strip())
        if not found:
            raise BadLabel(f"bad label rule {text!r}: it names no label after '='")
        return cls(pattern, found)

    def __str__(self) -> str:
        return f"{self.pattern}={','.join(self.labels)}"

    @cached_property
    def _spec(self) -> pathspec.PathSpec:
        return pathspec.PathSpec.from_lines("gitwildmatch", [self.pattern.lower()])

    def matches(self, source_id: str) -> bool:
        # As `DirectorySource.matches`: a newline in a name is matched as NUL (pathspec's `.` misses it).
        return self._spec.match_file(source_id.lower().replace("\n", "\0"))


def parse_rules(texts: Iterable[str]) -> tuple[LabelRule, ...]:
    """Rules written `PATTERN=LABEL[,LABEL...]`, checked and normalised (their text form is `str(rule)`)."""
    return tuple(LabelRule.parse(text) for text in texts)


def effective_labels(
    source_id: str, defaults: Iterable[str] = (), rules: Iterable[LabelRule] = (), own: Iterable[str] = ()
) -> tuple[str, ...]:
    """A document's labels: its source's `defaults`, those of every rule its path matches, and its `own`."""
    found = [*defaults, *own]
    for rule in rules:
        if rule.matches(source_id):
            found.extend(rule.labels)
    return normalise_labels(found)
