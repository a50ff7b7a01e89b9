"""Names a module re-exports from elsewhere, imported when first asked for (PEP 562 `__getattr__`).

The public face and the result types re-export names of heavier layers (Prefect, the stores, the
chunker); importing those for `unichunk --version` or a CLI command that asks a running service would cost
the start-up they exist to avoid. lazy_loader does this for packages' own submodules; these names live in
other packages.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(module_name: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that imports `name` from `names[name]` on first use and keeps it there."""

    def __getattr__(name: str) -> Any:
        source = names.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        setattr(sys.modules[module_name], name, value)
        return value

    return __getattr__
