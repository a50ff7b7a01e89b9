"""`StopFlag.unless_stopped`: a model load that cannot check for a stop is not waited for once one is asked.

Real threads: the load is a function blocked on an event, as an import of torch is blocked on disk and CPU.
"""

from __future__ import annotations

import signal
import threading

import pytest

from unichunk.sinks.stop import StopFlag, StopRequested


def _installed() -> StopFlag:
    flag = StopFlag()
    flag.handler = lambda signum, frame: None  # a CLI command's handler is installed
    return flag


def test_a_load_returns_its_value_and_leaves_nothing_behind():
    flag = _installed()
    assert flag.unless_stopped(lambda a, b=0: a + b, 2, b=3) == 5
    assert not flag.abandoned_work()


def test_a_load_that_fails_raises_its_own_error():
    flag = _installed()

    def broken() -> None:
        raise OSError("model missing")

    with pytest.raises(OSError, match="model missing"):
        flag.unless_stopped(broken)


def test_a_stop_asked_during_a_load_returns_at_once_and_the_load_is_abandoned():
    flag = _installed()
    release = threading.Event()
    started = threading.Event()

    def slow_load() -> str:
        started.set()
        release.wait(60)
        return "model"

    threading.Timer(0.2, lambda: (started.wait(5), flag.request(signal.SIGTERM))).start()
    with pytest.raises(StopRequested):
        flag.unless_stopped(slow_load)
    assert flag.abandoned_work()  # still loading: the command must not wait for it
    release.set()
    flag.abandoned[0].join(5)
    assert not flag.abandoned_work()


def test_a_stop_asked_before_the_load_starts_nothing():
    flag = _installed()
    flag.request(signal.SIGINT)
    ran: list[int] = []
    with pytest.raises(StopRequested):
        flag.unless_stopped(ran.append, 1)
    assert ran == [] and not flag.abandoned


def test_without_a_stop_handler_the_load_runs_in_the_calling_thread():
    flag = StopFlag()  # no CLI command: a served process, a notebook
    assert flag.unless_stopped(threading.current_thread) is threading.current_thread()
