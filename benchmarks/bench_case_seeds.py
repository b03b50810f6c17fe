"""Does every catalogue case hold on seeds nobody tuned it on?

Runs every case, broken and fixed, on `broken_models.seeds.UNSEEN_SEEDS` (20 seeds beyond the
tests' and the clinics') and prints each failing run with what went wrong, then the counts:
runs clean / failing per kind, and the cases that failed at least once. CPU heavy (41 cases x
20 seeds x 2 runs, ~minutes per case): one torch thread per process, `--jobs` processes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_case_seeds.py [--jobs 2] [--case NAME ...]
        [--seeds 100-119] [--which both|broken|fixed]
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _job(args: tuple[str, int, str]) -> tuple[str, int, str, list[str], float]:
    import torch

    from broken_models import CATALOGUE
    from broken_models.seeds import problems

    torch.set_num_threads(1)
    name, seed, which = args
    start = time.perf_counter()
    try:
        found = problems(CATALOGUE[name], seed, which)
    except Exception as err:  # a crash is a failing run, not the end of the sweep
        found = [f"{which}: crashed: {type(err).__name__}: {err}"]
    return name, seed, which, found, time.perf_counter() - start


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    from broken_models import CATALOGUE
    from broken_models.seeds import UNSEEN_SEEDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--case", nargs="*", default=None, help="only these cases")
    parser.add_argument("--seeds", type=_seeds, default=list(UNSEEN_SEEDS), help="e.g. 100-119")
    parser.add_argument("--which", choices=("both", "broken", "fixed"), default="both")
    args = parser.parse_args(argv)
    names = args.case or list(CATALOGUE)
    kinds = ("broken", "fixed") if args.which == "both" else (args.which,)
    jobs = [(n, s, k) for n in names for s in args.seeds for k in kinds]
    start = time.perf_counter()
    failing: Counter[tuple[str, str]] = Counter()
    runs: Counter[str] = Counter()
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for name, seed, which, found, seconds in pool.imap_unordered(_job, jobs):
            runs[which] += 1
            if found:
                failing[(name, which)] += 1
                print(f"FAIL {name} seed {seed} ({seconds:.0f} s): {'; '.join(found)}", flush=True)
    print(f"\n{len(jobs)} runs of {len(names)} cases on seeds {args.seeds[0]}-{args.seeds[-1]} "
          f"in {time.perf_counter() - start:.0f} s")
    for which in kinds:
        bad = sum(v for (n, k), v in failing.items() if k == which)
        print(f"  {which}: {runs[which] - bad} clean, {bad} failing")
    for (name, which), count in sorted(failing.items()):
        print(f"  {name} {which}: {count}/{len(args.seeds)} seeds fail")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
