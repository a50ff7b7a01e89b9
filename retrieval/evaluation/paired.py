"""Paired comparison of two retrievals question by question: bootstrap interval and sign test.

Both see the same questions, so the difference is taken per question (`ours - theirs`) and its mean's 95 %
interval comes from resampling questions with a fixed seed (a printed table is reproducible); wins and
losses are counted and tested with an exact two-sided sign test.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test: the chance of a split at least this uneven if wins and losses were
    equally likely (ties dropped). 1.0 when nothing differs."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Paired:
    """`ours - theirs` question by question: mean, 95 % bootstrap CI, wins / losses / ties, sign-test p."""

    mean: float
    low: float
    high: float
    wins: int
    losses: int
    ties: int
    p: float

    @property
    def significant(self) -> bool:
        """The CI excludes zero (the sign test is reported beside it, not combined)."""
        return self.low > 0 or self.high < 0


def paired_bootstrap(ours: np.ndarray, theirs: np.ndarray, rounds: int = 2000, seed: int = 0) -> Paired:
    """Per-question `ours - theirs`: the CI resamples questions (a fixed seed, so a printed table is
    reproducible); the sign test counts questions each side does better on. No questions: all zero."""
    diff = np.asarray(ours, dtype=float) - np.asarray(theirs, dtype=float)
    if len(diff) == 0:
        return Paired(0.0, 0.0, 0.0, 0, 0, 0, 1.0)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(rounds, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    wins, losses = int((diff > 1e-9).sum()), int((diff < -1e-9).sum())
    ties = len(diff) - wins - losses
    return Paired(float(diff.mean()), float(low), float(high), wins, losses, ties, sign_test(wins, losses))
