"""The settings a flow run works with: its caller's, handed over in a context variable, not a parameter.

An in-process caller (`unichunk.Pipeline`) wraps its flow calls in `caller_settings(settings, ...)`;
the flow reads them at its top (`flow_settings()`, `flow_strategy()`, `flow_metrics()`) and passes them
down, inside its `RunConfig` or as arguments. A run that starts in its own process (a served or deployed
run, a CLI command) has no caller in the process, so its flow builds them from the environment there:
that is its entry point.

Why not a flow parameter: Prefect writes every parameter of a run into its database and shows it in the UI
(pydantic masks `SecretStr` fields, but not a password inside a plain URL such as `redis://:pw@host`), and a
deployment's run form would grow every store field. A context variable is neither stored nor rendered, and
it reaches the flow function intact: Prefect 3 calls a sync flow's function in the caller's thread and
context (`prefect.flow_engine.run_flow_sync`), and runs its tasks in copies of that context
(`ThreadPoolTaskRunner`). Each thread has its own value, so two Pipelines with different settings can run
flows at the same time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from unichunk.chunking.config import ChunkStrategy, default_strategy
from unichunk.index.generations import settled_backend
from unichunk.index.metrics import MetricsSettings
from unichunk.sinks.config import SinkSettings


@dataclass(frozen=True)
class _Caller:
    settings: SinkSettings
    strategy: ChunkStrategy | None
    metrics: MetricsSettings | None


_CALLER: ContextVar[_Caller | None] = ContextVar("unichunk_caller_settings", default=None)


@contextmanager
def caller_settings(
    settings: SinkSettings,
    strategy: ChunkStrategy | None = None,
    metrics: MetricsSettings | None = None,
) -> Iterator[None]:
    """Flows called (in this thread) inside the block run with `settings`, with `strategy` where their
    parameters name none, and push their metrics where `metrics` says (None: nowhere)."""
    token = _CALLER.set(_Caller(settings, strategy, metrics))
    try:
        yield
    finally:
        _CALLER.reset(token)


def flow_settings() -> SinkSettings:
    """The caller's settings, or, for a run started in its own process, the environment's (read here, once
    per run: the flow's entry point); an `auto` MiniLM backend settled by the live index
    (`unichunk.index.generations.settled_backend`)."""
    caller = _CALLER.get()
    return settled_backend(caller.settings if caller is not None else SinkSettings())


def flow_strategy(given: ChunkStrategy | None = None) -> ChunkStrategy:
    """`given` (a flow parameter), else the caller's strategy, else the environment's (as `flow_settings`)."""
    if given is not None:
        return given
    caller = _CALLER.get()
    if caller is not None:
        return caller.strategy if caller.strategy is not None else default_strategy()
    return ChunkStrategy()


def flow_metrics() -> MetricsSettings:
    """Where the run pushes its metrics: the caller's choice (none unless it gave one), or, for a run
    started in its own process, the environment's (as `flow_settings`)."""
    caller = _CALLER.get()
    if caller is not None:
        return caller.metrics if caller.metrics is not None else MetricsSettings.model_construct()
    return MetricsSettings()
