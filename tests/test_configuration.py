"""Configuration stays documented: docs/configuration.md is what the settings models render, and every
variable the docs or the compose file name is one the code reads."""

from __future__ import annotations

import re
from pathlib import Path

from deployments.configuration import SETTINGS_MODELS, configuration_markdown, variables

REPO = Path(__file__).resolve().parents[1]
# Variables the docs may name that are not ours: Prefect's, the test servers', the benchmarks' data locator.
OTHERS = {
    "PREFECT_API_URL",
    "PREFECT_UI_API_URL",
    "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL",  # Prefect's own; unichunk sets it for run processes
    "PROMETHEUS_URL",
    "NEO4J_URI",
    "NEO4J_USER",
    "NEO4J_PASSWORD",
    "UNICHUNK_EVAL_DIR",
}
NAME = re.compile(r"`((?:UNICHUNK|PUSHGATEWAY|PREFECT|PROMETHEUS|NEO4J)_[A-Z0-9_]+)`")


def test_the_configuration_page_is_what_the_settings_render() -> None:
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == configuration_markdown(), (
        "run: python -m deployments.configuration > docs/configuration.md"
    )


def test_every_setting_is_described() -> None:
    undescribed = [name for name, (_, _, field) in variables().items() if not field.description]
    assert undescribed == []


def test_every_variable_the_docs_name_exists() -> None:
    known = set(variables()) | OTHERS
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        named = set(NAME.findall(page.read_text(encoding="utf-8")))
        assert named <= known, f"{page.name} names variables the code does not read: {sorted(named - known)}"


def test_the_readme_table_names_real_variables_with_their_defaults() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) >= 10
    known = variables()
    for row in rows:
        name = NAME.search(row).group(1)  # type: ignore[union-attr]
        if name in OTHERS:
            continue
        assert name in known, name
        _, _, field = known[name]
        if isinstance(field.default, str) and field.default:
            assert f"`{field.default}`" in row, f"README gives another default for {name}: {row}"


def test_no_variable_is_read_by_two_settings_models() -> None:
    """Each default is written once: a variable two models read (as UNICHUNK_DATA_DIR once was) would have two."""
    assert len(variables()) == sum(len(model.model_fields) for model, _ in SETTINGS_MODELS)
