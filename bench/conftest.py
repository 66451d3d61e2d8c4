"""Shared plumbing for the microbenchmarks: device-aware timing and one results file per session.

Every benchmark test calls `measure(benchmark, fn, **row)`; the row (op, provider, dtype, shapes, ...)
gets the median and spread of the timed calls, and at the end of the session all rows are written to
``$SPECDEC_BENCH_OUT`` (default ``bench/out``) as ``<stamp>-micro.json`` and ``.csv`` together with the
device, library versions and commit, so each file is self-describing data.
"""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest
import torch

from specdec.app.harness import environment

ROWS: list[dict] = []


def measure(benchmark, fn, *, rounds: int = 20, warmup: int = 3, **row) -> dict:
    """Time `fn` with pytest-benchmark (synchronising a GPU around each call) and record `row` with it."""
    cuda = torch.cuda.is_available()

    def call():
        fn()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(warmup):
        call()
    benchmark.pedantic(call, rounds=rounds, iterations=1)
    stats = benchmark.stats.stats
    row = {**row, "median_us": stats.median * 1e6, "iqr_us": stats.iqr * 1e6, "min_us": stats.min * 1e6,
           "rounds": rounds}
    benchmark.extra_info.update({k: v for k, v in row.items() if isinstance(v, (int, float, str))})
    ROWS.append(row)
    return row


def peak_memory(fn) -> dict:
    """Peak allocated bytes of one call (after a warm call and a reset), and the part above the inputs."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return dict(peak_mem_mib=peak / 2**20, workspace_mib=(peak - before) / 2**20)


def pytest_sessionfinish(session, exitstatus):
    if not ROWS:
        return
    out = Path(os.environ.get("SPECDEC_BENCH_OUT", Path(__file__).parent / "out"))
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env = environment()
    (out / f"{stamp}-micro.json").write_text(json.dumps({"environment": env, "rows": ROWS}, indent=1))
    keys = sorted({k for r in ROWS for k in r})
    with open(out / f"{stamp}-micro.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys + sorted(env))
        writer.writeheader()
        for r in ROWS:
            writer.writerow({**r, **env})


@pytest.fixture
def cuda_only():
    if not torch.cuda.is_available():
        pytest.skip("GPU provider: no CUDA device here")
