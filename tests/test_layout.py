"""The layout's rules, read from the code itself: one-way imports, no cycles, one answer to "which
generation?", thin tasks, no benchmark code shipped, and a README that lists every package."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Bottom to top: a package may import only itself and those before it.
LAYERS = ("chunking", "sinks", "index", "retrieval", "tasks", "flows", "unichunk", "deployments")
GENERATIONS_MODULE = "index.generations"


def _modules() -> Iterator[tuple[str, Path]]:
    for package in LAYERS:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


MODULES = dict(_modules())


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, inside functions too."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c` imports the module a.b.c when there is one, else names from a.b.
            found += [
                (
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in MODULES
                    else node.module,
                    node.lineno,
                )
                for alias in node.names
            ]
    return found


def test_no_package_imports_one_above_it() -> None:
    upward = []
    for module, path in MODULES.items():
        own = LAYERS.index(module.split(".")[0])
        for imported, line in _imports(path):
            top = imported.split(".")[0]
            if top in LAYERS and LAYERS.index(top) > own:
                upward.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert upward == []


def test_no_import_cycles_between_modules() -> None:
    graph = {m: {i for i, _ in _imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert cycles == []


def test_the_live_generation_is_resolved_in_one_module() -> None:
    """Only `index.generations` asks the registry which generation is live (and `index.registry` defines
    it); everyone else gets settings already pinned from there."""
    askers = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "live"
                and module not in (GENERATIONS_MODULE, "index.registry")
            ):
                askers.append(f"{module}:{node.lineno}")
    assert askers == []
    users = {
        m for m, p in MODULES.items() if re.search(r"\bGenerationRegistry\b", p.read_text(encoding="utf-8"))
    }
    assert users <= {"index", "index.registry", GENERATIONS_MODULE}, users


# Modules allowed to import inside functions, each for an import cost measured and stated in its docstring
# or beside the import: parsers (chunking.loaders), spaCy (the graph's extractor), Prefect (the CLI, and
# `unichunk.Pipeline`, which `import unichunk` for the chunking types alone should not pay for), redis-py
# (the FalkorDB server's health checks, which `deployments.stack` and so every CLI command would pay for),
# torch (set for one query's embedding in `sinks.vectors.minilm`; it loads with the model, on first use),
# SQLAlchemy (~0.16 s: `deployments.service_file` needs it only in server mode, and every CLI command that a
# running service answers looks the service up), the embedders (torch or an HTTP client, which `index.run`
# needs only for the `semantic` strategy, while every run computes its fingerprint there), the Neo4j driver
# (0.15-0.55 s: `sinks.graph.backends` imports it for a Neo4j backend only, never in FalkorDB runs).
LAZY_IMPORTERS = {
    "index.run",
    "sinks.graph.backends",
    "deployments.service_file",
    "chunking.loaders",
    "sinks.graph.extraction",
    "sinks.graph.falkordb_server",
    "sinks.vectors.minilm",
    "unichunk",
    "deployments.cli",
}


def test_imports_sit_at_module_top_unless_a_measured_cost_says_otherwise() -> None:
    inner = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                isinstance(sub, ast.Import | ast.ImportFrom) for sub in ast.walk(node)
            ):
                inner.add(module)
    assert inner <= LAZY_IMPORTERS, inner - LAZY_IMPORTERS


@pytest.mark.parametrize("face", ["chunking", "index", "retrieval", "sinks.vectors", "sinks.graph"])
def test_lazy_package_faces_resolve_every_name_they_list(face: str) -> None:
    """The faces load their modules on first use (`lazy_loader`); a name listed under the wrong module
    would fail only when first used, so every listed name is resolved here."""
    module = importlib.import_module(face)
    assert module.__all__, face
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{face}.{name}"


def test_sinks_never_read_the_registry() -> None:
    for module, path in MODULES.items():
        if module.startswith("sinks"):
            assert not any(i.startswith("index") for i, _ in _imports(path)), module


def test_tasks_hold_only_thin_task_wrappers() -> None:
    for module, path in MODULES.items():
        if not module.startswith("tasks.") or module == "tasks":
            continue
        functions = [
            n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)
        ]
        assert functions, f"{module} defines no task"
        for fn in functions:
            decorators = [ast.unparse(d) for d in fn.decorator_list]
            assert any(d.startswith("task(") for d in decorators), f"{module}.{fn.name} is not a @task"
            body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            assert len(body) <= 6, (
                f"{module}.{fn.name} holds logic ({len(body)} statements): move it to index/"
            )


def test_shipped_packages_hold_no_benchmark_code() -> None:
    shipped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert sorted(p.rstrip("*") for p in shipped["include"]) == sorted(LAYERS)
    for module, path in MODULES.items():
        assert not module.split(".")[-1].startswith("bench"), module
        for imported, line in _imports(path):
            assert imported.split(".")[0] not in ("benchmarks", "rank_bm25", "chonkie"), f"{module}:{line}"


@pytest.mark.parametrize("package", [*LAYERS, "benchmarks", "tests", "docs"])
def test_readme_layout_names_every_package(package: str) -> None:
    layout = (REPO / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    assert f"- `{package}/`" in layout


def test_readme_layout_names_no_package_that_is_gone() -> None:
    layout = (REPO / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    for named in re.findall(r"^- `([\w.]+)/`", layout, re.M):
        assert (REPO / named).is_dir(), named
