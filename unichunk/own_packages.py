"""Load unichunk's own top-level packages from where unichunk is installed, before anything else can.

unichunk's packages have plain names (`chunking`, `sinks`, `index`, `retrieval`, `tasks`, `flows`,
`deployments`: the layout the project asked for). Python searches the working directory (or the script's
folder) first, so a notebook next to its own `tasks.py` or `flows.py` would make `import flows.ingest`
find that file instead, and fail deep inside. `import unichunk` therefore loads each of them from the
folder `unichunk` itself came from and registers it in `sys.modules`; every later `import tasks.chunk`
then resolves inside our package, whatever the working directory holds.

The cost: in a process that imported unichunk, those seven names are ours. A module of the user's with
one of these names, imported before unichunk, is reported with what to do, never silently replaced.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

INSTALLED_AT = Path(__file__).resolve().parents[1]
PACKAGES = ("chunking", "sinks", "index", "retrieval", "tasks", "flows", "deployments")


class ShadowedPackageError(ImportError):
    """A module named like one of unichunk's packages was imported from elsewhere before unichunk."""


def load_own_packages() -> None:
    """Import each of `PACKAGES` from `INSTALLED_AT` (once; a no-op when they are loaded already)."""
    for name in PACKAGES:
        loaded = sys.modules.get(name)
        if loaded is not None:
            if _is_ours(loaded.__file__):
                continue
            raise ShadowedPackageError(
                f"a module named {name!r} was imported from {loaded.__file__} before unichunk, which needs "
                f"that name for its own package in {INSTALLED_AT / name}: import unichunk first, or rename "
                "that module"
            )
        init = INSTALLED_AT / name / "__init__.py"
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)]
        )
        if spec is None or spec.loader is None:  # pragma: no cover - the install itself is broken
            raise ImportError(f"unichunk's package {name!r} is missing from {INSTALLED_AT}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise


def _is_ours(file: str | None) -> bool:
    return file is not None and Path(file).resolve().parents[1] == INSTALLED_AT
