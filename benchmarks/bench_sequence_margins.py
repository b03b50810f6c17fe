"""How far does each sequence case hold, seed by seed? The margins of its symptom and target,
without the debugger.

`bench_case_seeds.py` trains every case under the debugger and judges its diagnosis too. The
sequence cases are the slowest of the catalogue, and their data and training are what decide
whether a symptom shows and a target is reached on every seed, so this benchmark trains them
with a stand-in for `NetworkDebugger` that only records the losses (the debugger never changes
what it watches: the metrics are the same) and without the active checks. It prints the same
table as `bench_case_seeds.py`: per case the worst margin of each promise over the seeds,
measured by the page's own SYMPTOM_CHECK and TARGET_CHECK (positive: held), and the runs that
broke a promise. Results are cached (`--cache`, keyed by case, seed, script and the sources
the metrics depend on: the page and the catalogue's shared modules), so a rerun trains only
what changed; one torch thread per worker, at nice 10.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sequence_margins.py --seeds 0-199
        [--case NAME ...] [--jobs 2] [--no-cache]
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_case_seeds import _load_cache, _number, page_path, source_hashes, table  # noqa: E402

DEFAULT_CACHE = ROOT / "benchmarks" / ".cache" / "sequence_margins.jsonl"


def shared_sources(root: Path = ROOT) -> list[Path]:
    """What the metrics of a page depend on besides the page: the catalogue's shared modules
    and the shipped text (not the debugger, which does not run here)."""
    return [root / "broken_models" / f for f in ("__init__.py", "case.py", "checks.py",
                                                 "datasets.py", "tokens.py", "corpus.txt")]


class _Recorder:
    """Stands in for NetworkDebugger: records the losses, finds nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.loss_history: list[float] = []
        self.val_loss_history: list[float] = []

    def __enter__(self) -> "_Recorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def record_loss(self, value: Any) -> None:
        self.loss_history.append(float(value))

    def record_val_loss(self, value: Any) -> None:
        self.val_loss_history.append(float(value))

    def diagnose(self) -> list:
        return []


_HASHES: dict[str, str] = {}


def page_hashes(names: list[str] | None = None) -> dict[str, str]:
    """The source hash of each case (by default every case), read from the files now."""
    from broken_models import CATALOGUE

    pages = {n: page_path(c.module) for n, c in CATALOGUE.items() if names is None or n in names}
    return source_hashes(pages, shared_sources())


def _init(nice: int) -> None:
    """A worker: one torch thread, niced; it imports the catalogue, then hashes the files, so
    a page edited during a sweep never has the old code's results filed under its new hash."""
    import torch

    if nice:
        os.nice(nice)
    torch.set_num_threads(1)
    import broken_models.tokens  # noqa: F401
    _HASHES.update(page_hashes())


def _job(args: tuple[str, int, str]) -> dict[str, Any]:
    import warnings

    import lesson

    warnings.simplefilter("ignore")
    lesson.NetworkDebugger = _Recorder
    lesson.check_causality = lesson.check_batch_independence = lambda *a, **k: []
    from broken_models import CATALOGUE

    name, seed, which = args
    start = time.perf_counter()
    row = {"case": name, "seed": seed, "which": which, "codes": [], "source": _HASHES[name]}
    try:
        case = CATALOGUE[name]
        run = case.run_broken(seed) if which == "broken" else case.run_fixed(seed)
    except Exception as err:  # a crash is a failing run, not the end of the sweep
        return {**row, "problems": [f"crashed: {type(err).__name__}: {err}"],
                "symptom_margin": -math.inf, "target_margin": -math.inf, "seconds": 0.0}
    # signed so that > 0 is as promised: the broken script shows the symptom and misses the
    # target, the fixed one the opposite
    sign = 1.0 if which == "broken" else -1.0
    problems = []
    if run.symptom_seen != (which == "broken"):
        problems.append("symptom " + ("not seen" if which == "broken" else "seen"))
    if run.target_reached != (which == "fixed"):
        problems.append("target " + ("reached" if which == "broken" else "missed"))
    return {**row, "problems": problems, "symptom_margin": sign * run.symptom_margin,
            "target_margin": -sign * run.target_margin, "seconds": time.perf_counter() - start,
            "metrics": {k: v for k, v in run.metrics.items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)}}


def main(argv: list[str] | None = None) -> int:
    from broken_models import CATALOGUE, by_family
    from broken_models.seeds import parse_seeds

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=parse_seeds, default=tuple(range(200)), help="e.g. 0-199")
    parser.add_argument("--case", nargs="*", default=None, help="only these cases")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--no-cache", action="store_true", help="train everything again")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the workers (0: none)")
    args = parser.parse_args(argv)
    names = args.case or [c.name for c in by_family("sequence")["sequence"]]
    unknown = [n for n in names if n not in CATALOGUE]
    if unknown:
        parser.error(f"no case named {', '.join(unknown)}")
    hashes = page_hashes(names)
    cache = {} if args.no_cache else _load_cache(args.cache)
    results: dict[str, list[dict]] = {n: [] for n in names}
    todo = []
    for seed in args.seeds:
        for name in names:
            for which in ("broken", "fixed"):
                row = cache.get((name, seed, which, hashes[name]))
                if row is None:
                    todo.append((name, seed, which))
                else:
                    results[name].append(row)
    print(f"{len(todo)} runs to train, {sum(map(len, results.values()))} from the cache",
          flush=True)
    start = time.perf_counter()
    if todo:
        args.cache.parent.mkdir(parents=True, exist_ok=True)
        with open(args.cache, "a", encoding="utf-8") as out, \
                multiprocessing.get_context("spawn").Pool(args.jobs, _init, (args.nice,)) as pool:
            for row in pool.imap_unordered(_job, todo):
                for key in ("symptom_margin", "target_margin"):
                    row[key] = _number(row[key])
                out.write(json.dumps(row) + "\n")
                out.flush()
                results[row["case"]].append(row)
                if row["problems"]:
                    print(f"FAIL {row['case']} {row['which']} seed {row['seed']}: "
                          f"{'; '.join(row['problems'])}", flush=True)
    runs = sum(map(len, results.values()))
    print(f"\n{runs} runs of {len(names)} cases on {len(args.seeds)} seeds ({args.seeds[0]}-"
          f"{args.seeds[-1]}), {len(todo)} trained in {time.perf_counter() - start:.0f} s; "
          "worst margin of each promise (positive: held), metrics only\n")
    print("\n".join(table(results, list(args.seeds))))
    failed = sum(1 for rows in results.values() for r in rows if r["problems"])
    print(f"\n{failed} failing runs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
