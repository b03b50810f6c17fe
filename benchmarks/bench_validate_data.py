"""validate_data on 100,000 x 784 float32 training rows (+ 20,000 test rows), MNIST-sized.

Prints the time and rows per second of the whole validator, and, side by side, what the
obvious alternatives cost on the same data:
- exact duplicates with `np.unique(..., axis=0)` (sorts the rows: O(n log n) row compares);
- near duplicates by brute force (every test row against every training row), timed on a
  slice of the test rows and scaled up, since the full run would take minutes.
The injected bugs (copied rows, re-encoded copies, NaN rows, conflicting labels) must all be
found, or the script exits with status 1.

Run: .venv/bin/python benchmarks/bench_validate_data.py
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lesson.data.validate import validate_data  # noqa: E402

N_TRAIN, N_TEST, D = 100_000, 20_000, 784
EXACT, NEAR, NAN_ROWS = 200, 100, 30


def make_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N_TRAIN, D), dtype=np.float32)
    y = rng.integers(0, 10, N_TRAIN)
    xt = rng.standard_normal((N_TEST, D), dtype=np.float32)
    yt = rng.integers(0, 10, N_TEST)
    src = rng.choice(N_TRAIN, EXACT + NEAR, replace=False)
    xt[:EXACT], yt[:EXACT] = x[src[:EXACT]], y[src[:EXACT]]
    yt[:10] = (yt[:10] + 1) % 10                     # 10 copies with a different label
    noise = 1e-3 * rng.standard_normal((NEAR, D), dtype=np.float32)
    xt[EXACT:EXACT + NEAR] = x[src[EXACT:]] + noise  # re-encoded copies
    x[rng.choice(N_TRAIN, NAN_ROWS, replace=False), 3] = np.nan
    return x, y, xt, yt


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def cpu_timed(fn, *args, **kwargs):
    """(result, wall seconds, CPU seconds of this process): CPU time is steadier on a busy box."""
    cpu = time.process_time()
    out, wall = timed(fn, *args, **kwargs)
    return out, wall, time.process_time() - cpu


def main() -> int:
    x, y, xt, yt = make_data()
    rows = N_TRAIN + N_TEST
    validate_data(x[:2000], y[:2000], xt[:500], yt[:500])  # warm-up: imports, allocator

    findings, ours, ours_cpu = cpu_timed(validate_data, x, y, xt, yt)
    by_code = {f.code: f for f in findings}
    _, unique_s = timed(np.unique, np.concatenate([x, xt]), axis=0)

    from sklearn.metrics import pairwise_distances_argmin_min
    slice_rows = 200
    finite_x = np.nan_to_num(x)  # the baseline refuses NaN
    _, brute_slice = timed(pairwise_distances_argmin_min, xt[:slice_rows], finite_x)
    brute_s = brute_slice * N_TEST / slice_rows

    print(f"validate_data, {N_TRAIN:,} x {D} train + {N_TEST:,} test float32 rows "
          f"({x.nbytes / 2**20:.0f} MiB + {xt.nbytes / 2**20:.0f} MiB), "
          f"{os.cpu_count()} CPUs")
    print(f"  all five checks:          {ours:7.2f} s   {rows / ours:12,.0f} rows/s   "
          f"({ours_cpu:.2f} s of CPU time)")
    print(f"  np.unique(axis=0) alone:  {unique_s:7.2f} s   (exact duplicates only)   "
          f"ratio {unique_s / ours:5.1f}x slower than all our checks")
    print(f"  brute-force nearest rows: {brute_s:7.2f} s   (scaled from {slice_rows} test rows)"
          f"   ratio {brute_s / ours:5.1f}x slower")
    for f in findings:
        print(f"  - {f}")

    dup = by_code.get("DUPLICATES_ACROSS_SPLITS")
    ok = (dup is not None and dup.evidence["exact"] == EXACT and dup.evidence["near"] == NEAR
          and by_code.get("NONFINITE_INPUT") is not None
          and by_code["NONFINITE_INPUT"].evidence["rows_affected"] == NAN_ROWS
          and by_code.get("CONFLICTING_LABELS") is not None
          and by_code["CONFLICTING_LABELS"].evidence["groups"] == 10
          and "CLASS_IMBALANCE" not in by_code and "UNNORMALIZED_INPUTS" not in by_code)
    print("  injected bugs found exactly:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
