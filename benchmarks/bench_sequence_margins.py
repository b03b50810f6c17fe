"""How far does each sequence case hold, seed by seed? The margins of its symptom and target.

Every page of `broken_models/sequence/` decides with `symptom_seen(metrics)` and
`target_reached(metrics)`, true or false. This benchmark trains each case, broken and fixed,
on many seeds and prints per case the *worst margin* of each check over those seeds: how far
the deciding number stayed from its threshold (positive: the check held), so a case that only
just holds shows it before a seed breaks it. The margins below mirror the pages' checks; every
run is also judged by the page itself, and a disagreement of sign is reported as an error.

The scripts run with a stand-in for `NetworkDebugger` that only records the losses (the
debugger never changes what it watches, so the metrics are the same, bitwise) and without
the active checks: this measures the data and the training, not the diagnosis. One torch
thread per process.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sequence_margins.py [--seeds 0-199]  (default 0-19)
        [--case NAME ...] [--jobs 2] [--save runs.jsonl]
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

Margin = Callable[[dict[str, Any]], float]


def _lm_symptom(m: dict) -> float:      # loss 0.3 under the floor, or impossible text
    return max(m["floor"] - 0.3 - m["train_loss"], m["generated_impossible"] - 0.05)


def _lm_target(m: dict) -> float:       # within [-0.03, 0.08] of the floor, clean text
    gap = m["val_loss"] - m["val_floor"]
    return min(gap + 0.03, 0.08 - gap, 0.02 - m["generated_impossible"])


def _moved(m: dict) -> float:
    return m["val_answers_moved"] - 1e-3


def _accuracy_and_still(m: dict) -> float:
    return min(m["val_accuracy"] - 0.9, 1e-4 - m["val_answers_moved"])


def _logged_gap(m: dict) -> float:
    return abs(m["train_loss"] - m["val_loss"])


#: case -> (symptom margin, target margin); each > 0 (>= 0 for targets) when the page's check holds
MARGINS: dict[str, tuple[Margin, Margin]] = {
    "no_causal_mask": (_lm_symptom, _lm_target),
    "window_looks_ahead": (_lm_symptom, _lm_target),
    "targets_not_shifted": (_lm_symptom, _lm_target),
    "padding_in_loss": (lambda m: m["floor"] - 0.15 - m["train_loss"],
                        lambda m: min(m["val_loss"] - m["val_floor"] + 0.03,
                                      0.07 - (m["val_loss"] - m["val_floor"]))),
    "padding_mask_inverted": (lambda m: 0.7 - m["val_accuracy"], lambda m: m["val_accuracy"] - 0.9),
    "no_padding_mask": (_moved, _accuracy_and_still),
    "gru_last_step": (lambda m: 0.75 - m["val_accuracy"], lambda m: m["val_accuracy"] - 0.9),
    "encoder_batch_first": (_moved, _accuracy_and_still),
    "attention_unscaled": (lambda m: 0.8 - m["val_accuracy"], lambda m: m["val_accuracy"] - 0.9),
    "post_ln_no_warmup": (lambda m: m["train_loss"] - m["floor"] - 0.4,
                          lambda m: m["floor"] + 0.2 - m["val_loss"]),
    "accumulation_mean_of_means": (lambda m: _logged_gap(m) - 0.06,
                                   lambda m: 0.06 - _logged_gap(m)),
    "untied_embeddings": (lambda m: m["head_embedding_difference"] - 0.01,
                          lambda m: min(_lm_target(m), -m["head_embedding_difference"])),
    "generation_on_padding": (
        lambda m: m["teacher_forced_accuracy"] - 0.2 - m["generated_accuracy"],
        lambda m: min(m["teacher_forced_accuracy"] - 0.95, m["generated_accuracy"] - 0.95)),
}


class _Recorder:
    """Stands in for NetworkDebugger: records the losses, finds nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.loss_history: list[float] = []

    def __enter__(self) -> "_Recorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def record_loss(self, value: Any) -> None:
        self.loss_history.append(float(value))

    def record_val_loss(self, value: Any) -> None:
        pass

    def diagnose(self) -> list:
        return []


def _job(args: tuple[str, int, str]) -> dict[str, Any]:
    import warnings

    import torch

    import lesson

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    lesson.NetworkDebugger = _Recorder
    lesson.check_causality = lesson.check_batch_independence = lambda *a, **k: []
    from broken_models import CATALOGUE

    name, seed, which = args
    start = time.perf_counter()
    try:
        case = CATALOGUE[name]
        run = case.run_broken(seed) if which == "broken" else case.run_fixed(seed)
    except Exception as err:  # a crash is a failing run, not the end of the sweep
        return {"case": name, "seed": seed, "which": which, "error": f"{type(err).__name__}: {err}"}
    return {"case": name, "seed": seed, "which": which, "sec": time.perf_counter() - start,
            "symptom": run.symptom_seen, "target": run.target_reached,
            "metrics": {k: v for k, v in run.metrics.items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)}}


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def summarise(records: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The table's lines (per case: the worst margin of each check, and its seed) and the
    problems (a check that failed, a crash, a margin whose sign disagrees with the page)."""
    worst: dict[str, dict[str, tuple[float, int]]] = defaultdict(dict)
    seconds: dict[str, list[float]] = defaultdict(list)
    seeds: dict[str, set[int]] = defaultdict(set)
    problems = []
    for r in records:
        name, seed, which = r["case"], r["seed"], r["which"]
        if "error" in r:
            problems.append(f"{name} {which} seed {seed}: {r['error']}")
            continue
        symptom, target = MARGINS[name]
        m = r["metrics"]
        s, t = symptom(m), target(m)
        if not math.isfinite(s):
            s = -math.inf
        checks = {"broken": (("symptom", s, r["symptom"]), ("no target", -t, not r["target"])),
                  "fixed": (("target", t, r["target"]), ("no symptom", -s, not r["symptom"]))}
        for label, margin, held in checks[which]:
            key = f"{which}: {label}"
            if (margin >= 0) != held and margin != 0:       # 0: the threshold itself
                problems.append(f"{name} {which} seed {seed}: margin {margin:.3g} disagrees "
                                f"with the page ({label} {'held' if held else 'failed'})")
            if not held:
                problems.append(f"{name} {which} seed {seed}: {label} does not hold")
            if key not in worst[name] or margin < worst[name][key][0]:
                worst[name][key] = (margin, seed)
        seconds[name].append(r["sec"])
        seeds[name].add(seed)
    keys = ("broken: symptom", "broken: no target", "fixed: target", "fixed: no symptom")
    lines = [f"{'case':28} {'seeds':>5}  " + "  ".join(f"{k:>18}" for k in keys) + "  s/run"]
    for name in MARGINS:
        if name not in worst:
            continue
        cells = [f"{worst[name][k][0]:.3g} (seed {worst[name][k][1]})" if k in worst[name]
                 else "-" for k in keys]
        lines.append(f"{name:28} {len(seeds[name]):5}  " + "  ".join(f"{c:>18}" for c in cells)
                     + f"  {sum(seconds[name]) / len(seconds[name]):5.1f}")
    return lines, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_seeds, default=_seeds("0-19"), help="e.g. 0-199")
    parser.add_argument("--case", nargs="*", default=None, help="only these cases")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--save", type=Path, default=None, help="write every run here (JSONL)")
    args = parser.parse_args(argv)
    names = args.case or list(MARGINS)
    unknown = sorted(set(names) - set(MARGINS))
    if unknown:
        parser.error(f"no sequence case named {', '.join(unknown)}; cases: {', '.join(MARGINS)}")
    jobs = [(n, s, w) for s in args.seeds for n in names for w in ("broken", "fixed")]
    start = time.perf_counter()
    records = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for record in pool.imap_unordered(_job, jobs):
            records.append(record)
            if args.save:
                with args.save.open("a") as f:
                    f.write(json.dumps(record) + "\n")
    lines, problems = summarise(records)
    print(f"{len(jobs)} runs of {len(names)} cases on seeds {args.seeds[0]}-{args.seeds[-1]} in "
          f"{time.perf_counter() - start:.0f} s; worst margin of each check (positive: held)")
    print("\n".join(lines))
    for p in problems:
        print("PROBLEM", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
