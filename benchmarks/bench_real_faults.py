"""The debugger on faults it was not built from: publicly reported faults, reproduced.

Every fault in `benchmarks/real_faults/` is trained twice, broken and fixed, under the same
practitioner's protocol (see `real_faults.harness`). A fault counts as *reproduced* when its
plain-torch symptom check holds for the broken run and not for the fixed one; among those it is
*diagnosed* when a finding carries one of its expected codes and *localised* (faults that name a
layer or parameter to blame) when such a finding names it. Fixed versions must have no finding.

    python benchmarks/bench_real_faults.py               # all faults, seed 0
    python benchmarks/bench_real_faults.py --seed 1 -k dropout -v
    nice python benchmarks/bench_real_faults.py --seeds 0-19 --jobs 2   # the seed sweep

`--seeds` sweeps seeds (`0-19`, `0,3,7`, `0-4,9`): one line per seed, then per fault the seeds
where the broken run was missed or not reproduced and those where the fixed twin had a
finding. Runs go to `--jobs` processes (one torch thread each) and each (fault, seed) result is
kept in `--cache` (JSON lines, keyed by the sources it ran: the library's protocol, the data
sets, the harness and the fault's file), so an interrupted sweep resumes where it stopped and a
changed source is run again. The targets: no fixed twin with a finding on any seed, at least 80% diagnosed on each.

DeepFD (Cao et al., ICSE 2022) diagnoses 52% and localises 42% of its 58 real faults.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Iterable

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from real_faults import FAULTS  # noqa: E402
from real_faults.harness import GROUPS, Fault, blames, run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / "benchmarks" / ".cache" / "real_faults.jsonl"
DIAGNOSED_TARGET = 0.8
"""The share of reproduced faults each seed must diagnose."""


def judge(fault: Fault, seed: int) -> dict:
    """Run broken and fixed; say what was reproduced, diagnosed and localised."""
    t0 = time.perf_counter()
    broken, fixed = run(fault, True, seed), run(fault, False, seed)
    hits = [f for f in broken.findings if f.code in fault.expected]
    return {"name": fault.name, "group": fault.group, "seed": seed,
            "reproduced": fault.seen(broken) and not fault.seen(fixed),
            "symptom_broken": fault.seen(broken), "symptom_fixed": fault.seen(fixed),
            "diagnosed": bool(hits),
            "localised": bool(fault.blame) and any(blames(f, fault.blame) for f in hits),
            "found": sorted(broken.codes), "fixed_found": sorted(fixed.codes),
            "layers": sorted({f"{f.code}@{f.layer}" for f in hits}),
            "seconds": time.perf_counter() - t0}


def parse_seeds(text: str) -> list[int]:
    """'0-19', '0,3,7' or '0-4,9' -> the seeds, in order, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            lo, _, hi = part.partition("-")
            span = range(int(lo), int(hi) + 1) if hi else [int(lo)]
        except ValueError:
            raise ValueError(f"--seeds takes ranges and lists like 0-19 or 0,3,7; "
                             f"got {text!r}") from None
        if not span:
            raise ValueError(f"--seeds: empty range {part!r}")
        seeds += [s for s in span if s not in seeds]
    return seeds


# -- the sweep: many (fault, seed) runs, in parallel, resumable --------------------------------
#: the lesson/ sources the protocol runs: the package loads its tools lazily, and these are
#: all a run imports (tests/test_real_faults.py checks it); a change elsewhere in lesson/ (the
#: course, the LR finder, the gradient check) leaves every result as it was
PROTOCOL_SOURCES = ("__init__.py", "findings.py", "restore.py", "sections.py", "debugger", "data",
                    "production", "checks/__init__.py", "checks/overfit.py",
                    "checks/batch_independence.py")


def fingerprint(fault: Fault) -> str:
    """A digest of every source a fault's result depends on: the library's protocol sources
    (PROTOCOL_SOURCES), the shared data sets, the harness and the other modules of
    `real_faults` that hold no fault (data and models the faults share), and the fault's own
    file. A change to any of them reruns it."""
    return _digest([*_shared_sources(), Path(sys.modules[fault.build.__module__].__file__)])


@functools.lru_cache(maxsize=1)
def _shared_sources() -> tuple[Path, ...]:
    lesson = ROOT / "lesson"
    files = [f for part in PROTOCOL_SOURCES for f in
             (sorted((lesson / part).rglob("*.py")) if (lesson / part).is_dir()
              else [lesson / part])]
    helpers = [p for p in sorted(Path(sys.modules[run.__module__].__file__).parent.glob("*.py"))
               if p.stem not in FAULTS]       # the harness, the shared languages and models
    return (*files, ROOT / "broken_models" / "datasets.py", *helpers)


def _digest(files: list[Path]) -> str:
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _load_cache(path: Path | None) -> dict[tuple[str, int, str], dict]:
    if path is None or not path.is_file():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            done[(row["name"], row["seed"], row["fingerprint"])] = row
        except (ValueError, KeyError):
            continue          # a line cut short by an interrupted run: run it again
    return done


def _judge_one(job: tuple[str, int, str]) -> dict:
    name, seed, digest = job
    torch.set_num_threads(1)
    return judge(FAULTS[name], seed) | {"fingerprint": digest}


def sweep(names: Iterable[str], seeds: list[int], jobs: int = 2,
          cache: Path | None = DEFAULT_CACHE, progress: bool = True) -> list[dict]:
    """`judge` every fault on every seed; rows already in `cache` for the same sources are
    reused, new ones appended as they finish (so a sweep can be stopped and resumed)."""
    digests = {name: fingerprint(FAULTS[name]) for name in names}
    done = _load_cache(cache)
    todo = [(n, s, digests[n]) for s in seeds for n in digests if (n, s, digests[n]) not in done]
    rows = {(n, s): done[(n, s, digests[n])] for s in seeds for n in digests
            if (n, s, digests[n]) in done}
    if progress and todo:
        print(f"{len(rows)} runs cached, {len(todo)} to run on {jobs} process(es)",
              file=sys.stderr)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
    out = open(cache, "a") if cache is not None else None
    pool = multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=20) \
        if jobs > 1 and len(todo) > 1 else None
    try:
        results = pool.imap_unordered(_judge_one, todo) if pool else map(_judge_one, todo)
        for i, row in enumerate(results, 1):
            rows[(row["name"], row["seed"])] = row
            if out is not None:
                out.write(json.dumps(row) + "\n")
                out.flush()
            if progress:
                print(f"  [{i}/{len(todo)}] {row['name']} seed {row['seed']} "
                      f"({row['seconds']:.0f} s)", file=sys.stderr)
    finally:             # stopped (Ctrl-C) or done: no worker outlives the sweep
        if pool is not None:
            pool.terminate()
            pool.join()
        if out is not None:
            out.close()
    return [rows[(n, s)] for s in seeds for n in digests]


# -- reports -------------------------------------------------------------------------------------
def summary(rows: list[dict]) -> dict:
    """The counts of one seed's rows."""
    rep = [r for r in rows if r["reproduced"]]
    blamed = [r for r in rep if FAULTS[r["name"]].blame]
    return {"faults": len(rows), "reproduced": len(rep),
            "diagnosed": sum(r["diagnosed"] for r in rep),
            "localised": sum(r["localised"] for r in blamed), "blamed": len(blamed),
            "fixed_with_findings": sum(bool(r["fixed_found"]) for r in rows)}


def summary_line(s: dict) -> str:
    return (f"real faults: {s['reproduced']} reproduced, diagnosed {s['diagnosed']} "
            f"({100 * s['diagnosed'] / max(s['reproduced'], 1):.0f}%), localised "
            f"{s['localised']} ({100 * s['localised'] / max(s['blamed'], 1):.0f}%), "
            f"fixed versions with findings {s['fixed_with_findings']}")


def report_one_seed(rows: list[dict], verbose: bool) -> None:
    if verbose:
        for r in rows:
            print(f"{r['name']:38s} {'R' if r['reproduced'] else '-'}"
                  f"{'D' if r['diagnosed'] else '-'}{'L' if r['localised'] else '-'} "
                  f"{r['seconds']:4.1f}s found={r['found']} fixed={r['fixed_found']} {r['layers']}")
    rep = [r for r in rows if r["reproduced"]]
    print(f"\n{len(rows)} faults; by group: " + ", ".join(
        f"{g} {sum(r['group'] == g for r in rep)}" for g in GROUPS))
    for r in rows:
        if not r["reproduced"]:
            print(f"not reproduced: {r['name']} (symptom broken={r['symptom_broken']}, "
                  f"fixed={r['symptom_fixed']})")
    for r in rep:
        if not r["diagnosed"]:
            print(f"missed: {r['name']}: expected {FAULTS[r['name']].expected}, found {r['found']}")
    for r in rep:
        if FAULTS[r["name"]].blame and r["diagnosed"] and not r["localised"]:
            print(f"not localised: {r['name']}: blame {FAULTS[r['name']].blame!r}, "
                  f"named {r['layers']}")
    for r in rows:
        if r["fixed_found"]:
            print(f"fixed version with findings: {r['name']}: {r['fixed_found']}")
    s = summary(rows)
    print(f"{s['blamed']} of the reproduced faults name a layer or parameter to blame; "
          f"localised is counted over those. {sum(r['seconds'] for r in rows):.0f} s in all.")
    print(summary_line(s))


def report_sweep(rows: list[dict], seeds: list[int]) -> bool:
    """One line per seed, then per fault the seeds where something went wrong; True when
    every seed meets the targets."""
    by_seed = {s: [r for r in rows if r["seed"] == s] for s in seeds}
    print(f"\nseed  {'reproduced':>10} {'diagnosed':>10} {'localised':>10} {'fixed w/ findings':>17}")
    shares = {}
    for s, rs in by_seed.items():
        c = summary(rs)
        shares[s] = c["diagnosed"] / max(c["reproduced"], 1)
        print(f"{s:4d}  {c['reproduced']:>6}/{c['faults']:<3} {c['diagnosed']:>5} "
              f"{100 * shares[s]:3.0f}% {c['localised']:>4}/{c['blamed']:<2} "
              f"{100 * c['localised'] / max(c['blamed'], 1):3.0f}% {c['fixed_with_findings']:>9}")
    print("\nper fault, the seeds where something went wrong (faults not listed: none):")
    names = list(dict.fromkeys(r["name"] for r in rows))
    clean = True
    for name in names:
        rs = [r for r in rows if r["name"] == name]
        parts = []
        missed = [r["seed"] for r in rs if r["reproduced"] and not r["diagnosed"]]
        unrepro = [r["seed"] for r in rs if not r["reproduced"]]
        fixed = [f"{r['seed']} {'+'.join(r['fixed_found'])}" for r in rs if r["fixed_found"]]
        if missed:
            parts.append(f"missed on {_seed_list(missed)}")
        if unrepro:
            parts.append(f"not reproduced on {_seed_list(unrepro)}")
        if fixed:
            clean = False
            parts.append("fixed twin with findings on " + ", ".join(fixed))
        if parts:
            print(f"  {name}: " + "; ".join(parts))
    worst = min(shares, key=shares.get)
    met = clean and shares[worst] >= DIAGNOSED_TARGET
    print(f"\n{len(names)} faults x {len(seeds)} seeds: no fixed twin with a finding on any seed: "
          f"{'YES' if clean else 'NO'}; diagnosed >= {DIAGNOSED_TARGET:.0%} on every seed: "
          f"{'YES' if shares[worst] >= DIAGNOSED_TARGET else 'NO'} (lowest "
          f"{100 * shares[worst]:.0f}%, seed {worst})")
    return met


def _seed_list(seeds: list[int]) -> str:
    return "seed " + ", ".join(map(str, seeds)) if len(seeds) == 1 else \
        "seeds " + ", ".join(map(str, seeds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", help="sweep these seeds (0-19, 0,3,7, 0-4,9): a line per seed, "
                                    "then what went wrong, per fault")
    ap.add_argument("-k", default="", help="only faults whose file name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per fault")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="processes for the runs, one torch thread each (default 2)")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE),
                    help=f"results kept here, reused while the sources are unchanged "
                         f"(default {DEFAULT_CACHE.relative_to(ROOT)})")
    ap.add_argument("--no-cache", action="store_true", help="run everything, keep nothing")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    try:
        seeds = parse_seeds(args.seeds) if args.seeds else [args.seed]
    except ValueError as exc:
        ap.error(str(exc))
    torch.set_num_threads(1)
    names = [n for n in FAULTS if args.k in n]
    if not names:
        ap.error(f"no fault's file name contains {args.k!r}")
    cache = None if args.no_cache else Path(args.cache)
    rows = sweep(names, seeds, args.jobs, cache)
    if args.seeds:
        sys.exit(0 if report_sweep(rows, seeds) else 1)
    report_one_seed(rows, args.verbose)


if __name__ == "__main__":
    main()
