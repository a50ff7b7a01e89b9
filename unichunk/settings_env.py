"""Hand a `Pipeline`'s settings to the flows it runs, through the one channel they read: the environment.

The flows build their settings from `UNICHUNK_*` variables (`SinkSettings()`, `ChunkStrategy()`), as a served
run in its own process must. A `Pipeline(settings=...)` given in Python therefore sets those variables
for the length of each call, every field of the settings it was given, and restores the previous values
after, so the flow runs it starts see exactly the settings the notebook passed. The environment is the
process's: two Pipelines with different settings must not run calls at the same time from two threads
(each call holds `_ENV_LOCK` to make that a wait, not a mix).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings

_ENV_LOCK = threading.RLock()


def settings_environment(settings: BaseSettings) -> dict[str, str | None]:
    """`UNICHUNK_<FIELD>` -> value for every field of `settings` (None: the variable must be unset)."""
    prefix = settings.model_config.get("env_prefix", "")
    env: dict[str, str | None] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        env[f"{prefix}{name}".upper()] = _as_text(value)
    return env


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float | Path):
        return str(value)
    return json.dumps(value)  # lists and dicts, as pydantic-settings parses complex fields


@contextmanager
def environment(overrides: dict[str, str | None]) -> Iterator[None]:
    """Set (or unset, for None) these variables for the block; the previous values come back after."""
    with _ENV_LOCK:
        saved = {key: os.environ.get(key) for key in overrides}
        try:
            for key, value in overrides.items():
                _put(key, value)
            yield
        finally:
            for key, value in saved.items():
                _put(key, value)


def _put(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
