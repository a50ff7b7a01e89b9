"""Every environment variable unichunk reads, rendered from the settings models into docs/configuration.md.

    python -m unichunk.deployments.configuration > docs/configuration.md

Generated rather than written by hand so the table cannot drift from the code: a test renders it again
and compares. Each settings model is one concern's home (see `unichunk.deployments.settings`).
"""

from __future__ import annotations

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from unichunk.chunking.config import ChunkStrategy
from unichunk.deployments.settings import ServiceSettings
from unichunk.index.metrics import MetricsSettings
from unichunk.sinks.config import SinkSettings

# (model, heading) in the order a reader meets them.
SETTINGS_MODELS: tuple[tuple[type[BaseSettings], str], ...] = (
    (SinkSettings, "Stores and models (`unichunk.sinks.config.SinkSettings`)"),
    (
        ChunkStrategy,
        "Chunking (`unichunk.chunking.config.ChunkStrategy`; also a flow parameter, a form in the Prefect UI)",
    ),
    (ServiceSettings, "The service (`unichunk.deployments.settings.ServiceSettings`)"),
    (MetricsSettings, "Metrics (`unichunk.index.metrics.MetricsSettings`)"),
)

# Variables unichunk reads or sets that no settings model holds: other tools' (which unichunk sets only
# when unset, or passes on), and those of the tests and benchmarks. (variable, where, meaning).
# tests/test_configuration.py scans the code: a variable read anywhere must be here or in a model.
OTHER_VARIABLES: tuple[tuple[str, str, str], ...] = (
    (
        "PREFECT_API_URL",
        "Prefect; the CLI, the webhook receiver",
        "The Prefect server to use. Unset: the CLI starts or reuses the data dir's local Prefect server "
        "(docs/operations.md); the receiver emits its events to it.",
    ),
    ("PREFECT_SERVER_ANALYTICS_ENABLED", "Prefect; set by the CLI unless set", "`false`: no telemetry."),
    ("DO_NOT_TRACK", "Prefect and others; set by the CLI unless set", "`1`: no telemetry."),
    ("PREFECT_LOGGING_LEVEL", "Prefect; set by the CLI unless set", "`WARNING` for Prefect's own loggers."),
    (
        "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL",
        "Prefect; set by the CLI unless set",
        "`INFO`: the flow-run lines the Prefect UI shows.",
    ),
    (
        "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL",
        "Prefect; set by the CLI unless set",
        "`INFO`: the task-run lines the Prefect UI shows.",
    ),
    (
        "HF_HUB_OFFLINE",
        "Hugging Face; set by the CLI unless set",
        "`1`: models load from the installed packages, never a hub.",
    ),
    (
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "Hugging Face; set by the CLI and the MCP server unless set",
        "`1`: no download bars.",
    ),
    (
        "PROMETHEUS_MULTIPROC_DIR",
        "prometheus_client; set by `unichunk serve` unless set",
        "Where the serving process and its flow runs write their metric samples (multiprocess mode); "
        "unset: `<data dir>/prometheus-multiproc`. Cleared when `serve` starts.",
    ),
    (
        "UNICHUNK_METRICS_PREPARED_PID",
        "set by `unichunk serve` for itself",
        "The pid that prepared the multiprocess directory before re-executing itself; never set it.",
    ),
    (
        "UNICHUNK_METRICS_TEMPORARY",
        "set by `unichunk serve` for itself",
        "In server mode, the pid whose temporary multiprocess directory is removed at its exit; never set it.",
    ),
    (
        "TOKENIZERS_PARALLELISM",
        "Hugging Face tokenizers; set by the CLI unless set",
        "`false`: no fork warnings.",
    ),
    (
        "TIKTOKEN_CACHE_DIR",
        "tiktoken; `unichunk.chunking.tokenizer`",
        "Where tiktoken's BPE files are. Unset: the ones LlamaIndex ships (offline).",
    ),
    ("UNICHUNK_EVAL_DIR", "benchmarks", "The third-party evaluation data (`benchmarks.evaldata`)."),
    ("PROMETHEUS_URL", "tests", "A running Prometheus to use instead of starting one."),
    (
        "POSTGRES_URL",
        "tests",
        "A running PostgreSQL (its admin database) to create test databases in, instead of starting one.",
    ),
    ("NEO4J_URI", "tests", "Also run the graph tests on this Neo4j server (`bolt://...`)."),
    ("NEO4J_USER", "tests", "User for NEO4J_URI."),
    ("NEO4J_PASSWORD", "tests; docker-compose.yml", "Password for NEO4J_URI; in compose, Neo4j's password."),
    ("NEO4J_DATABASE", "tests", "Database for NEO4J_URI (unset: the server's default)."),
    ("CI", "tests", "`true`: a test server that cannot start fails the test instead of skipping it."),
    ("TRANSFORMERS_OFFLINE", "tests", "`1`: set by the test suite unless set."),
    (
        "UNICHUNK_SOURCES",
        "docker-compose.yml",
        "Host directory mounted at /sources for the worker and the receiver (default: the sample corpus).",
    ),
    ("POSTGRES_PASSWORD", "docker-compose.yml", "Password of the Prefect server's Postgres database."),
    (
        "UNICHUNK_DB_PASSWORD",
        "docker-compose.yml",
        "Password of unichunk's own PostgreSQL (`unichunk-db`, the records behind UNICHUNK_DATABASE_URL).",
    ),
    ("GRAFANA_ADMIN_PASSWORD", "docker-compose.yml", "Grafana's admin password (default: `admin`)."),
    (
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
        "Prefect; set by the test suite unless set",
        "`120`: a loaded machine may start a Prefect server slowly.",
    ),
)

HEADER = """# Configuration

Every setting is an environment variable with an embedded default. Generated from the settings models by
`python -m unichunk.deployments.configuration`; do not edit by hand. The last table lists the other variables
the code reads or sets (other tools', the tests' and the benchmarks'); a test scans the code so that a
variable read anywhere has a row here.
"""


def env_name(model: type[BaseSettings], name: str, field: FieldInfo) -> str:
    """The variable a field is read from: its alias, else the model's prefix and the field name."""
    if isinstance(field.validation_alias, str):
        return field.validation_alias
    return f"{model.model_config.get('env_prefix', '')}{name}".upper()


def variables() -> dict[str, tuple[type[BaseSettings], str, FieldInfo]]:
    """Variable name -> (model, field name, field), for every settings model."""
    return {
        env_name(model, name, field): (model, name, field)
        for model, _ in SETTINGS_MODELS
        for name, field in model.model_fields.items()
    }


def _default(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def configuration_markdown() -> str:
    lines = [HEADER]
    for model, heading in SETTINGS_MODELS:
        lines += [f"## {heading}", "", "| variable | default | meaning |", "|---|---|---|"]
        for name, field in model.model_fields.items():
            description = (field.description or "").replace("|", "\\|")
            lines.append(f"| `{env_name(model, name, field)}` | {_default(field)} | {description} |")
        lines.append("")
    lines += [
        "## Other variables (not unichunk settings)",
        "",
        "| variable | read by | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {where} | {meaning} |" for name, where, meaning in OTHER_VARIABLES]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - the documented command
    print(configuration_markdown(), end="")
