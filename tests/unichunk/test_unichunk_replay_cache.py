"""The webhook replay cache on each backend (`records_settings`): a key is accepted once until it expires,
a released reservation can be made again, and receivers sharing the cache (a restarted one, or several
replicas on one database) never both accept one key, even when they ask at the same moment."""

from __future__ import annotations

import threading

from unichunk.replay_cache import ReplayCache
from unichunk.sinks.database import open_database


def _cache(settings) -> ReplayCache:  # type: ignore[no-untyped-def]
    return ReplayCache(open_database(settings, settings.data_dir / "webhook" / "replay.db"))


def test_a_key_is_accepted_once_until_it_expires(records_settings):
    first, restarted = _cache(records_settings), _cache(records_settings)
    assert first.reserve({"sig:a": 100.0, "dlv:a": 50.0}, now=10.0)
    assert not first.reserve({"sig:b": 100.0, "dlv:a": 50.0}, now=11.0)  # one known key refuses all
    assert not restarted.reserve({"dlv:a": 60.0}, now=12.0)  # the table, not the memory, remembers
    assert restarted.reserve({"sig:b": 100.0}, now=12.0)  # nothing of the refused reservation was kept
    assert restarted.reserve({"dlv:a": 90.0}, now=51.0)  # expired: accepted again
    restarted.release(["sig:b"])
    assert _cache(records_settings).reserve({"sig:b": 100.0}, now=13.0)  # released: the retry goes through


def test_receivers_sharing_the_cache_never_both_accept_a_key(records_settings):
    caches = [_cache(records_settings) for _ in range(4)]
    accepted: list[str] = []
    start = threading.Barrier(len(caches))

    def receive(cache: ReplayCache, name: str) -> None:
        start.wait()
        for n in range(25):
            if cache.reserve({f"dlv:{n}": 1000.0, f"sig:{n}-{name}": 1000.0}, now=1.0):
                accepted.append(f"dlv:{n}")

    threads = [threading.Thread(target=receive, args=(c, str(i))) for i, c in enumerate(caches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(accepted) == sorted(f"dlv:{n}" for n in range(25))  # each delivery exactly once
