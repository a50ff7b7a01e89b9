"""What `unichunk status --json` prints and `GET /status` serves: one builder, so both say the same.

The generations (each registry row with its documents per state and expected chunks) and the live
generation's documents, without the pipeline's long bookkeeping fields (chunk IDs, strategy JSON).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from unichunk.index.generations import generation_counts, reading_settings, registry_of
from unichunk.index.registry import Generation
from unichunk.index.status import StatusStore
from unichunk.sinks.config import SinkSettings

HIDDEN_FIELDS = ("chunk_ids", "strategy")  # the pipeline's bookkeeping, long and not for reading


def sorted_generations(settings: SinkSettings) -> list[Generation]:
    return sorted(registry_of(settings).all(), key=lambda g: (g.state != "live", g.created_at))


def generations_json(settings: SinkSettings) -> dict[str, Any]:
    """The generations as `status --json` and `generations list --json` print them."""
    generations = sorted_generations(settings)
    return {
        "live": next((g.generation_id for g in generations if g.state == "live"), None),
        "generations": [
            {**dataclasses.asdict(g), "counts": generation_counts(settings, g.generation_id)}
            for g in generations
        ],
    }


def status_json(settings: SinkSettings | None = None, *, failed: bool = False) -> dict[str, Any]:
    """`unichunk status --json`: the generations, the live generation's counts and its documents."""
    settings = reading_settings(settings or SinkSettings())
    store = StatusStore.of(settings, readonly=True)
    return {
        **generations_json(settings),
        "counts": store.counts(),
        "documents": [
            {k: v for k, v in row.as_dict().items() if k not in HIDDEN_FIELDS}
            for row in store.rows(state="failed" if failed else None)
        ],
    }
