"""Memory of NetworkDebugger over 10,000 training steps: it must stay flat.

Statistics every step (every=1, the worst case), history bounded to 200 records. Prints the
number of live tensors and the Python memory traced by tracemalloc after 1,000 steps and after
10,000 steps; the debugger keeps no activation, and its history is thinned, so both stay flat.
(The recorded losses are one float per step by design; the script reports them apart.)

Usage: python benchmarks/bench_monitor_memory.py [--steps 10000]
"""
from __future__ import annotations

import argparse
import gc
import tracemalloc

import torch
from torch import nn

from lesson.debugger.monitor import NetworkDebugger


def live_tensors() -> int:
    gc.collect()
    return sum(type(o) in (torch.Tensor, nn.Parameter) for o in gc.get_objects())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(),
                          nn.Linear(64, 4))
    x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    marks = {}
    with NetworkDebugger(model, opt, crit, every=1, max_history=200) as dbg:
        tracemalloc.start()
        for i in range(1, args.steps + 1):
            opt.zero_grad()
            loss = dbg.criterion(model(x), y)
            dbg.record_loss(loss.detach())
            loss.backward()
            opt.step()
            if i in (args.steps // 10, args.steps):
                losses = len(dbg.loss_history)
                traced = tracemalloc.get_traced_memory()[0]
                marks[i] = (live_tensors(), traced, len(dbg.history), losses)
        tracemalloc.stop()
    print(f"{'steps':>7} {'live tensors':>13} {'traced Python MiB':>18} {'records':>8} "
          f"{'losses':>7}")
    for i, (tensors, traced, records, losses) in marks.items():
        print(f"{i:>7} {tensors:>13} {traced / 2**20:>18.2f} {records:>8} {losses:>7}")
    (t0, m0, _, l0), (t1, m1, _, l1) = marks.values()
    per_loss = 24 + 8              # a float object and its list slot
    growth = (m1 - m0 - (l1 - l0) * per_loss) / 2**20
    print(f"growth beyond the loss list: {growth:.2f} MiB; live tensors {t0} -> {t1}")


if __name__ == "__main__":
    main()
