"""The debugger on faults it was not built from: publicly reported faults, reproduced.

Every fault in `benchmarks/real_faults/` is trained twice, broken and fixed, under the same
practitioner's protocol (see `real_faults.harness`). A fault counts as *reproduced* when its
plain-torch symptom check holds for the broken run and not for the fixed one; among those it is
*diagnosed* when a finding carries one of its expected codes and *localised* (faults that name a
layer or parameter to blame) when such a finding names it. Fixed versions must have no finding.

    python benchmarks/bench_real_faults.py               # all faults, seed 0
    python benchmarks/bench_real_faults.py --seed 1 -k dropout -v

DeepFD (Cao et al., ICSE 2022) diagnoses 52% and localises 42% of its 58 real faults.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from real_faults import FAULTS  # noqa: E402
from real_faults.harness import GROUPS, Fault, blames, run  # noqa: E402


def judge(fault: Fault, seed: int) -> dict:
    """Run broken and fixed; say what was reproduced, diagnosed and localised."""
    t0 = time.perf_counter()
    broken, fixed = run(fault, True, seed), run(fault, False, seed)
    hits = [f for f in broken.findings if f.code in fault.expected]
    return {"name": fault.name, "group": fault.group,
            "reproduced": fault.seen(broken) and not fault.seen(fixed),
            "symptom_broken": fault.seen(broken), "symptom_fixed": fault.seen(fixed),
            "diagnosed": bool(hits),
            "localised": bool(fault.blame) and any(blames(f, fault.blame) for f in hits),
            "found": sorted(broken.codes), "fixed_found": sorted(fixed.codes),
            "layers": sorted({f"{f.code}@{f.layer}" for f in hits}),
            "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-k", default="", help="only faults whose file name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per fault")
    args = ap.parse_args()
    torch.set_num_threads(1)
    faults = [f for n, f in FAULTS.items() if args.k in n]
    rows = [judge(f, args.seed) for f in faults]
    if args.verbose:
        for r in rows:
            print(f"{r['name']:38s} {'R' if r['reproduced'] else '-'}"
                  f"{'D' if r['diagnosed'] else '-'}{'L' if r['localised'] else '-'} "
                  f"{r['seconds']:4.1f}s found={r['found']} fixed={r['fixed_found']} {r['layers']}")
    rep = [r for r in rows if r["reproduced"]]
    print(f"\n{len(faults)} faults; by group: " + ", ".join(
        f"{g} {sum(r['group'] == g for r in rep)}" for g in GROUPS))
    for r in rows:
        if not r["reproduced"]:
            print(f"not reproduced: {r['name']} (symptom broken={r['symptom_broken']}, "
                  f"fixed={r['symptom_fixed']})")
    for r in rep:
        if not r["diagnosed"]:
            print(f"missed: {r['name']}: expected {FAULTS[r['name']].expected}, found {r['found']}")
    blamed = [r for r in rep if FAULTS[r["name"]].blame]
    for r in blamed:
        if r["diagnosed"] and not r["localised"]:
            print(f"not localised: {r['name']}: blame {FAULTS[r['name']].blame!r}, "
                  f"named {r['layers']}")
    for r in rows:
        if r["fixed_found"]:
            print(f"fixed version with findings: {r['name']}: {r['fixed_found']}")
    n, d = len(rep), sum(r["diagnosed"] for r in rep)
    loc = sum(r["localised"] for r in blamed)
    f = sum(bool(r["fixed_found"]) for r in rows)
    print(f"{len(blamed)} of the reproduced faults name a layer or parameter to blame; "
          f"localised is counted over those. {sum(r['seconds'] for r in rows):.0f} s in all.")
    print(f"real faults: {n} reproduced, diagnosed {d} ({100 * d / max(n, 1):.0f}%), "
          f"localised {loc} ({100 * loc / max(len(blamed), 1):.0f}%), "
          f"fixed versions with findings {f}")


if __name__ == "__main__":
    main()
