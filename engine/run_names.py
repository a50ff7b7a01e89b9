"""Flow run names that say what a run is about, from what is known when it starts (its parameters):
`ingest · docs`, `reindex · 2026-11-23`, `ingest-shard · 2/4`, `ingest-document · notes/a.md`,
`delete-document · doc_0123…`, `rebuild · sentence 256`, `switch-generation · g1a2b3c4`, instead of
Prefect's random `graceful-bug`.

Each is a callable given to `@flow(flow_run_name=...)`: Prefect calls it when the run begins, with the
run's parameters in `prefect.runtime.flow_run.parameters` (pydantic models for a call in this process,
JSON for a deployment's run until validated: both are read). A name that cannot be made falls back to the
flow's name: naming must never fail a run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any

from prefect.runtime import flow_run

from unichunk.chunking.sources import default_source_name

NAME_PART_CHARS = 60
SEPARATOR = " · "

log = logging.getLogger(__name__)


def _field(value: Any, name: str) -> Any:
    """`value.name` or `value[name]`: a parameter as a model (in-process call) or as JSON (deployment)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _short(text: object) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= NAME_PART_CHARS else text[: NAME_PART_CHARS - 1] + "…"


def _named(flow_name: str, describe: Callable[[dict[str, Any]], str]) -> Callable[[], str]:
    def name() -> str:
        try:
            part = describe(flow_run.parameters or {})
        except Exception as exc:  # a name is a convenience: never fail a run over it
            log.debug("flow run name for %s not made: %s", flow_name, exc)
            return flow_name
        return f"{flow_name}{SEPARATOR}{_short(part)}" if part else flow_name

    name.__name__ = f"{flow_name.replace('-', '_')}_run_name"
    return name


def source_label(source: Any) -> str:
    """The source a run scans: its name (a folder's default one, `docs-1a2b3c4d`, if none is given), or the
    file(s) a list of paths names; `all sources` for a run of every recorded source."""
    if source is None:
        return "all sources"
    if name := _field(source, "source_system"):
        return str(name)
    paths = _field(source, "paths") or []
    if _field(source, "kind") == "paths" and paths:
        first = PurePath(str(paths[0])).name
        return first if len(paths) == 1 else f"{first} +{len(paths) - 1}"
    root = _field(source, "root")
    return default_source_name(str(root)) if root else "?"  # the name its documents get


def _ingest(parameters: dict[str, Any]) -> str:
    params = parameters.get("params")
    label = source_label(_field(params, "source"))
    return label + (" (dry run)" if _field(params, "dry_run") else "")


def _reindex(parameters: dict[str, Any]) -> str:
    when = flow_run.scheduled_start_time or datetime.now(UTC)
    return when.strftime("%Y-%m-%d") + (" (dry run)" if _field(parameters.get("params"), "dry_run") else "")


def _shard(parameters: dict[str, Any]) -> str:
    params = parameters.get("params")
    shard, shards, attempt = (_field(params, name) for name in ("shard", "shards", "attempt"))
    retry = f" (attempt {attempt})" if attempt and int(attempt) > 1 else ""
    return f"{int(shard) + 1}/{shards}{retry}"


def _ingest_document(parameters: dict[str, Any]) -> str:
    if source_id := parameters.get("source_id"):
        return str(source_id)
    return PurePath(str(parameters.get("path", ""))).name


def _delete_document(parameters: dict[str, Any]) -> str:
    return str(parameters.get("document_id", ""))


def _rebuild(parameters: dict[str, Any]) -> str:
    params = parameters.get("params")
    strategy = _field(params, "strategy")  # an exact strategy (a Python caller's), else the form's choice
    name = _field(strategy, "name") or _field(params, "chunker") or "auto"
    size = _field(strategy, "chunk_size") or _field(params, "chunk_size")
    return f"{name} {size}" if size else str(name)


def _switch(parameters: dict[str, Any]) -> str:
    return str(parameters.get("generation_id") or "previous")


def _drop(parameters: dict[str, Any]) -> str:
    return str(parameters.get("generation_id", ""))


ingest_run_name = _named("ingest", _ingest)
reindex_run_name = _named("reindex", _reindex)
shard_run_name = _named("ingest-shard", _shard)
ingest_document_run_name = _named("ingest-document", _ingest_document)
delete_document_run_name = _named("delete-document", _delete_document)
rebuild_run_name = _named("rebuild", _rebuild)
switch_run_name = _named("switch-generation", _switch)
drop_run_name = _named("drop-generation", _drop)
