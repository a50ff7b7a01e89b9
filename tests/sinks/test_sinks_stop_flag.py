"""`StopFlag.unless_stopped`: a model load or an embedding call that cannot check for a stop is not waited
for once one is asked.

Real threads: the load is a function blocked on an event, as an import of torch is blocked on disk and CPU.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from tests.documents import make_document
from tests.sinks.test_sinks_qdrant import HashEmbedder
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.stop import STOP, StopFlag, StopRequested
from unichunk.sinks.vectors.qdrant_edge import EdgeQdrantSink


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


class BlockedAtSecondCall(HashEmbedder):
    """Hash vectors, counting the texts embedded; its second call blocks until `release` (as a 32-text
    MiniLM call runs for 10-20 s on a loaded laptop) while `block` is set."""

    def __init__(self) -> None:
        super().__init__(dimension=16)
        self.texts: list[str] = []
        self.calls = 0
        self.block = True
        self.entered, self.release = threading.Event(), threading.Event()

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.block and self.calls == 2:
            self.entered.set()
            self.release.wait(120)
        self.texts.extend(texts)
        return super().embed(texts)


def test_a_stop_during_an_embedding_call_is_not_waited_for_and_what_was_embedded_is_kept(
    tmp_path: Path,
) -> None:
    """The vector sink's prepare, on a real store, stopped while its embedder is inside its second call:
    the prepare raises `StopRequested` while that call still runs (a Ctrl-C does not wait for it; the call
    is left behind, unused), and the next prepare embeds only the texts the first call did not cover."""
    texts = ["Ownership moves values.", "Borrowing lends them.", "Lifetimes bound them.", "Traits share."]
    doc, chunks = make_document("doc_a", texts)
    embedder = BlockedAtSecondCall()
    outcome: list[str] = []
    STOP.handler = lambda signum, frame: None  # a CLI command's handler is installed
    try:
        # two texts per embedding call
        with EdgeQdrantSink(SinkSettings(data_dir=tmp_path, embedding_batch_size=2), embedder) as sink:

            def prepare() -> None:
                try:
                    sink.prepare([(doc, chunks)])
                    outcome.append("prepared")
                except StopRequested:
                    outcome.append("stopped")

            preparing = threading.Thread(target=prepare)
            preparing.start()
            assert embedder.entered.wait(60), "the embedder was never called twice"
            STOP.request(signal.SIGINT)
            preparing.join(60)  # a bound against a hang, not a timing: the call is still blocked
            assert not preparing.is_alive() and outcome == ["stopped"], outcome
            assert STOP.abandoned_work()  # the call still runs: the command exits without it
            assert sink.count() == 0  # nothing written
            first = list(embedder.texts)
            assert len(first) == 2
    finally:
        embedder.release.set()
        for thread in STOP.abandoned:
            thread.join(30)
        STOP.abandoned.clear()
        STOP.handler = None
        STOP.clear()

    embedder.block, embedder.texts = False, []
    with EdgeQdrantSink(SinkSettings(data_dir=tmp_path, embedding_batch_size=2), embedder) as sink:
        again = sink.prepare([(doc, chunks)])
    assert sorted(embedder.texts) == sorted(set(texts) - set(first))  # the first call's vectors reused
    assert (again.stats["embedded_chunks"], again.stats["reused_chunks"]) == (2, 2)
