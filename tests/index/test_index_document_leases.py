"""The document lease table: one holder per (generation, document) at a time, whoever asks and however.

Proves: `acquire` takes exactly the free, expired, own and dead-holder leases in one go; another holder is
refused until release or expiry; renewing extends; release frees only the holder's own; a killed holder's
leases free themselves at once, a live one's never; and concurrent acquirers (threads, and processes) never
both hold one lease. A rule-based model check covers any interleaving of those calls against a clock.
Every test runs on both backends (`records_settings`: the SQLite file, and PostgreSQL shared by workers).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import text

from unichunk.index.document_leases import DocumentLeases
from unichunk.index.process_identity import ProcessIdentity
from unichunk.sinks.config import SinkSettings

IDS = [f"doc_{n}" for n in range(6)]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_acquire_takes_what_is_free_and_refuses_what_another_holder_has(records_settings):
    leases = DocumentLeases.of(records_settings)
    assert leases.acquire("a", "g1", ["x", "y"], 60, label="run A") == {"x", "y"}
    assert leases.acquire("b", "g1", ["x", "y", "z"], 60, label="run B") == {"z"}  # the free one only
    assert leases.held_by_others("b", "g1", ["x", "y", "z"]) == {"x": "run A", "y": "run A"}
    assert leases.acquire("a", "g1", ["x", "z"], 60) == {"x"}  # its own again, not b's
    assert leases.acquire("b", "g2", ["x"], 60) == {"x"}  # another generation never conflicts
    assert leases.held("a", "g1") == {"x", "y"} and leases.held("b", "g1") == {"z"}


def test_release_frees_only_the_holders_own(records_settings):
    leases = DocumentLeases.of(records_settings)
    leases.acquire("a", "g", ["x", "y"], 60)
    leases.release("b", "g", ["x", "y"])  # not b's: nothing happens
    assert leases.acquire("b", "g", ["x", "y"], 60) == set()
    leases.release("a", "g", ["x"])
    assert leases.acquire("b", "g", ["x", "y"], 60) == {"x"}
    leases.release_all("a")
    assert leases.acquire("b", "g", ["y"], 60) == {"y"}
    assert leases.held_by_others("c", "g", ["x", "y"]).keys() == {"x", "y"}


def test_expired_leases_are_taken_over_and_renewing_extends_them(records_settings):
    clock = Clock()
    leases = DocumentLeases.of(records_settings, clock=clock)
    leases.acquire("a", "g", ["x", "y"], 10)
    clock.now += 8
    assert leases.renew("a", "g", ["x", "y"], 10) == {"x", "y"}
    clock.now += 8  # 16 s after taking them, 8 after renewing: still a's
    assert leases.acquire("b", "g", ["x"], 10) == set()
    assert leases.held_by_others("b", "g", ["x"]) == {"x": "a"}  # no label: the holder's name
    leases.acquire("a", "g", [], 10)  # acquiring anything renews all the holder's leases
    clock.now += 8
    assert leases.acquire("b", "g", ["x"], 10) == set()
    clock.now += 3  # 11 s of silence: expired
    assert leases.held_by_others("b", "g", ["x", "y"]) == {}
    assert leases.acquire("b", "g", ["x"], 10) == {"x"}
    # The late holder learns which it lost; renewing revives the one nobody took.
    assert leases.renew("a", "g", ["x", "y"], 10) == {"y"}
    assert leases.acquire("c", "g", ["y"], 10) == set()


def _hold_and_exit(settings: SinkSettings, ready: multiprocessing.synchronize.Event) -> None:
    DocumentLeases.of(settings).acquire("child", "g", ["x"], 600, label="child run")
    ready.set()
    os._exit(0)  # as a killed run: no release of any kind


def test_a_killed_holders_leases_are_taken_over_at_once_a_live_ones_never(records_settings):
    leases = DocumentLeases.of(records_settings)  # the parent has a connection pool before it forks
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    child = context.Process(target=_hold_and_exit, args=(records_settings, ready))
    child.start()
    assert ready.wait(30)
    child.join(30)
    assert leases.held_by_others("me", "g", ["x"]) == {}  # the 600 s ttl has not run out, the process has
    assert leases.acquire("me", "g", ["x"], 600) == {"x"}

    # A live holder in this process (another run beside this one) keeps its leases.
    leases.acquire("other run", "g", ["y"], 600)
    assert leases.acquire("me", "g", ["y"], 600) == set()
    # A holder this machine cannot check (another host) keeps them until its ttl runs out.
    remote = DocumentLeases.of(records_settings, process=ProcessIdentity("another-host", 1, ""))
    remote.acquire("remote run", "g", ["z"], 600)
    assert leases.acquire("me", "g", ["z"], 600) == set()


def test_a_reused_pid_is_not_taken_for_the_holder():
    me = ProcessIdentity.current()
    assert not me.is_gone()
    assert ProcessIdentity(me.machine, me.pid, "not-my-start-time").is_gone() == bool(me.started)
    assert not ProcessIdentity("another-host", 1, "").is_gone()


def _contend(
    settings: SinkSettings, holder: str, rounds: int, owners: dict[str, str], lock: threading.Lock
) -> list[str]:
    """Take random subsets of IDS; for each one held, claim it in `owners`, which must have been free."""
    leases = DocumentLeases.of(settings)
    rng = random.Random(holder)
    clashes = []
    for _ in range(rounds):
        got = leases.acquire(holder, "g", rng.sample(IDS, 3), 60)
        with lock:
            clashes += [f"{d}: {owners[d]} and {holder}" for d in got if d in owners]
            owners.update(dict.fromkeys(got, holder))
        time.sleep(rng.random() / 1000)
        with lock:
            for d in got:
                owners.pop(d, None)
        leases.release(holder, "g", got)
    return clashes


def test_concurrent_threads_never_hold_one_lease_together(records_settings):
    DocumentLeases.of(records_settings)
    owners: dict[str, str] = {}
    lock = threading.Lock()
    results: list[list[str]] = []
    threads = [
        threading.Thread(
            target=lambda h=f"t{n}": results.append(_contend(records_settings, h, 60, owners, lock))
        )
        for n in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(results) == 6 and [c for r in results for c in r] == []


def _contend_process(settings: SinkSettings, holder: str, counts, failures, start) -> None:  # type: ignore[no-untyped-def]
    """As `_contend`, across processes: `counts[i]` is how many holders think they hold IDS[i].

    Ends with `os._exit`: a child forked from a session that runs Prefect would otherwise run the at-exit
    hooks it inherited, and end with status 1 for reasons of its own."""
    code = 1
    try:
        leases = DocumentLeases.of(settings)
        rng = random.Random(holder)
        start.wait()  # both at once: a process that finished before the other started would prove nothing
        for _ in range(300):
            got = leases.acquire(holder, "g", rng.sample(IDS, 3), 60)
            indexes = [IDS.index(d) for d in got]
            with counts.get_lock():
                for i in indexes:
                    counts[i] += 1
                    if counts[i] > 1:
                        failures.value += 1
            time.sleep(rng.random() / 1000)
            with counts.get_lock():
                for i in indexes:
                    counts[i] -= 1
            leases.release(holder, "g", got)
        code = 0
    finally:
        os._exit(code)


def test_concurrent_processes_never_hold_one_lease_together(records_settings):
    DocumentLeases.of(records_settings)
    context = multiprocessing.get_context("fork")
    counts = context.Array("i", len(IDS))
    failures = context.Value("i", 0)
    start = context.Barrier(2)
    processes = [
        context.Process(target=_contend_process, args=(records_settings, f"p{n}", counts, failures, start))
        for n in range(2)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0, 0]
    assert failures.value == 0


class LeaseModel(RuleBasedStateMachine):
    """Any interleaving of acquire, renew, release and the clock moving, against a plain dict model."""

    records: SinkSettings  # set by the test: hypothesis builds many machines, each starts on empty tables

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.leases = DocumentLeases.of(self.records, clock=self.clock)
        with self.leases.db.write() as conn:
            conn.execute(text("DELETE FROM leases"))
            conn.execute(text("DELETE FROM holders"))
        self.owner: dict[tuple[str, str], str] = {}
        self.expiry: dict[str, float] = {}

    def _live(self, holder: str) -> bool:
        return self.expiry.get(holder, float("-inf")) > self.clock.now

    def _holder_of(self, key: tuple[str, str]) -> str | None:
        holder = self.owner.get(key)
        return holder if holder is not None and self._live(holder) else None

    @rule(
        holder=st.sampled_from("abc"),
        generation=st.sampled_from(["g1", "g2"]),
        ids=st.lists(st.sampled_from(IDS[:4]), max_size=4),
        ttl=st.sampled_from([1.0, 5.0]),
    )
    def acquire(self, holder: str, generation: str, ids: list[str], ttl: float) -> None:
        self.expiry[holder] = self.clock.now + ttl
        expected = set()
        for d in ids:
            current = self._holder_of((generation, d))
            if current in (None, holder):
                self.owner[(generation, d)] = holder
                expected.add(d)
        assert self.leases.acquire(holder, generation, ids, ttl) == expected

    @rule(holder=st.sampled_from("abc"), generation=st.sampled_from(["g1", "g2"]))
    def renew(self, holder: str, generation: str) -> None:
        if holder in self.expiry:
            self.expiry[holder] = self.clock.now + 5.0
        mine = {d for (g, d), h in self.owner.items() if g == generation and h == holder}
        assert self.leases.renew(holder, generation, IDS, 5.0) == mine

    @rule(
        holder=st.sampled_from("abc"),
        generation=st.sampled_from(["g1", "g2"]),
        ids=st.lists(st.sampled_from(IDS[:4])),
    )
    def release(self, holder: str, generation: str, ids: list[str]) -> None:
        for d in ids:
            if self.owner.get((generation, d)) == holder:
                del self.owner[(generation, d)]
        self.leases.release(holder, generation, ids)

    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0]))
    def wait(self, seconds: float) -> None:
        self.clock.now += seconds

    @invariant()
    def others_see_the_live_holders(self) -> None:
        for generation in ("g1", "g2"):
            seen = self.leases.held_by_others("nobody", generation, IDS)
            live = {d: h for (g, d), h in self.owner.items() if g == generation and self._live(h)}
            assert seen == live


def test_any_interleaving_matches_the_model(records_settings):
    LeaseModel.records = records_settings
    LeaseModel.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
    LeaseModel.TestCase().runTest()


def test_on_postgresql_expiry_is_judged_by_the_databases_clock(database_url, monkeypatch):
    """Workers on several machines share the table: a worker whose clock is an hour fast must neither
    take a live lease over nor see its own expire, and a ttl runs out by the server's clock."""
    settings = SinkSettings(data_dir="/nonexistent", database_url=database_url)
    honest = DocumentLeases.of(settings)
    assert honest.acquire("a", "g", ["x"], 600) == {"x"}
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)  # this process's clock is off
    fast = DocumentLeases.of(settings)
    assert fast.acquire("b", "g", ["x"], 600) == set()
    assert fast.held_by_others("b", "g", ["x"]) == {"x": "a"}
    assert fast.acquire("b", "g", ["y"], 2) == {"y"}
    assert honest.acquire("a", "g", ["y"], 600) == set()  # b's two seconds are not over by the server's clock
    time.sleep(2.5)
    assert honest.acquire("a", "g", ["y"], 600) == {"y"}  # now it is
    assert not Path("/nonexistent").exists()
