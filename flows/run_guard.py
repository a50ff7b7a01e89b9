"""What every flow a CLI command runs in-process does around its body: it stops when asked, and it leaves a
trace of its process, so a run killed outright is marked Crashed later (not Running for good).

`guarded` wraps a flow function (under `@flow`): SIGTERM answered by the application's stop handler instead
of Prefect's crash bridge (`unichunk.engine.stop.signals_stop_runs`), the run's process recorded under the
data dir (`unichunk.engine.run_records`), and a run stopped when asked (`RunInterrupted`) ending Cancelled,
with a warning line in its log saying what the next run does.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints

from prefect import get_run_logger

from unichunk.engine.run_records import recording_flow_run
from unichunk.engine.stop import RunInterrupted, cancelled, signals_stop_runs
from unichunk.flows.run_settings import flow_settings

F = TypeVar("F", bound=Callable[..., Any])


def guarded(fn: F) -> F:
    """`fn`'s body stoppable and recorded (see the module docstring); for a flow function, under `@flow`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        dry_run = any(getattr(given, "dry_run", False) is True for given in (*args, *kwargs.values()))
        with signals_stop_runs(), recording_flow_run(flow_settings().data_dir, create=not dry_run):
            try:
                return fn(*args, **kwargs)
            except RunInterrupted as exc:
                get_run_logger().info("%s", exc)
                return cancelled(exc)

    # Prefect reads the parameters' types from the signature: resolved here, in the flow's own module.
    wrapper.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    wrapper.__annotations__ = get_type_hints(fn)
    return wrapper  # type: ignore[return-value]
