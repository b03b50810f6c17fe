"""Where the debugger's cost goes: the time it adds to each kind of step, on one model.

A plain copy of the model and a copy with `NetworkDebugger(model, optimizer)` (the default
schedule) take their steps in turns, in a shuffled order at every step, for `--steps` steps
(2 copies each by default, `--copies`). Each of the debugger's steps is classed as its
schedule has it: *plain* (no statistics: the per-step hooks and `record_loss` only), *light*
(a statistics step) or *full* (one statistics step in four), and its time is compared with
the mean of the plain copies' at the same step. The median and the mean of that difference
are printed per kind, then the mean over all steps as a share of the plain step: what
`bench_monitor_overhead.py` reads as a ratio, split by where it comes from.

The placement of a copy's tensors in memory moves its step time by some microseconds whatever
the code does (two plain copies differ by up to 10 us a step on the small CNN), so a
difference of a few microseconds between two versions of the debugger is not readable here.

`--every` and `--full-every` set the debugger's schedule (the defaults, 50 and 200, unless
given): what a lighter schedule buys on a small model. No schedule removes the plain steps'
cost, the floor under every reading.

Usage: python benchmarks/bench_step_kinds.py [--model cnn|mlp|encoder] [--batch N]
       [--steps 2000] [--copies 2] [--every 50] [--full-every 200] [--system-malloc]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics

import torch
from torch import nn

from bench_monitor_overhead import STEADY_MALLOC, EncoderLayer, SmallCNN, run_with_steady_malloc
from workload import make_model, train_steps

from lesson.debugger.monitor import DEFAULT_EVERY, DEFAULT_FULL_EVERY, NetworkDebugger

KINDS = ("plain", "light", "full")


def workload(model: str, batch: int | None) -> tuple[type[nn.Module] | None, torch.Tensor]:
    """The model's class (None: the reference MLP) and one input batch."""
    g = torch.Generator().manual_seed(0)
    if model == "cnn":
        return SmallCNN, torch.randn(batch or 32, 1, 28, 28, generator=g)
    if model == "encoder":
        return EncoderLayer, torch.randn(batch or 32, 32, 128, generator=g)
    return None, torch.randn(batch or 256, 512, generator=g)


def step_kind(debugger: NetworkDebugger) -> str:
    """The kind of the step the debugger is about to take."""
    step = debugger._step
    if not debugger._scheduled(step):
        return "plain"
    return "full" if debugger._full(step) else "light"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["cnn", "mlp", "encoder"], default="cnn")
    parser.add_argument("--batch", type=int, default=None, help="batch size (the model's own)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--copies", type=int, default=2, help="copies of each arm")
    parser.add_argument("--every", type=int, default=DEFAULT_EVERY,
                        help="the debugger's statistics period (default %(default)s)")
    parser.add_argument("--full-every", type=int, default=DEFAULT_FULL_EVERY,
                        help="steps between full statistics steps (default %(default)s)")
    parser.add_argument("--system-malloc", action="store_true",
                        help="keep glibc's malloc defaults (see bench_monitor_overhead.py)")
    args = parser.parse_args()
    if args.copies < 1 or args.every < 1 or args.full_every < 1:
        parser.error("--copies, --every and --full-every must be at least 1")
    period = max(args.every, args.full_every)
    if args.steps < period:
        parser.error(f"--steps must be at least {period} (one full statistics step)")
    if not args.system_malloc:
        run_with_steady_malloc()
    torch.set_num_threads(2)
    make, x = workload(args.model, args.batch)
    y = torch.randint(0, 10, (x.shape[0],), generator=torch.Generator().manual_seed(1))
    criterion = nn.CrossEntropyLoss()
    arms = []
    for with_debugger in (False, True):
        for _ in range(args.copies):
            torch.manual_seed(1)
            model = make() if make is not None else make_model(1)
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)
            debugger = (NetworkDebugger(model, opt, every=args.every, full_every=args.full_every)
                        if with_debugger else None)
            arms.append((model, opt, debugger))

    def step(model: nn.Module, opt: torch.optim.Optimizer,
             debugger: NetworkDebugger | None) -> float:
        return train_steps(model, opt, criterion, x, y, debugger)

    for arm in arms:                         # warm-up: allocator, the debugger's warm-up steps
        for _ in range(20):
            step(*arm)
    extra: dict[str, list[float]] = {k: [] for k in KINDS}
    plain_times = []
    order = list(arms)
    for _ in range(args.steps):
        random.shuffle(order)
        kinds = {id(a): step_kind(a[2]) for a in order if a[2] is not None}
        times = {id(a): step(*a) for a in order}
        plain = statistics.mean(times[id(a)] for a in arms if a[2] is None)
        plain_times.append(plain)
        for a in arms:
            if a[2] is not None:
                extra[kinds[id(a)]].append(times[id(a)] - plain)
    plain_step = statistics.median(plain_times)
    malloc = os.environ.get("GLIBC_TUNABLES", "(system defaults)")
    print(f"{args.model}, batch {x.shape[0]}, Adam, 2 threads, {args.copies} copies per arm, "
          f"{args.steps} steps in turns; malloc {'steady' if malloc == STEADY_MALLOC else malloc}"
          f"; every={args.every}, full_every={args.full_every}; plain step "
          f"{plain_step * 1e3:.2f} ms")
    print(f"{'step kind':<10} {'steps':>6} {'median added':>13} {'mean added':>11}")
    for kind in KINDS:
        values = extra[kind]
        if not values:
            continue
        print(f"{kind:<10} {len(values):>6} {statistics.median(values) * 1e6:>10.1f} us "
              f"{statistics.mean(values) * 1e6:>8.1f} us")
    mean = sum(sum(v) for v in extra.values()) / sum(len(v) for v in extra.values())
    print(f"mean added per step: {mean * 1e6:.1f} us, {mean / plain_step * 100:.2f}% of the "
          f"plain step")


if __name__ == "__main__":
    main()
