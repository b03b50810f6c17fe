"""Two versions of the debugger side by side in one process: is a change faster, or only noise?

The overhead benchmarks compare the debugger with plain training; run twice, the same code reads
1.016 to 1.037 on the small CNN, more than any change to its hot paths is worth. This one
compares a git revision's `lesson/` (default HEAD) with the working tree's, in the same process
and at the same moments: plain copies, copies with the revision's debugger and copies with the
working tree's take their steps in turns, in a shuffled order at every step. The revision's
package is extracted with `git archive` into a temporary folder and imported under another
name, so both versions are loaded at once. The debuggers' copies are staggered by one
statistics period, so the copies of each version hold every phase of the default schedule.
Printed per arm: the ratio to the plain copies, the time added per step, and each copy's own
figure (their spread is the noise floor: where a copy's tensors lie moves it by some
microseconds).

Usage: python benchmarks/bench_versions.py [--against HEAD] [--model cnn|mlp|encoder]
       [--batch N] [--steps 2000] [--copies 4] [--system-malloc]
"""
from __future__ import annotations

import argparse
import importlib
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bench_monitor_overhead import run_with_steady_malloc
from bench_step_kinds import workload
from workload import make_model, train_steps

from lesson.debugger.monitor import DEFAULT_EVERY, NetworkDebugger

ROOT = Path(__file__).resolve().parent.parent
_IMPORT = re.compile(r"^(\s*)(from|import) lesson\b", re.MULTILINE)
_MODULE_NAME = re.compile(r"([\"'])lesson\.")     # modules named in strings (lazy imports)


def debugger_at(rev: str, into: Path) -> type:
    """`NetworkDebugger` as it is at git revision `rev`, imported under another package name."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "lesson"],
                                 check=True, capture_output=True).stdout
    except subprocess.CalledProcessError as exc:
        sys.exit(f"bench_versions: git cannot read lesson/ at {rev!r}: "
                 f"{exc.stderr.decode().strip()}")
    name = "lesson_at_" + re.sub(r"\W", "_", rev)
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            # the "data" filter where this Python has it (3.10.12+, 3.11.4+)
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(into, **safe)
    package = into / name
    (into / "lesson").rename(package)
    for path in package.rglob("*.py"):       # its own modules, not the working tree's
        text = _IMPORT.sub(rf"\1\2 {name}", path.read_text())
        path.write_text(_MODULE_NAME.sub(rf"\1{name}.", text))
    sys.path.insert(0, str(into))
    try:
        return importlib.import_module(f"{name}.debugger.monitor").NetworkDebugger
    except (ImportError, AttributeError) as exc:
        sys.exit(f"bench_versions: no NetworkDebugger in lesson/debugger/monitor.py at {rev!r} "
                 f"(a revision from before that layout?): {exc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with")
    parser.add_argument("--model", choices=["cnn", "mlp", "encoder"], default="cnn")
    parser.add_argument("--batch", type=int, default=None, help="batch size (the model's own)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--copies", type=int, default=4, help="copies of each arm")
    parser.add_argument("--system-malloc", action="store_true",
                        help="keep glibc's malloc defaults (see bench_monitor_overhead.py)")
    args = parser.parse_args()
    if args.steps < 200 or args.copies < 1 or (args.batch is not None and args.batch < 1):
        parser.error("--steps must be at least 200 (one full statistics step), --copies and "
                     "--batch at least 1")
    if not args.system_malloc:
        run_with_steady_malloc()
    with tempfile.TemporaryDirectory() as tmp:
        compare(debugger_at(args.against, Path(tmp)), args)


def compare(old: type, args: argparse.Namespace) -> None:
    torch.set_num_threads(2)
    make, x = workload(args.model, args.batch)
    y = torch.randint(0, 10, (x.shape[0],), generator=torch.Generator().manual_seed(1))
    criterion = nn.CrossEntropyLoss()

    def step(model: nn.Module, opt: torch.optim.Optimizer, debugger: Any) -> float:
        return train_steps(model, opt, criterion, x, y, debugger)

    labels = {"plain": None, args.against: old, "working tree": NetworkDebugger}
    arms = []
    for label, cls in labels.items():
        for copy in range(args.copies):
            torch.manual_seed(1)
            model = make() if make is not None else make_model(1)
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)
            arms.append((label, [model, opt, cls(model, opt) if cls else None]))
            # warm-up; the debuggers' copies one statistics period apart
            for _ in range(20 + (copy * DEFAULT_EVERY if cls else 0)):
                step(*arms[-1][1])
    totals = [0.0] * len(arms)
    order = list(range(len(arms)))
    for _ in range(args.steps):
        random.shuffle(order)
        for i in order:
            totals[i] += step(*arms[i][1])
    per_arm: dict[str, list[float]] = {label: [] for label in labels}
    for (label, _), total in zip(arms, totals):
        per_arm[label].append(total / args.steps)
    plain = sum(per_arm["plain"]) / args.copies
    print(f"{args.model}, batch {x.shape[0]}, Adam, 2 threads, {args.copies} copies per arm, "
          f"{args.steps} steps in turns; plain step {plain * 1e3:.2f} ms")
    print(f"{'arm':<14} {'ratio':>6} {'added':>12}   each copy (us a step)")
    for label, times in per_arm.items():
        mean = sum(times) / len(times)
        copies = " ".join(f"{(t - plain) * 1e6:+.0f}" for t in times)
        print(f"{label:<14} {mean / plain:>6.3f} {(mean - plain) * 1e6:>+7.1f} us   {copies}")


if __name__ == "__main__":
    main()
