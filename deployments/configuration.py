"""Every environment variable unichunk reads, rendered from the settings models into docs/configuration.md.

    python -m deployments.configuration > docs/configuration.md

Generated rather than written by hand so the table cannot drift from the code: a test renders it again
and compares. Each settings model is one concern's home (see `deployments.settings`).
"""

from __future__ import annotations

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from chunking.config import ChunkStrategy, LoaderSettings
from deployments.settings import ServiceSettings
from index.metrics import MetricsSettings
from sinks.config import SinkSettings

# (model, heading) in the order a reader meets them.
SETTINGS_MODELS: tuple[tuple[type[BaseSettings], str], ...] = (
    (SinkSettings, "Stores and models (`sinks.config.SinkSettings`)"),
    (
        ChunkStrategy,
        "Chunking (`chunking.config.ChunkStrategy`; also a flow parameter, a form in the Prefect UI)",
    ),
    (LoaderSettings, "Reading documents (`chunking.config.LoaderSettings`)"),
    (ServiceSettings, "The service (`deployments.settings.ServiceSettings`)"),
    (MetricsSettings, "Metrics (`index.metrics.MetricsSettings`)"),
)

HEADER = """# Configuration

Every setting is an environment variable with an embedded default. Generated from the settings models by
`python -m deployments.configuration`; do not edit by hand. Prefect's own variables (`PREFECT_API_URL`:
unset, the CLI starts or reuses the data dir's local Prefect server, see docs/operations.md) are
Prefect's, documented by Prefect.
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
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - the documented command
    print(configuration_markdown(), end="")
