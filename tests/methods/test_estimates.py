"""What the step planner estimates from the loop's numbers: `DepthStats`' tree growth by depth."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.estimates import DepthStats, TreeFacts


def test_forwards_of_caps_never_drafted_decay_like_the_depths_measured():
    """A layer's forward runs only after the one above it did: for caps deeper than any drafted, the chance
    a forward runs falls by the last measured ratio between depths, not carried flat (flat, a planner that
    drafted at caps up to 3 priced a cap-12 tree at 10 forwards where its trees stopped after 3 or 4)."""
    stats = DepthStats(12)
    for i in range(200):  # cap 3: depth 2's forward always runs, depth 3's half the time
        forwards = 2 if i % 2 else 1
        stats.record(TreeFacts(3, forwards, (2,) * forwards, (3,) * (forwards + 1), backlog=1), np.array([1]))
    run = np.diff(stats.estimates().forwards)[1:]  # [d - 2]: the chance depth d's forward runs, d = 2 .. 12
    assert run[0] == pytest.approx(1.0, abs=0.02) and run[1] == pytest.approx(0.5, abs=0.05)
    ratio = run[1] / run[0]
    assert run[2:] == pytest.approx(run[1] * ratio ** np.arange(1, len(run) - 1), rel=1e-9)  # depth 4 on: x0.5
    assert stats.estimates().forwards[-1] < 2.6  # 1 + 0.5 + 0.25 + ...: about 2 forwards, not 10.5
