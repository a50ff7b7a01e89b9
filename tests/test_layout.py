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
# The repository's folders the distribution installs inside `unichunk` (pyproject's package-dir), bottom to
# top with the public face (`unichunk/` itself) between the flows and the interfaces: a layer may import
# only itself and those before it.
FOLDERS = ("chunking", "sinks", "index", "retrieval", "tasks", "engine", "flows", "deployments")
LAYERS = ("chunking", "sinks", "index", "retrieval", "tasks", "engine", "flows", "unichunk", "deployments")
GENERATIONS_MODULE = "unichunk.index.generations"


def _modules() -> Iterator[tuple[str, Path]]:
    for folder in (*FOLDERS, "unichunk"):
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            yield ".".join(parts if folder == "unichunk" else ("unichunk", *parts)), path


MODULES = dict(_modules())


def _layer(module: str) -> str | None:
    """The layer of one of our modules (`unichunk.sinks.base` -> sinks), None for anybody else's."""
    parts = module.split(".")
    if parts[0] != "unichunk":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in FOLDERS else "unichunk"


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
        own = LAYERS.index(_layer(module) or "")
        for imported, line in _imports(path):
            top = _layer(imported)
            if top is not None and LAYERS.index(top) > own:
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
    """Only `unichunk.index.generations` asks the registry which generation is live (and `unichunk.index.registry` defines
    it); everyone else gets settings already pinned from there."""
    askers = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "live"
                and module not in (GENERATIONS_MODULE, "unichunk.index.registry")
            ):
                askers.append(f"{module}:{node.lineno}")
    assert askers == []
    users = {
        m for m, p in MODULES.items() if re.search(r"\bGenerationRegistry\b", p.read_text(encoding="utf-8"))
    }
    assert users <= {"unichunk.index", "unichunk.index.registry", GENERATIONS_MODULE}, users


# Modules allowed to import inside functions, each for an import cost that its docstring or a comment at the import names
# (figures: benchmarks/README.md, "Why some imports are lazy"): parsers (unichunk.chunking.loaders), spaCy (the graph's extractor), Prefect (the CLI,
# `unichunk.local_stack`'s settings scope, which every CLI command imports before Prefect may load, and
# `unichunk.Pipeline`, which `import unichunk` for the chunking types alone should not pay for), redis-py
# (the FalkorDB server's health checks, which `unichunk.local_stack` and so every CLI command would pay for),
# torch (set for one query's embedding in `unichunk.sinks.vectors.minilm`; it loads with the model, on first use),
# SQLAlchemy (~0.16 s: `unichunk.service_registry` needs it only in server mode, and every CLI command that a
# running service answers looks the service up), the embedders (torch or an HTTP client, which `unichunk.index.run`
# needs only for the `semantic` strategy, while every run computes its fingerprint there), the Neo4j driver
# (0.15-0.55 s: `unichunk.sinks.graph.backends` imports it for a Neo4j backend only, never in FalkorDB runs),
# onnxruntime (~0.5 s), onnx (~0.9 s) and torch with transformers for the one-time export (seconds:
# `unichunk.sinks.vectors.minilm_onnx`, `.onnx_export`, `unichunk.sinks.device`, which learns from torch's
# version alone that a CPU build has no CUDA), Prefect and the flows (`unichunk.pipeline` loads them when a write runs one, so reads and the CLI's
# start-up do not pay for them; `unichunk.deployments.cli.flow_runs` configures Prefect's logging first),
# Prefect in the stop and crash-marking helpers (`unichunk.engine.stop`, `unichunk.engine.run_records`: the CLI's
# signal handlers and `Pipeline.status` import them, and load Prefect only when a run or a dead run needs it),
# Prefect's logging set-up in `unichunk.run_logs` (`unichunk.pipeline` imports it; it loads when a flow runs).
LAZY_IMPORTERS = {
    "unichunk.run_logs",
    "unichunk.engine.stop",
    "unichunk.engine.run_records",
    "unichunk.pipeline",
    "unichunk.deployments.cli.flow_runs",
    "unichunk.index.run",
    "unichunk.sinks.graph.backends",
    "unichunk.service_registry",
    "unichunk.chunking.loaders",
    "unichunk.sinks.graph.extraction",
    "unichunk.sinks.graph.falkordb_server",
    "unichunk.sinks.vectors.minilm",
    "unichunk.sinks.vectors.minilm_onnx",
    "unichunk.sinks.vectors.onnx_export",
    "unichunk.sinks.device",
    "unichunk",
    "unichunk.deployments.cli.main",
    "unichunk.local_stack",
    "unichunk.retrieval.graph_search",
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


@pytest.mark.parametrize(
    "face",
    [
        "unichunk.chunking",
        "unichunk.index",
        "unichunk.retrieval",
        "unichunk.sinks.vectors",
        "unichunk.sinks.graph",
    ],
)
def test_lazy_package_faces_resolve_every_name_they_list(face: str) -> None:
    """The faces load their modules on first use (`lazy_loader`); a name listed under the wrong module
    would fail only when first used, so every listed name is resolved here."""
    module = importlib.import_module(face)
    assert module.__all__, face
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{face}.{name}"


def test_sinks_never_read_the_registry() -> None:
    for module, path in MODULES.items():
        if _layer(module) == "sinks":
            assert not any(_layer(i) == "index" for i, _ in _imports(path)), module


def test_tasks_hold_only_thin_task_wrappers() -> None:
    for module, path in MODULES.items():
        if _layer(module) != "tasks" or module == "unichunk.tasks":
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
    for module, path in MODULES.items():
        assert not module.split(".")[-1].startswith("bench"), module
        for imported, line in _imports(path):
            assert imported.split(".")[0] not in ("benchmarks", "rank_bm25", "chonkie"), f"{module}:{line}"


def test_the_distribution_installs_every_folder_inside_unichunk() -> None:
    """pyproject's explicit package list and package-dir mapping cover every package folder, so the wheel
    ships all of them under the one import name (tests/unichunk/test_unichunk_wheel.py installs it)."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {f"unichunk.{f}": f for f in FOLDERS}
    on_disk = {m for m, p in MODULES.items() if p.name == "__init__.py" and "__pycache__" not in p.parts}
    assert sorted(setuptools["packages"]) == sorted(on_disk)


def test_every_import_of_our_code_goes_through_the_one_import_name() -> None:
    """No file of the repository (code, tests, benchmarks) imports `chunking`, `flows`, ... as top-level
    names: in an installed unichunk they do not exist, and in a checkout they would load a second copy."""
    bare = []
    for path in sorted(REPO.rglob("*.py")):
        if {".venv", ".git", "build"} & set(path.relative_to(REPO).parts):
            continue
        for imported, line in _imports(path):
            if imported.split(".")[0] in FOLDERS:
                bare.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert bare == []


@pytest.mark.parametrize("package", [*FOLDERS, "unichunk", "benchmarks", "tests", "docs"])
def test_readme_layout_names_every_package(package: str) -> None:
    layout = (REPO / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    assert f"- `{package}/`" in layout


def test_readme_stays_within_12_kb() -> None:
    """The README is the front page: what does not fit goes to docs/ (the brief's limit, 12,000 bytes)."""
    assert len((REPO / "README.md").read_bytes()) <= 12_000


def test_readme_layout_names_no_package_that_is_gone() -> None:
    layout = (REPO / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    for named in re.findall(r"^- `([\w.]+)/`", layout, re.M):
        assert (REPO / named).is_dir(), named


# The interfaces (the CLI, the HTTP API, the MCP server) reach the index only through the application
# layer (`unichunk` and its own modules: `Pipeline`, `unichunk.interface`, `.results`, `.errors`,
# `.settings`, and the service's own: `.warm_stores`, `.replay_cache`, `.service_registry`), never through
# the chunking library, the stores, the records, retrieval or the flows below it.
INTERFACES = ("unichunk.deployments.cli", "unichunk.deployments.service", "unichunk.deployments.mcp")
INTERNALS = ("chunking", "sinks", "index", "retrieval", "engine", "flows", "tasks")


def test_interfaces_reach_the_index_only_through_the_application_layer() -> None:
    reaching = []
    for module, path in MODULES.items():
        if not module.startswith(INTERFACES):
            continue
        for imported, line in _imports(path):
            parts = imported.split(".")
            if parts[0] == "unichunk" and len(parts) > 1 and parts[1] in INTERNALS:
                reaching.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert reaching == []


def test_every_error_class_derives_from_the_one_root() -> None:
    """docs/design.md's promise: an error class of the package (a private one, used for control flow
    inside its module, aside) derives from `UnichunkError`, so catching it catches every error we raise."""
    from unichunk.chunking.errors import UnichunkError

    outside = []
    for module, path in MODULES.items():
        names = [
            node.name
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef)
            and not node.name.startswith("_")
            and any(
                ast.unparse(base).endswith(("Error", "Exception", "Failed", "Unavailable"))
                for base in node.bases
            )
        ]
        if not names:
            continue
        loaded = importlib.import_module(module)
        for name in names:
            cls = getattr(loaded, name)
            # an Exception: a signal's BaseException (`StopBeforeServing`, as KeyboardInterrupt) is no error
            if issubclass(cls, Exception) and not issubclass(cls, UnichunkError):
                outside.append(f"{module}.{name}")
    assert outside == []
