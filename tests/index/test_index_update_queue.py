"""The webhook update queue: what a run claims, what it settles, what stays for the next run.

Proves, on both backends (`records_settings`: SQLite, and PostgreSQL): a claim takes every unsettled entry
of the source (and those named), never a settled one, never another source's; an entry enqueued after a
claim stays pending for the next run; a retried webhook sets its entry pending again, and the run that had
claimed it then cannot settle it; a stopped run's claims go back to pending; a refused webhook's entry is
withdrawn only while no run has claimed it; settled entries are swept after they have been kept long
enough; and any text a file name may hold comes back exactly (a property test over arbitrary strings).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.index.update_queue import KEEP_SETTLED_SECONDS, UpdateQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        self.now += 1.0  # every call later than the last: entries keep the order they were queued in
        return self.now


def _queue(records_settings, clock: Clock | None = None) -> UpdateQueue:  # type: ignore[no-untyped-def]
    queue = UpdateQueue.of(records_settings)
    if clock is not None:
        queue.clock = clock
    return queue


def test_a_claim_takes_every_pending_update_of_the_source_and_settles_them(records_settings):
    queue = _queue(records_settings, Clock())
    for n in range(3):
        queue.enqueue(f"e{n}", "docs", f"a{n}.md", f"/src/a{n}.md")
    queue.enqueue("other", "mail", "x.eml", "/mail/x.eml")
    claimed = queue.claim("run A", "docs", also=["e1"])
    assert [u.entry for u in claimed] == ["e0", "e1", "e2"]  # oldest first, the other source left alone
    assert {u.state for u in claimed} == {"claimed"} and {u.holder for u in claimed} == {"run A"}
    assert queue.get("other").state == "pending"  # type: ignore[union-attr]
    queue.enqueue("e3", "docs", "a3.md", "/src/a3.md")  # arrives while run A is applying the others
    assert queue.finish("run A", {"e0": None, "e1": "cannot read file", "e2": None}) == 3
    assert [(u.entry, u.state, u.error) for u in queue.entries("docs")] == [
        ("e0", "done", None),
        ("e1", "failed", "cannot read file"),
        ("e2", "done", None),
        ("e3", "pending", None),  # left for the next run
    ]
    assert queue.get("e0").settled and queue.get("e0").holder == "run A"  # type: ignore[union-attr]
    # The next run takes only what is still unsettled; a settled entry named is not claimed again.
    assert [u.entry for u in queue.claim("run B", "docs", also=["e0"])] == ["e3"]


def test_without_a_source_only_the_named_entries_are_claimed(records_settings):
    queue = _queue(records_settings, Clock())
    queue.enqueue("mine", "docs", "a.md", "/src/a.md")
    queue.enqueue("theirs", "docs", "b.md", "/src/b.md")
    assert [u.entry for u in queue.claim("run A", None, also=["mine"])] == ["mine"]
    assert queue.get("theirs").state == "pending"  # type: ignore[union-attr]


def test_a_retried_webhook_is_pending_again_and_its_old_claim_cannot_settle_it(records_settings):
    queue = _queue(records_settings, Clock())
    queue.enqueue("e", "docs", "a.md", "/src/a.md")
    queue.claim("run A", "docs")
    queue.enqueue("e", "docs", "a.md", "/src/a.md")  # the sender's retry: run A may have read the file before
    assert queue.finish("run A", {"e": None}) == 0
    assert queue.get("e").state == "pending"  # type: ignore[union-attr]
    assert len(queue.entries()) == 1  # one entry per webhook, however often it is retried
    queue.claim("run B", "docs")
    queue.finish("run B", {"e": None})
    queue.enqueue("e", "docs", "a.md", "/src/a.md")  # a retry after it was applied: applied again
    assert queue.get("e").state == "pending"  # type: ignore[union-attr]


def test_a_stopped_runs_claims_go_back_and_a_dead_runs_are_claimed_again(records_settings):
    queue = _queue(records_settings, Clock())
    queue.enqueue("e1", "docs", "a.md", "/src/a.md")
    queue.enqueue("e2", "docs", "b.md", "/src/b.md")
    queue.claim("run A", "docs")
    queue.release("run A", ["e1"])
    assert queue.get("e1").state == "pending" and queue.get("e2").state == "claimed"  # type: ignore[union-attr]
    # run A was killed holding e2: the next run under the store lock takes it over.
    assert [u.entry for u in queue.claim("run B", "docs")] == ["e1", "e2"]
    assert queue.finish("run A", {"e2": None}) == 0  # the dead run's late word changes nothing
    assert queue.finish("run B", {"e1": None, "e2": None}) == 2


def test_a_refused_webhook_is_withdrawn_only_while_no_run_claimed_it(records_settings):
    queue = _queue(records_settings, Clock())
    queue.enqueue("e1", "docs", "a.md", "/src/a.md")
    queue.enqueue("e2", "docs", "b.md", "/src/b.md")
    assert queue.withdraw("e1") is True and queue.get("e1") is None
    queue.claim("run A", "docs")
    assert queue.withdraw("e2") is False  # a run read the file after it was accepted: it stays
    assert queue.get("e2").state == "claimed"  # type: ignore[union-attr]


def test_settled_entries_are_swept_once_kept_long_enough(records_settings):
    clock = Clock()
    queue = _queue(records_settings, clock)
    queue.enqueue("old", "docs", "a.md", "/src/a.md")
    queue.claim("run A", "docs")
    queue.finish("run A", {"old": None})
    queue.enqueue("waiting", "docs", "b.md", "/src/b.md")
    clock.now += KEEP_SETTLED_SECONDS
    queue.enqueue("new", "docs", "c.md", "/src/c.md")
    claimed = queue.claim("run B", "docs")
    assert [u.entry for u in claimed] == ["waiting", "new"]  # an unsettled entry is never swept
    assert queue.get("old") is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40)
    | st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), min_size=1, max_size=4)
)
def test_any_name_comes_back_exactly(records_settings, name: str):
    """NUL, newlines, markup and the surrogate escapes of a name that is not UTF-8 all round-trip."""
    queue = _queue(records_settings)
    entry = f"e-{abs(hash(name))}"
    queue.enqueue(entry, name, name, "/src/" + name)
    (claimed,) = [u for u in queue.claim("run", name, also=[entry]) if u.entry == entry]
    assert (claimed.source_system, claimed.source_id, claimed.path) == (name, name, "/src/" + name)
    queue.finish("run", {entry: f"failed: {name}"})
    assert queue.get(entry).error == f"failed: {name}"  # type: ignore[union-attr]
