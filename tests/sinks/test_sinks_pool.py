"""The process-wide sink pool (`unichunk.sinks.pool`) with a real embedded vector store (qdrant-edge in tmp_path):
who holds a sink decides when it closes, so no flow closes a sink under a reader, no reader under a flow.

The race these pin down made `test_rebuild_serves_the_old_generation...` fail once under load with "the
sink is closed": a search that resolved the live generation the moment a rebuild switched to it was handed
the rebuild's own sinks from the pool, and the rebuild closed them when it ended, mid-search. Here the
interleaving is forced with events: the "flow" thread holds its sinks until the reader has been handed
them, then ends.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from unichunk.sinks import pool
from unichunk.sinks.base import SinkError
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.pool import flow_sinks, get_sinks, held_sinks, release_sinks

WAIT = 60  # seconds: only a broken test waits this long


@pytest.fixture
def settings(tmp_path: Path) -> SinkSettings:
    pinned = SinkSettings(data_dir=tmp_path, vector_engine="edge", qdrant_url=None).for_generation("gpool")
    yield pinned
    pool.close_all_sinks()


def test_a_flow_ending_leaves_open_the_sinks_a_reader_was_handed_meanwhile(settings: SinkSettings) -> None:
    flow_holds, reader_has_them = threading.Event(), threading.Event()
    flow_sink: list[object] = []

    def flow() -> None:
        with flow_sinks(["vectors"], settings) as sinks:  # the flow opens the store
            flow_sink.append(sinks["vectors"])
            flow_holds.set()
            assert reader_has_them.wait(WAIT)
        # the flow has ended here, with a reader still holding what it opened

    thread = threading.Thread(target=flow)
    thread.start()
    assert flow_holds.wait(WAIT)
    vectors = get_sinks(["vectors"], settings)["vectors"]  # what `unichunk.retrieval.open_readers` does
    assert vectors is flow_sink[0]  # the reader was handed the flow's own sink: the race's interleaving
    reader_has_them.set()
    thread.join(WAIT)
    assert not thread.is_alive()

    assert vectors.count() == 0  # still open for the reader (it raised "the sink is closed" before)
    release_sinks(["vectors"], settings)  # the reader lets go: nobody holds it now, so it closes
    assert not pool._open
    with pytest.raises(SinkError, match="the sink is closed"):  # the control: a closed sink says so
        vectors.count()


def test_a_reader_letting_go_leaves_open_the_sinks_a_flow_is_using(settings: SinkSettings) -> None:
    kept = get_sinks(["vectors"], settings)["vectors"]  # a reader opened it first
    with flow_sinks(["vectors"], settings) as sinks:
        assert sinks["vectors"] is kept
        release_sinks(["vectors"], settings)
        assert sinks["vectors"].count() == 0  # not closed under the flow
    assert not pool._open  # closed when the flow, its last holder, ended: nothing leaks


def test_a_flows_tasks_get_only_sinks_the_flow_holds(settings: SinkSettings) -> None:
    """A task asking for a store its flow has not opened (under the store lock) is refused, and nothing is
    opened for it."""
    with pytest.raises(RuntimeError, match="not held by a flow"):
        held_sinks(["vectors"], settings)
    assert not pool._open
    get_sinks(["vectors"], settings)  # a reader's sink is not a flow's either
    with pytest.raises(RuntimeError, match="not held by a flow"):
        held_sinks(["vectors"], settings)
    with flow_sinks(["vectors"], settings) as sinks:
        assert held_sinks(["vectors"], settings) == sinks
