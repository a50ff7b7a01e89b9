"""Settings are values passed down, read from the code itself: below the entry points nothing reads
unichunk's own variables (`UNICHUNK_*`) from `os.environ` or builds a settings object (which would read
them), and no module writes a setting into `os.environ`.

A pydantic-settings class reads the environment whenever it is built, with arguments or without, so
building one is reading the environment. The entry points that may (`ENTRY_POINTS`) are the flows' own
entry (`unichunk.flows.run_settings`: a run that starts in its own process) and the record-moving command;
the CLI, `serve`/`worker`, the webhook app factory and `Pipeline.__init__` live above the layers checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from pydantic_settings import BaseSettings

from unichunk.chunking.config import ChunkStrategy
from unichunk.deployments.settings import ServiceSettings
from unichunk.index.metrics import MetricsSettings
from unichunk.sinks.config import SinkSettings

REPO = Path(__file__).resolve().parents[1]
# The layers below the entry points: they get their settings as arguments.
BELOW = ("chunking", "sinks", "index", "retrieval", "tasks", "engine", "flows")
# Every folder whose modules must not write a setting into the environment.
EVERYWHERE = (*BELOW, "unichunk", "deployments")
# (module path, function) allowed to build settings from the environment, and why.
ENTRY_POINTS = {
    ("flows/run_settings.py", "flow_settings"): "a run started in its own process: its entry point",
    ("flows/run_settings.py", "flow_strategy"): "a run started in its own process: its entry point",
    ("flows/run_settings.py", "flow_metrics"): "a run started in its own process: its entry point",
    ("index/move_records.py", "main"): "the `python -m unichunk.index.move_records` command",
}
SETTINGS_CLASSES: tuple[type[BaseSettings], ...] = (
    SinkSettings,
    ChunkStrategy,
    MetricsSettings,
    ServiceSettings,
)


def _variables(cls: type[BaseSettings]) -> set[str]:
    """The environment variables `cls` reads (its prefix + field names, or a field's alias)."""
    prefix = cls.model_config.get("env_prefix", "")
    names = set()
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        names.add((alias if isinstance(alias, str) else f"{prefix}{name}").upper())
    return names


SETTING_VARIABLES = set().union(*(_variables(cls) for cls in SETTINGS_CLASSES))
# UNICHUNK_* variables that are not settings: `unichunk serve` re-executes itself once in Prometheus's
# multiprocess mode and tells the new process so through these (unichunk.deployments.serving.multiprocess_metrics).
HANDOVER_MARKERS = {"UNICHUNK_METRICS_PREPARED_PID", "UNICHUNK_METRICS_TEMPORARY"}


def _files(folders: tuple[str, ...]) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((REPO / folder).rglob("*.py"))


def _constants(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level names bound to strings, or to tuples/lists/dicts of strings (their keys)."""
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            values = _strings(node.value, {})
            for target in targets:
                if isinstance(target, ast.Name) and values:
                    found[target.id] = values
    return found


def _strings(node: ast.expr, constants: dict[str, set[str]]) -> set[str]:
    """The strings an expression can be, as far as the file itself says (empty: cannot tell)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name):
        return constants.get(node.id, set())
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_strings(e, constants) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.Dict):
        return set().union(*(_strings(k, constants) for k in node.keys if k is not None))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "items":
        return _strings(node.func.value, constants)
    return set()


@cache
def _all_constants() -> dict[str, set[str]]:
    """Module-level string constants of every module, by name (a loop may walk an imported one)."""
    found: dict[str, set[str]] = {}
    for path in _files(EVERYWHERE):
        for name, values in _constants(ast.parse(path.read_text(encoding="utf-8"))).items():
            found.setdefault(name, set()).update(values)
    return found


def _loop_bindings(tree: ast.Module, constants: dict[str, set[str]]) -> dict[str, set[str]]:
    """Names bound by `for name(, ...) in <constant>(.items())`: the strings they take."""
    bound: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For):
            target = node.target.elts[0] if isinstance(node.target, ast.Tuple) else node.target
            if isinstance(target, ast.Name):
                bound.setdefault(target.id, set()).update(_strings(node.iter, constants))
    return bound


def _is_environ(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _environment_uses(path: Path) -> Iterator[tuple[str, int, set[str]]]:
    """("read" | "write", line, the variables it may name; empty: cannot tell) for each use."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {**_all_constants(), **_constants(tree)}
    constants = {**constants, **_loop_bindings(tree, constants)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            kind = "read" if isinstance(node.ctx, ast.Load) else "write"
            yield kind, node.lineno, _strings(node.slice, constants)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, method = node.func.value, node.func.attr
            key = _strings(node.args[0], constants) if node.args else set()
            if _is_environ(owner) and method in ("get",):
                yield "read", node.lineno, key
            elif _is_environ(owner) and method in ("setdefault", "update", "pop", "__setitem__"):
                yield "write", node.lineno, key
            elif isinstance(owner, ast.Name) and owner.id == "os" and method in ("getenv", "putenv"):
                yield ("read" if method == "getenv" else "write"), node.lineno, key
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            yield "read", node.lineno, _strings(node.left, constants)


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


def test_no_module_below_the_entry_points_reads_unichunk_variables() -> None:
    reads = [
        f"{_where(path, line)} reads {sorted(names) or 'a variable it computes'}"
        for path in _files(BELOW)
        for kind, line, names in _environment_uses(path)
        if kind == "read" and (not names or any(n.startswith("UNICHUNK_") for n in names))
    ]
    assert reads == []


def test_no_module_writes_a_setting_into_the_environment() -> None:
    writes = [
        f"{_where(path, line)} writes {sorted(names) or 'a variable it computes'}"
        for path in _files(EVERYWHERE)
        for kind, line, names in _environment_uses(path)
        if kind == "write"
        and (
            not names
            or any(n.startswith("UNICHUNK_") or n in SETTING_VARIABLES for n in names - HANDOVER_MARKERS)
        )
    ]
    assert writes == []
    assert not HANDOVER_MARKERS & SETTING_VARIABLES
    assert {
        "UNICHUNK_DATA_DIR",
        "UNICHUNK_CHUNK_NAME",
        "PUSHGATEWAY_URL",
    } <= SETTING_VARIABLES  # the check sees


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(enclosing function name, node) for every node; "" at module level."""

    def walk(node: ast.AST, function: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            yield name, child
            yield from walk(child, name)

    return walk(tree, "")


def _built(node: ast.AST, names: set[str]) -> str | None:
    """The settings class `node` builds (a call, a default factory, a validation), if any."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
        return node.func.id  # SinkSettings(...), with arguments or not: it reads the rest
    if (
        isinstance(node, ast.keyword)
        and node.arg == "default_factory"
        and isinstance(node.value, ast.Name)
        and node.value.id in names
    ):
        return node.value.id
    if (
        isinstance(node, ast.Attribute)
        and node.attr in ("model_validate", "model_validate_json")
        and isinstance(node.value, ast.Name)
        and node.value.id in names
    ):
        return f"{node.value.id}.{node.attr}"  # pydantic-settings fills what is missing from the env
    return None


def test_no_module_below_the_entry_points_builds_settings_from_the_environment() -> None:
    names = {cls.__name__ for cls in SETTINGS_CLASSES}
    built = []
    for path in _files(BELOW):
        where = str(path.relative_to(REPO))
        for function, node in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            made = _built(node, names)
            if made and (where, function) not in ENTRY_POINTS:
                line = getattr(node, "lineno", getattr(getattr(node, "value", None), "lineno", 0))
                built.append(f"{_where(path, line)} builds {made} in {function or 'the module'}")
    assert built == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The scans find a read, a write and a build where there is one (else an empty answer proves nothing)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\n"
        "KEY = 'UNICHUNK_DATA_DIR'\n"
        "os.environ.get('UNICHUNK_GRAPH_NAME')\n"
        "os.environ[KEY] = 'x'\n"
        "for name, value in {'UNICHUNK_CHUNK_NAME': 'auto'}.items():\n"
        "    os.environ.setdefault(name, value)\n"
    )
    uses = list(_environment_uses(sample))
    assert ("read", 3, {"UNICHUNK_GRAPH_NAME"}) in uses
    assert ("write", 4, {"UNICHUNK_DATA_DIR"}) in uses
    assert ("write", 6, {"UNICHUNK_CHUNK_NAME"}) in uses
