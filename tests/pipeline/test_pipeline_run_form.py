"""The Prefect UI's run form of the served deployments, read from the schema they register: it asks for a
source and a chunking strategy with its size and overlap, the rest folded under `advanced`, and every run
the full parameters allowed is still possible."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from prefect.utilities.callables import parameter_schema

from unichunk.chunking.config import ChunkStrategy
from unichunk.deployments.serving.serve import build_deployments
from unichunk.deployments.settings import ServiceSettings
from unichunk.engine.params import (
    ADVANCED_CHUNKING_FIELDS,
    FORM_STRATEGY_FIELDS,
    IngestAdvanced,
    IngestParams,
    RebuildParams,
)
from unichunk.index.defaults import DEFAULT_BATCH_SIZE
from unichunk.sinks.config import SinkSettings

FORMS = {
    "ingest": ("IngestParams", ["source", "chunker", "chunk_size", "chunk_overlap", "dry_run", "advanced"]),
    "reindex": ("IngestParams", ["source", "chunker", "chunk_size", "chunk_overlap", "dry_run", "advanced"]),
    "rebuild": (
        "RebuildParams",
        ["source", "chunker", "chunk_size", "chunk_overlap", "switch", "gate", "advanced"],
    ),
}


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _names(schema: dict[str, Any]) -> set[str]:
    """Every property name anywhere in the schema."""
    return {name for model in schema["definitions"].values() for name in model.get("properties", {})}


def test_the_run_form_asks_for_a_source_and_a_strategy_with_its_size(tmp_path: Path) -> None:
    deployments = {d.name: d for d in build_deployments(ServiceSettings(source_root=tmp_path))}
    for name, (model, fields) in FORMS.items():
        # what the deployment registers as its parameter_openapi_schema: its flow's parameter schema
        module, _, attr = deployments[name].entrypoint.rpartition(".")
        schema = parameter_schema(getattr(importlib.import_module(module), attr)).model_dump()
        assert list(schema["properties"]) == ["params"], name
        params = _resolve(schema, schema["properties"]["params"])
        assert params["title"] == model and list(params["properties"]) == fields, name
        assert params["properties"]["chunker"]["title"] == "Strategy"
        advanced = _resolve(schema, params["properties"]["advanced"])
        chunking = _resolve(schema, advanced["properties"]["chunking"])
        assert "paragraph_separator" in chunking["properties"]  # folded away, still there
        assert "strategy" not in _names(schema)  # an exact strategy is for Python callers only
        assert not _names(schema) & set(SinkSettings.model_fields) - {"data_dir"}  # no store settings
    assert "data_dir" not in _names(schema)


def test_every_chunking_setting_and_run_option_is_still_reachable_from_the_form() -> None:
    form_fields = set(FORM_STRATEGY_FIELDS.values()) | set(ADVANCED_CHUNKING_FIELDS)
    assert set(ChunkStrategy.model_fields) - form_fields == {"embedding", "semantic_model"}  # set by the run
    assert set(IngestAdvanced.model_fields) == {
        "sinks",
        "delete_missing",
        "batch_size",
        "shards",
        "shard_retries",
        "chunking",
    }


def test_a_filled_form_makes_the_run_it_says_over_the_configured_strategy() -> None:
    configured = ChunkStrategy.from_values({"name": "sentence", "tokenizer": "o200k_base"})
    form = IngestParams.model_validate(
        {
            "source": {"kind": "directory", "root": "/corpus"},
            "chunker": "paragraph",
            "chunk_size": 300,
            "advanced": {"sinks": ["keywords"], "chunking": {"paragraph_separator": r"\n---\n"}},
        }
    )
    strategy = form.chunk_strategy(configured)
    assert (strategy.name, strategy.chunk_size, strategy.paragraph_separator) == (
        "paragraph",
        300,
        r"\n---\n",
    )
    assert strategy.tokenizer == "o200k_base"  # left unset in the form: as configured
    assert (form.sinks, form.batch_size, form.delete_missing) == (["keywords"], DEFAULT_BATCH_SIZE, True)
    assert IngestParams.model_validate({}).chunk_strategy(configured) == configured  # nothing set
    rebuild = RebuildParams.model_validate({"chunk_size": 256, "advanced": {"retention_hours": 2}})
    assert rebuild.chunk_strategy(configured).chunk_size == 256 and rebuild.retention_hours == 2


def test_python_callers_pass_an_exact_strategy_and_run_options_at_the_top_level() -> None:
    exact = ChunkStrategy.from_values({"name": "fixed_chars", "chunk_size": 200, "chunk_overlap": 0})
    params = IngestParams(strategy=exact, sinks=["keywords"], batch_size=7, shards=2, delete_missing=False)
    assert params.chunk_strategy(ChunkStrategy.from_values({})) is exact
    assert (params.sinks, params.batch_size, params.shards, params.delete_missing) == (
        ["keywords"],
        7,
        2,
        False,
    )
    # a run's stored parameters come back as the same run (a served run of older JSON too)
    assert IngestParams.model_validate_json(params.model_dump_json()) == params
    assert IngestParams.model_validate({"batch_size": 10}).batch_size == 10
