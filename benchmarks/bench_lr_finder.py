"""How good is the suggested learning rate? Ours beside torch-lr-finder, against a grid search.

For each task the same freshly initialised model goes through:
  * our `find_learning_rate` (100 steps, 1e-7 -> 10, on the task's DataLoader),
  * torch-lr-finder's `LRFinder.range_test` (same range and steps) and its plot's suggestion
    (steepest gradient of the smoothed loss),
  * a grid search of short trainings (STEPS optimizer steps each): one rate per decade from
    1e-4 to 1, then 4 per decade within 0.75 decade of the best of those. Each rate's score is
    its final training-set loss averaged over SEEDS data orders, then averaged with its two
    neighbours on the log-lr axis: on a flat valley a single run's argmin is noise, and the
    window picks the valley's centre. Rates above one that diverges are not trained.
Each suggestion is then trained the same way: "diverges" means a final loss that is not
finite or above the initial loss. Ratio = suggestion / grid best (1 is perfect; the target is
within 3x, i.e. 0.33 to 3). Cost is in optimizer steps.

    .venv/bin/python benchmarks/bench_lr_finder.py
"""
from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lesson.lr_finder import find_learning_rate  # noqa: E402

STEPS = 200
BATCH = 64
SEEDS = 2
COARSE = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]


@dataclass
class Task:
    name: str
    make_model: Callable[[], nn.Module]
    x: torch.Tensor
    y: torch.Tensor
    criterion: nn.Module
    optimizer: str  # "sgd" or "adam"

    def loader(self, seed: int = 0) -> DataLoader:
        g = torch.Generator().manual_seed(seed)
        return DataLoader(TensorDataset(self.x, self.y), batch_size=BATCH, shuffle=True,
                          generator=g)

    def new_optimizer(self, model: nn.Module, lr: float) -> torch.optim.Optimizer:
        cls = torch.optim.Adam if self.optimizer == "adam" else torch.optim.SGD
        return cls(model.parameters(), lr=lr)


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return (x - x.mean()) / x.std(), torch.tensor(d.target)


def tasks() -> list[Task]:
    g = torch.Generator().manual_seed(0)
    # 1. MLP, synthetic 4-class data labelled by a random teacher network
    x1 = torch.randn(2048, 20, generator=g)
    teacher = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 4))
    with torch.no_grad():
        y1 = teacher(x1).argmax(1)
    # 2 and 3. scikit-learn digits (8x8 images, 10 classes)
    xd, yd = _digits()
    # 4. regression with large targets (std ~ 100, offset 50)
    x4 = torch.randn(2048, 10, generator=g)
    w4 = torch.randn(10, 1, generator=g)
    y4 = 40 * (x4 @ w4) + 20 * torch.sin(2 * x4[:, :1]) * x4[:, 1:2] + 50
    # 5. regression with very large targets (std ~ 1000) through a tanh layer
    g5 = torch.Generator().manual_seed(1)
    x5 = torch.randn(2048, 10, generator=g5)
    y5 = 300 * (x5 @ torch.randn(10, 1, generator=g5))
    return [
        Task("mlp-synthetic (SGD)",
             lambda: nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4)),
             x1, y1, nn.CrossEntropyLoss(), "sgd"),
        Task("cnn-digits (SGD)",
             lambda: nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                   nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                   nn.Flatten(), nn.Linear(64, 10)),
             xd, yd, nn.CrossEntropyLoss(), "sgd"),
        Task("deep-mlp-digits (Adam)",
             lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(),
                                   nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128),
                                   nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                   nn.Linear(128, 10)),
             xd, yd, nn.CrossEntropyLoss(), "adam"),
        Task("regression-large-targets (SGD)",
             lambda: nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1)),
             x4, y4, nn.MSELoss(), "sgd"),
        Task("regression-huge-targets (SGD)",
             lambda: nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1)),
             x5, y5, nn.MSELoss(), "sgd"),
    ]


def train_avg(task: Task, init: nn.Module, lr: float) -> float:
    """Mean final loss over SEEDS data orders (inf if any run blew up)."""
    return float(np.mean([train(task, init, lr, order=s) for s in range(SEEDS)]))


def grid_search(task: Task, init: nn.Module) -> tuple[float, dict[float, float], int]:
    """(best rate, {rate: mean final loss}, optimizer steps spent)."""
    coarse: dict[float, float] = {}
    runs = 0
    for lr in COARSE:
        diverged = coarse and math.isinf(max(coarse.values()))
        coarse[lr] = math.inf if diverged else train(task, init, lr)
        runs += not diverged
    centre = round(4 * math.log10(min(coarse, key=coarse.get)))
    fine: dict[float, float] = {}

    def score(k: int) -> None:
        nonlocal runs
        lr = 10 ** (k / 4)
        diverged = any(math.isinf(v) and r < lr for r, v in fine.items())
        fine[lr] = math.inf if diverged else train_avg(task, init, lr)
        runs += 0 if diverged else SEEDS

    for k in range(centre - 3, centre + 4):
        score(k)
    for _ in range(4):  # the best sits on an edge of the fine grid: widen it that way
        ks = sorted(round(4 * math.log10(r)) for r in fine)
        best_k = round(4 * math.log10(min(fine, key=fine.get)))
        if best_k == ks[0]:
            score(ks[0] - 1)
        elif best_k == ks[-1] and math.isfinite(fine[10 ** (ks[-1] / 4)]):
            score(ks[-1] + 1)
        else:
            break
    rates = sorted(fine)
    logs = [math.log(min(fine[r], 1e30)) for r in rates]
    window = [sum(logs[max(i - 1, 0):i + 2]) / len(logs[max(i - 1, 0):i + 2])
              for i in range(len(rates))]
    best = rates[min(range(len(rates)), key=window.__getitem__)]
    return best, fine, runs * STEPS


def train(task: Task, init: nn.Module, lr: float, steps: int = STEPS, order: int = 0) -> float:
    """Final training-set loss after `steps` steps at `lr` (inf when it blew up)."""
    torch.manual_seed(1000 + order)
    model = copy.deepcopy(init)
    opt = task.new_optimizer(model, lr)
    batches = iter(())
    epoch = 0
    with torch.no_grad():
        start = task.criterion(model(task.x), task.y).item()
    for _ in range(steps):
        try:
            xb, yb = next(batches)
        except StopIteration:
            batches = iter(task.loader(seed=1000 * order + epoch))
            epoch += 1
            xb, yb = next(batches)
        opt.zero_grad()
        loss = task.criterion(model(xb), yb)
        if not torch.isfinite(loss):
            return math.inf
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = task.criterion(model(task.x), task.y).item()
    return final if math.isfinite(final) and final <= start else math.inf


def ours(task: Task, init: nn.Module) -> float | None:
    model = copy.deepcopy(init)
    result = find_learning_rate(model, task.loader(), None, task.criterion,
                                optimizer=task.optimizer, verbose=False)
    RAW[task.name] = (result.lrs, result.losses)
    return result.suggested_lr


RAW: dict[str, tuple[list[float], list[float]]] = {}


def torch_lr_finder(task: Task, init: nn.Module) -> float | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torch_lr_finder import LRFinder

    model = copy.deepcopy(init)
    finder = LRFinder(model, task.new_optimizer(model, 1e-7), task.criterion, device="cpu")
    quiet = io.StringIO()  # its progress bar and messages
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        finder.range_test(task.loader(), end_lr=10, num_iter=100)
        fig, ax = plt.subplots()
        try:
            _, lr = finder.plot(ax=ax, suggest_lr=True)
        except Exception:  # too few points before divergence
            lr = None
        plt.close(fig)
    return lr


def main() -> None:
    dump = {}
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    rows = []
    seed = int(os.environ.get("BENCH_SEED", "0"))
    for task in tasks():
        torch.manual_seed(seed)
        init = task.make_model()
        best, grid, cost = grid_search(task, init)
        row = {"task": task.name, "grid_best": best, "grid_loss": grid[best], "cost": cost}
        for tool, fn in (("ours", ours), ("torch-lr-finder", torch_lr_finder)):
            lr = fn(task, init)
            loss = train_avg(task, init, lr) if lr else math.nan
            row[tool] = (lr, loss)
        rows.append(row)
        dump[task.name] = {"grid": grid, "best": best, "sweep": RAW.get(task.name)}
        print(f"  done: {task.name} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)

    print(f"LR range test vs grid search ({STEPS} steps per training, {SEEDS} data orders per "
          f"rate; range tests: 100 steps each)\n")
    head = (f"{'task':<32} {'grid best':>9}  {'tool':<16} {'suggested':>9} {'ratio':>6} "
            f"{'diverges':>8} {'loss@sugg':>10} {'loss@best':>10}")
    print(head)
    print("-" * len(head))
    verdict = True
    for row in rows:
        for tool in ("ours", "torch-lr-finder"):
            lr, loss = row[tool]
            ratio = lr / row["grid_best"] if lr else math.nan
            diverges = not math.isfinite(loss)
            ok = lr is not None and 1 / 3 <= ratio <= 3 and not diverges
            if tool == "ours":
                verdict &= ok
            task_cell = row["task"] if tool == "ours" else ""
            best_cell = f"{row['grid_best']:.2e}" if tool == "ours" else ""
            lr_cell = f"{lr:.2e}" if lr else "none"
            print(f"{task_cell:<32} {best_cell:>9}  {tool:<16} {lr_cell:>9} {ratio:>6.2f} "
                  f"{'YES' if diverges else 'no':>8} {loss:>10.4g} {row['grid_loss']:>10.4g}")
    costs = ", ".join(f"{r['cost']}" for r in rows)
    print(f"\ncost per task in optimizer steps: range test 100; grid search {costs} "
          f"(up to {max(r['cost'] for r in rows) // 100}x the range test)")
    print(f"ours within 3x of the grid best and never diverging on every task: "
          f"{'YES' if verdict else 'NO'}")
    print(f"(total time {time.perf_counter() - t0:.0f} s)")
    if len(sys.argv) > 1:  # raw numbers for tuning: bench_lr_finder.py out.npy
        np.save(sys.argv[1], dump, allow_pickle=True)


if __name__ == "__main__":
    main()
