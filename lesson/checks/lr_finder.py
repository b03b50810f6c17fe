"""The learning-rate range test (Smith, 2017) with a suggestion you can trust.

The learning rate grows exponentially from `start_lr` to `end_lr`, one optimizer step per
batch, and the loss is recorded at each step. The raw losses are noisy, so they are smoothed
with an exponential moving average (bias-corrected, so the first points are not pulled towards
0). The sweep stops when the smoothed loss exceeds `diverge_factor` times its best value, or
when the loss stops being a finite number (those points are not kept).

Which rate to pick is the `suggested_lr` rule (see `suggest_lr`). The model and the optimizer
are put back exactly as they were afterwards, also when the sweep raises or is interrupted.
"""
from __future__ import annotations

import csv
import math
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn

from lesson.restore import preserved, require_batch, require_module, require_parameters

Criterion = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class LRFinderResult(list):
    """The sweep's `(lr, loss)` pairs (a list, as the lesson returned) plus the smoothed
    curve, the suggested learning rate and the rule that chose it."""

    def __init__(self, pairs: Iterable[tuple[float, float]], smoothed: list[float],
                 suggested_lr: float | None, rule: str, stopped: str):
        super().__init__(pairs)
        self.smoothed_losses = smoothed
        self.suggested_lr = suggested_lr
        self.rule = rule
        self.stopped = stopped  # why the sweep ended: "end_lr", "diverged" or "nonfinite"

    @property
    def lrs(self) -> list[float]:
        return [lr for lr, _ in self]

    @property
    def losses(self) -> list[float]:
        return [loss for _, loss in self]

    @property
    def min_loss_lr(self) -> float | None:
        """The learning rate at the lowest smoothed loss."""
        if not self:
            return None
        return self.lrs[int(np.argmin(self.smoothed_losses))]

    def to_csv(self, path: str) -> None:
        """Columns lr, loss, smoothed_loss, suggested (1 on the row nearest the suggestion)."""
        mark = -1
        if self.suggested_lr is not None and self:
            mark = int(np.argmin(np.abs(np.log(np.array(self.lrs) / self.suggested_lr))))
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["lr", "loss", "smoothed_loss", "suggested"])
            for i, ((lr, loss), smooth) in enumerate(zip(self, self.smoothed_losses)):
                writer.writerow([repr(lr), repr(loss), repr(smooth), int(i == mark)])

    def plot(self, path: str | None = None):
        """Loss against learning rate (log scale), smoothed curve and suggestion marked.
        Returns the matplotlib Figure; saves a PNG when `path` is given."""
        from lesson.checks.plot_lr_csv import plot_lr_curve

        return plot_lr_curve(self.lrs, self.losses, self.smoothed_losses, self.suggested_lr,
                             path=path)


def smooth(losses: list[float], beta: float = 0.85) -> list[float]:
    """Exponential moving average with bias correction: avg_t / (1 - beta**t)."""
    avg, out = 0.0, []
    for t, loss in enumerate(losses, start=1):
        avg = beta * avg + (1 - beta) * loss
        out.append(avg / (1 - beta ** t))
    return out


SUGGESTION_RULE = "steepest descent before the edge of stability, capped at a third of the edge"

SUSTAINED_SPIKE = 2
"""A raw loss back above the plateau marks the edge when this many consecutive steps are: one
batch above it can be batch-to-batch scatter (recurrent networks show it at rates that train
well), two in a row is a rate that undid the fall..."""

SPIKE_SCATTER = 10.0
"""...or when one step alone overshoots the plateau by more than this many times (an order of
magnitude) the raw loss's scatter about its local trend during the fall (the median absolute
second difference, which a steady fall leaves at ~0): a jump no batch scatter explains. On
the benchmark's sweeps the single spikes of healthy recurrent networks reach 4x at most."""

FALL_BAND = 0.1
"""The fall into the minimum starts where the smoothed loss last leaves the plateau's band of
this share of the drop: on a noisy sweep the smoothed loss dips below the band by chance long
before the real fall, and a rule reading the first dip measures noise."""


def suggest_lr(lrs: list[float], smoothed: list[float], skip_start: int = 10,
               raw: list[float] | None = None) -> float | None:
    """The suggestion rule, on the smoothed loss after the first `skip_start` points:

    1. plateau = median of the next 10 smoothed losses; drop = plateau - minimum;
    2. the fall = from where the smoothed loss last leaves the plateau's band (FALL_BAND of
       the drop) before the minimum, to the minimum;
    3. edge of stability = the first of: the minimum of the smoothed loss, or the first step,
       once half the drop is done within the fall, whose raw loss (`raw`; the smoothed one
       when not given) is back above the plateau for SUSTAINED_SPIKE steps in a row, or
       once by more than SPIKE_SCATTER times the fall's batch scatter: the rate undid
       the whole fall, so it is past the edge even if the loss recovers later (Adam often
       does, and then keeps "improving");
    4. steepest = the rate where the smoothed loss falls fastest against log10(lr), searched
       over the fall up to the edge;
    5. suggestion = min(steepest, edge / 3).

    Why: torch-lr-finder's steepest point alone lands above the rates that train best when
    the sweep runs into the edge of stability and comes back (Adam), and the edge itself is
    too close to divergence to train at; a third of it is the margin the minimum-based rules
    (fastai's lr_min = minimum / 10 is a wider one) keep. Steps 2 and 3 read the fall, not
    the noise: recurrent networks (a single batch spiking above the plateau mid-fall) and
    regressions with noisy batch losses (the smoothed loss dipping early by chance) put the
    earlier version (first dip, any single spike) 5-5000x below the best rate. Checked
    against grid searches of trainings of 50, 200 and 1000 steps on 20 tasks (MLP, CNN, GRU,
    LSTM, regression; SGD, momentum, Adam: `benchmarks/bench_lr_finder.py --set all`).
    Returns None when the loss never went down.
    """
    n = len(lrs)
    if len(smoothed) != n or (raw is not None and len(raw) != n):
        raise ValueError(f"lrs, smoothed and raw must have the same length, got {n}, "
                         f"{len(smoothed)} and {None if raw is None else len(raw)}")
    if n < skip_start + 3:
        return None
    loss = np.asarray(smoothed, dtype=float)
    spikes = loss if raw is None else np.asarray(raw, dtype=float)
    log_lr = np.log10(np.asarray(lrs, dtype=float))
    i_min = int(np.argmin(loss))
    if i_min <= skip_start:
        return None
    plateau = float(np.median(loss[skip_start:min(skip_start + 10, i_min)]))
    drop = plateau - loss[i_min]
    if drop <= 0:
        return None
    in_band = np.nonzero(loss[skip_start:i_min + 1] > plateau - FALL_BAND * drop)[0]
    start = skip_start + int(in_band[-1]) + 1 if len(in_band) else skip_start
    half = start + int(np.nonzero(loss[start:i_min + 1] <= plateau - 0.5 * drop)[0][0])
    edge = next((i for i in range(half, i_min) if _past_edge(spikes, i, start, plateau)), i_min)
    lo = max(start - 1, 0)
    hi = max(edge, lo + 2)
    slope = np.gradient(loss[lo:hi + 1], log_lr[lo:hi + 1])
    steepest = lrs[lo + int(np.argmin(slope))]
    return float(min(steepest, lrs[edge] / 3))


def _past_edge(raw: np.ndarray, i: int, start: int, plateau: float) -> bool:
    """Is step `i` past the edge of stability: its raw loss back above the plateau for
    SUSTAINED_SPIKE steps, or once by more than the fall's batch scatter can explain?"""
    if raw[i] <= plateau:
        return False
    if i + SUSTAINED_SPIKE <= len(raw) and bool(np.all(raw[i:i + SUSTAINED_SPIKE] > plateau)):
        return True
    scatter = np.abs(np.diff(raw[max(start - 1, 0):i], 2))
    return len(scatter) > 0 and raw[i] - plateau > SPIKE_SCATTER * float(np.median(scatter))


def _batches(x_data: Any, y_data: torch.Tensor | None,
             batch_size: int | None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches from tensors (whole set, or `batch_size` slices) or a DataLoader."""
    if isinstance(x_data, torch.Tensor):
        require_batch(x_data, y_data)
        n = x_data.shape[0]
        size = n if batch_size is None else batch_size
        while True:
            for start in range(0, n, size):
                yield x_data[start:start + size], y_data[start:start + size]
    else:
        if y_data is not None:
            raise TypeError("pass either tensors (x_data, y_data) or a DataLoader as x_data "
                            "with y_data=None")
        if not isinstance(x_data, Iterable):
            raise TypeError(f"x_data must be a tensor or a DataLoader, got "
                            f"{type(x_data).__name__}")
        empty = True
        for batch in _cycle(x_data):
            empty = False
            yield batch[0], batch[1]
        if empty:
            raise ValueError("the data loader yields no batches")


def _cycle(loader: Iterable) -> Iterator:
    """Iterate a loader again and again (re-shuffling each pass), stop if it is empty."""
    while True:
        got = False
        for batch in loader:
            got = True
            yield batch
        if not got:
            return


def _make_optimizer(optimizer: Any, params: list[nn.Parameter],
                    lr: float) -> torch.optim.Optimizer:
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if optimizer in ("sgd", "SGD"):
        return torch.optim.SGD(params, lr=lr)
    if optimizer in ("adam", "Adam"):
        return torch.optim.Adam(params, lr=lr)
    if callable(optimizer):
        return optimizer(params, lr=lr)
    raise ValueError(f"optimizer must be 'sgd', 'adam', an Optimizer or a factory "
                     f"(params, lr=...) -> Optimizer; got {optimizer!r}")


def find_learning_rate(model: nn.Module, x_data: Any, y_data: torch.Tensor | None = None,
                       criterion: Criterion | None = None, start_lr: float = 1e-7,
                       end_lr: float = 10, steps: int = 100, *, optimizer: Any = "sgd",
                       batch_size: int | None = None, beta: float = 0.85,
                       diverge_factor: float = 4.0, skip_start: int = 10,
                       verbose: bool = True) -> LRFinderResult:
    """Sweep the learning rate from `start_lr` to `end_lr` over `steps` optimizer steps and
    suggest one (rule: `suggest_lr`). Returns the `(lr, loss)` pairs as a list.

    Data: tensors `x_data`, `y_data` (the whole set each step, as in the lesson, or slices of
    `batch_size`), or a DataLoader as `x_data` with `y_data=None`. `optimizer`: "sgd" (the
    lesson's), "adam", a factory `(params, lr=...) -> Optimizer`, or your own optimizer
    instance (its learning rate is overridden during the sweep and restored afterwards).
    """
    require_module(model)
    require_parameters(model)
    if criterion is None or not callable(criterion):
        raise TypeError("criterion must be a callable loss function, e.g. nn.CrossEntropyLoss()")
    if not (start_lr > 0 and end_lr > 0):
        raise ValueError(f"learning rates must be positive, got start_lr={start_lr}, "
                         f"end_lr={end_lr}")
    if start_lr >= end_lr:
        raise ValueError(f"start_lr ({start_lr}) must be below end_lr ({end_lr})")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if isinstance(x_data, torch.Tensor):
        require_batch(x_data, y_data)
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")

    user_optimizer = optimizer if isinstance(optimizer, torch.optim.Optimizer) else None
    params = [p for p in model.parameters() if p.requires_grad]
    with preserved(model, user_optimizer):
        opt = _make_optimizer(optimizer, params, start_lr)
        lrs, losses, stopped = _sweep(model, opt, _batches(x_data, y_data, batch_size),
                                      criterion, start_lr, end_lr, steps, beta, diverge_factor)
    smoothed = smooth(losses, beta)
    suggested = suggest_lr(lrs, smoothed, skip_start, raw=losses)
    result = LRFinderResult(zip(lrs, losses), smoothed, suggested, SUGGESTION_RULE, stopped)
    if verbose:
        _print(result, start_lr)
    return result


def _sweep(model: nn.Module, opt: torch.optim.Optimizer, batches: Iterator, criterion: Criterion,
           start_lr: float, end_lr: float, steps: int, beta: float,
           diverge_factor: float) -> tuple[list[float], list[float], str]:
    model.train()
    device = next(p for p in model.parameters()).device
    mult = (end_lr / start_lr) ** (1 / max(steps - 1, 1))
    lrs: list[float] = []
    losses: list[float] = []
    avg, best = 0.0, math.inf
    for step in range(steps):
        lr = start_lr * mult ** step
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = next(batches)
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = criterion(model(x), y)
        value = float(loss.detach())  # one sync per step: the stop rule needs the value
        if not math.isfinite(value):
            return lrs, losses, "nonfinite"
        avg = beta * avg + (1 - beta) * value
        smoothed = avg / (1 - beta ** (step + 1))
        lrs.append(lr)
        losses.append(value)
        if step > 0 and smoothed > diverge_factor * best:
            return lrs, losses, "diverged"
        best = min(best, smoothed)
        loss.backward()
        opt.step()
    return lrs, losses, "end_lr"


def _print(result: LRFinderResult, start_lr: float) -> None:
    print("\n=== LEARNING RATE FINDER ===")
    if len(result) < 10:
        print("  Could not complete LR sweep -- loss diverged too quickly")
        return
    print(f"  Swept {len(result)} steps from {start_lr:.0e} to {result.lrs[-1]:.0e} "
          f"(stopped: {result.stopped})")
    i = int(np.argmin(result.smoothed_losses))
    print(f"  Minimum smoothed loss {result.smoothed_losses[i]:.4f} at lr={result.lrs[i]:.2e}")
    if result.suggested_lr is None:
        print("  No suggestion: too few points after the first ones")
    else:
        print(f"  Suggested learning rate: {result.suggested_lr:.2e} ({result.rule})")
