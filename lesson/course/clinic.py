"""`nndebug clinic`: run every broken network of the catalogue and check the diagnosis.

For each case the broken script trains, the tool its page names examines it, and the verdict
compares the findings with the codes the page expects: `diagnosed` when the symptom showed,
every expected code was found and nothing unexplained was. The table goes to the terminal, the
pictures and an `index.html` to the report folder; the exit status is 1 if any case was
misdiagnosed, so CI can run the clinic as a test of the debugger.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

#: The report folder when --out is not given.
DEFAULT_OUT = "nndebug-report"


def seed_argument(text: str) -> int:
    """argparse type for --seed: a clear usage error (exit 2) for a bad seed."""
    from broken_models.case import check_seed

    try:
        return check_seed(int(text))
    except ValueError as err:
        message = str(err) if text.lstrip("-").isdigit() else f"seed must be an int, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("--case", action="append", metavar="NAME",
                        help="run only this case, by label (case1_3) or name (repeat for several); "
                             "see `nndebug list`")
    parser.add_argument("--family", metavar="NAME", help="run only one family of cases")
    parser.add_argument("--seed", type=seed_argument, default=0,
                        help="random seed of every run, 0 to 2**32-1 (default 0)")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"report folder (default {DEFAULT_OUT}/)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="cases run in parallel (default: up to 2)")
    parser.add_argument("--verify-fixes", action="store_true",
                        help="also train every fixed script and check it is healthy")
    parser.add_argument("--no-report", action="store_true", help="print the table only")


def _verdict(run: Any) -> str:
    if not run.symptom_seen:
        return "no symptom"
    if run.missing:
        return "missed " + ",".join(run.missing)
    if run.unexplained:
        return "extra " + ",".join(run.unexplained)
    return "diagnosed"


def examine(name: str, seed: int, out: str | None, verify_fixes: bool) -> dict[str, Any]:
    """Run one case (in a worker process): plain data back, pictures written to `out`."""
    import torch
    from threadpoolctl import threadpool_limits

    from broken_models import get_case

    torch.set_num_threads(1)      # one thread per worker: the workers share the cores
    threadpool_limits(1)          # the same for NumPy's BLAS (the mini-framework case)
    case = get_case(name)
    entry: dict[str, Any] = {"name": name, "pictures": [], "gradient_table": ""}
    try:
        run = case.run_broken(seed)
    except Exception as exc:  # a case that crashes is a result too, not the end of the clinic
        return entry | {"verdict": f"error: {type(exc).__name__}: {exc}", "symptom_seen": False,
                        "found": [], "findings": [], "seconds": 0.0}
    entry |= {"verdict": _verdict(run), "symptom_seen": run.symptom_seen, "found": run.codes,
              "findings": [f.to_dict() for f in run.findings], "seconds": run.seconds}
    if verify_fixes:
        try:
            fixed = case.run_fixed(seed)
            entry["fix_verdict"] = "healthy" if fixed.healthy else (
                "findings " + ",".join(fixed.codes) if fixed.findings else "target missed")
        except Exception as exc:
            entry["fix_verdict"] = f"error: {type(exc).__name__}"
    if out is not None:
        from lesson.course.clinic_report import draw_case, gradient_table

        entry["pictures"] = draw_case(run, Path(out) / name)
        entry["gradient_table"] = gradient_table(run.report)
    return entry


def _select(args: argparse.Namespace) -> list[str]:
    from broken_models import CATALOGUE, by_family
    from broken_models.case import FAMILIES
    from lesson.course.learner.clinics import find_clinic_case

    if args.case:
        names = [find_clinic_case(n).name for n in args.case]    # a label or a name
        if args.family:
            names = [n for n in names if CATALOGUE[n].family == args.family]
        return names
    # by family, then by name: not in the clinics' numbering, which a student has to earn
    if args.family:
        return sorted(c.name for c in by_family(args.family)[args.family])
    families = list(FAMILIES)
    return sorted(CATALOGUE, key=lambda n: (families.index(CATALOGUE[n].family), n))


def _table(entries: list[dict[str, Any]], with_fix: bool) -> str:
    head = ["case", "symptom seen", "expected", "found", "verdict"] + (["fix"] if with_fix else [])
    rows = [[e["name"], "yes" if e["symptom_seen"] else "NO", ", ".join(e["expected"]),
             ", ".join(e["found"]) or "-", e["verdict"]] + ([e.get("fix_verdict", "")] if with_fix else [])
            for e in entries]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from broken_models import CATALOGUE

    try:
        names = _select(args)
    except ValueError as exc:
        print(f"nndebug clinic: {exc}", file=sys.stderr)
        return 2
    if not names:
        print("nndebug clinic: no case matches", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("nndebug clinic: --jobs must be at least 1", file=sys.stderr)
        return 2
    from lesson.course.learner.clinics import find_clinic_case, is_case_label

    # a case asked for by its clinic label keeps it: its name, codes and page are the answer
    labels = {find_clinic_case(c).name: c.strip() for c in args.case or [] if is_case_label(c)}
    out = None if args.no_report or labels else Path(args.out)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    bar = tqdm(total=len(names), desc="clinic", unit="case", file=sys.stderr)
    job_args = [(n, args.seed, None if out is None else str(out), args.verify_fixes) for n in names]
    if args.jobs == 1 or len(names) == 1:
        for a in job_args:
            bar.set_postfix_str(a[0])
            results[a[0]] = examine(*a)
            bar.update()
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(examine, *a): a[0] for a in job_args}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.set_postfix_str(futures[future])
                bar.update()
    bar.close()
    seconds = time.perf_counter() - start
    entries = []
    for name in names:
        case = CATALOGUE[name]
        entry = results[name] | {"case": case, "family": case.family,
                                 "expected": list(case.expected)}
        if name in labels:
            entry |= {"name": labels[name], "expected": ["(hidden: nndebug list --spoilers)"]}
        entries.append(entry)
    print(_table(entries, args.verify_fixes))
    bad = [e["name"] for e in entries if e["verdict"] != "diagnosed"]
    bad += [e["name"] for e in entries if args.verify_fixes and e.get("fix_verdict") != "healthy"]
    print(f"\n{len(entries) - len(set(bad))} of {len(entries)} cases diagnosed"
          f"{' with healthy fixes' if args.verify_fixes else ''} in {seconds:.0f} s (seed {args.seed}).")
    if out is not None:
        from lesson.course.clinic_report import relative, write_index

        index = write_index(out, entries, args.seed, seconds)
        print(f"Report: {relative(index)}  (open it in a browser)")
    elif labels and not args.no_report:
        print("No report for cases asked for by their clinic label: it names them "
              "(`nndebug list --spoilers`, or ask by name)")
    if bad:
        print(f"Misdiagnosed: {', '.join(sorted(set(bad)))}", file=sys.stderr)
    return 1 if bad else 0
