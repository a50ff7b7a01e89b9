"""Configuration stays documented: docs/configuration.md is what the settings models render, and every
variable the docs or the compose file name is one the code reads."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from unichunk.deployments.configuration import (
    OTHER_VARIABLES,
    SETTINGS_MODELS,
    configuration_markdown,
    variables,
)

REPO = Path(__file__).resolve().parents[1]
# Variables the docs may name that no settings model reads: the configuration page's last table, and
# Prefect's UI variable that docker-compose.yml sets for the Prefect server.
OTHERS = {name for name, _, _ in OTHER_VARIABLES} | {"PREFECT_UI_API_URL"}
NAME = re.compile(r"`((?:UNICHUNK|PUSHGATEWAY|PREFECT|PROMETHEUS|NEO4J|POSTGRES)_[A-Z0-9_]+)`")

# Where the code is: the packages, the benchmarks, and the tests (whose servers read variables too).
CODE_DIRS = (
    "chunking",
    "sinks",
    "index",
    "retrieval",
    "tasks",
    "flows",
    "unichunk",
    "deployments",
    "benchmarks",
)
# Any name read from or written to the environment: os.environ[...], .get/.setdefault/.pop, os.getenv.
ENV_ACCESS = re.compile(
    r"""(?:environ(?:\.(?:get|setdefault|pop))?\(?\[?|getenv\()\s*["']([A-Z][A-Z0-9_]*)["']"""
)
# Our own prefixes, wherever the code names them (an ENV_VAR = "UNICHUNK_..." constant, an error message).
OUR_NAMES = re.compile(r"\b((?:UNICHUNK|PUSHGATEWAY|PROMETHEUS)_[A-Z0-9_]*[A-Z0-9])\b")


def _code_files(*, tests: bool) -> list[Path]:
    files = [path for folder in CODE_DIRS for path in sorted((REPO / folder).rglob("*.py"))]
    if tests:  # this file's examples of what the scan finds are not reads
        files += [path for path in sorted((REPO / "tests").rglob("*.py")) if path != Path(__file__).resolve()]
    return files


def variables_the_code_reads() -> dict[str, set[str]]:
    """Variable -> the files that read or name it."""
    found: dict[str, set[str]] = {}
    for path in _code_files(tests=True):
        text = path.read_text(encoding="utf-8")
        names = set(ENV_ACCESS.findall(text))
        if path.is_relative_to(REPO / "tests"):
            names -= {"UNICHUNK_DATA_DIR"}  # tests set settings variables; they read none of their own
        else:
            names |= set(OUR_NAMES.findall(text))  # tests also name bogus ones on purpose
        for name in names:
            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_variable_the_code_reads_has_a_row_in_the_configuration_table() -> None:
    """A new os.environ.get("X") or UNICHUNK_X without a settings field or an OTHER_VARIABLES row fails."""
    known = set(variables()) | {name for name, _, _ in OTHER_VARIABLES}
    missing = {name: sorted(files) for name, files in variables_the_code_reads().items() if name not in known}
    assert missing == {}, (
        f"add these to a settings model or unichunk.deployments.configuration.OTHER_VARIABLES: {missing}"
    )
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in page for name in known)


def test_the_code_scan_finds_what_it_must() -> None:
    """The scan itself can fail: it sees a read through os.environ.get, a constant naming our variable, and
    the settings models' variables named in messages."""
    found = variables_the_code_reads()
    assert {"TIKTOKEN_CACHE_DIR", "UNICHUNK_EVAL_DIR", "PROMETHEUS_URL", "UNICHUNK_DEBUG"} <= set(found)
    assert "UNICHUNK_QDRANT_URL" in found and "PUSHGATEWAY_URL" in found
    assert ENV_ACCESS.findall('os.environ.get("NEW_ONE")') == ["NEW_ONE"]
    assert ENV_ACCESS.findall("os.getenv('NEW_ONE', '')") == ["NEW_ONE"]
    assert ENV_ACCESS.findall('os.environ["NEW_ONE"] = x') == ["NEW_ONE"]


def test_every_variable_docker_compose_interpolates_is_documented() -> None:
    """${VAR} in docker-compose.yml is read from the operator's shell: each one needs a row too."""
    text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    yaml.safe_load(text)  # well-formed
    interpolated = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text))
    known = set(variables()) | {name for name, _, _ in OTHER_VARIABLES}
    assert interpolated and interpolated <= known, sorted(interpolated - known)


def test_the_configuration_page_is_what_the_settings_render() -> None:
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == configuration_markdown(), (
        "run: python -m unichunk.deployments.configuration > docs/configuration.md"
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
