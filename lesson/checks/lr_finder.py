"""The learning-rate range test (Smith, 2017) with a suggestion you can trust.

The learning rate grows exponentially from `start_lr` to `end_lr`, one optimizer step per
batch, and the loss is recorded at each step. The raw losses are noisy, so they are smoothed
with an exponential moving average (bias-corrected, so the first points are not pulled towards
0). The sweep stops when the smoothed loss exceeds `diverge_factor` times its best value, or
when the loss stops being a finite number (those points are not kept).

Which rate to pick depends on what was swept (`lesson.checks.lr_suggestion`): plain SGD on a
classification loss calls for a rate near the edge of stability the sweep shows or above it,
chosen by short trainings at multiples of the edge (probes); anything else for the smoothed
loss's steepest descent, capped at a third of the edge; a sweep whose loss never went down, by
short trainings from its last rate down; the result says which rule, and why.
The model and the optimizer are put back exactly as they were afterwards, also when the sweep
or a probe raises or is interrupted.
"""
from __future__ import annotations

import csv
import inspect
import itertools
import math
import textwrap
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn

from lesson.checks.lr_suggestion import choose_lr, smooth, suggest_lr
from lesson.debugger.loss_inputs import (BINARY_LOGITS, BINARY_PROBS, CLASS_LOG_PROBS,
                                         CLASS_LOGITS, criterion_kind)
from lesson.restore import preserved, require_batch, require_module, require_parameters

Criterion = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: the criterion kinds of a classification loss (lesson.debugger.loss_inputs)
CLASSIFICATION = (CLASS_LOGITS, CLASS_LOG_PROBS, BINARY_LOGITS, BINARY_PROBS)
#: the probes are scored on the batches the first one trained on, as many as fit in this many
#: bytes, and all train on them when all fit (digits: 50 x 64 x 64 floats, 0.8 MB); with
#: larger batches each probe trains on batches of its own
PROBE_BATCH_BYTES = 256 * 2 ** 20


class LRFinderResult(list):
    """The sweep's `(lr, loss)` pairs (a list, as the lesson returned) plus the smoothed
    curve, the suggested learning rate, which rule the sweep called for (`kind`: "edge",
    "steepest" or "probed", see `lesson.checks.lr_suggestion`) and why, in words (`rule`)."""

    def __init__(self, pairs: Iterable[tuple[float, float]], smoothed: list[float],
                 suggested_lr: float | None, rule: str, stopped: str,
                 kind: str | None = None, edge_lr: float | None = None,
                 probes: Iterable[tuple[float, float]] = (), probe_steps: int = 0):
        super().__init__(pairs)
        self.smoothed_losses = smoothed
        self.suggested_lr = suggested_lr
        self.rule = rule
        self.kind = kind
        self.edge_lr = edge_lr    # the edge of stability the suggestion was read against
        self.stopped = stopped  # why the sweep ended: "end_lr", "diverged" or "nonfinite"
        self.probes = list(probes)      # EDGE's short trainings: (rate, mean of last losses)
        self.probe_steps = probe_steps  # optimizer steps they took, beyond the sweep's

    @property
    def steps_spent(self) -> int:
        """Optimizer steps the finder took: the sweep's and the probes'."""
        return len(self) + self.probe_steps

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
        if not _takes_lr(optimizer):
            raise TypeError(f"optimizer {optimizer!r} takes no lr: the sweep sets the rate "
                            "at each step, so a factory must be (params, lr=...) -> Optimizer "
                            "(an optimizer class, or lambda p, lr: torch.optim.SGD(p, lr=lr))")
        return optimizer(params, lr=lr)
    raise ValueError(f"optimizer must be 'sgd', 'adam', an Optimizer or a factory "
                     f"(params, lr=...) -> Optimizer; got {optimizer!r}")


def _takes_lr(factory: Callable[..., Any]) -> bool:
    """Can `factory` be called with lr=...? (True when its signature cannot be read.)"""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return True
    return "lr" in sig.parameters or any(p.kind is p.VAR_KEYWORD
                                         for p in sig.parameters.values())


def find_learning_rate(model: nn.Module, x_data: Any, y_data: torch.Tensor | None = None,
                       criterion: Criterion | None = None, start_lr: float = 1e-7,
                       end_lr: float = 10, steps: int = 100, *, optimizer: Any = "sgd",
                       batch_size: int | None = None, beta: float = 0.85,
                       diverge_factor: float = 4.0, skip_start: int = 10,
                       probes: bool = True, verbose: bool = True) -> LRFinderResult:
    """Sweep the learning rate from `start_lr` to `end_lr` over `steps` optimizer steps and
    suggest one (rules: `lesson.checks.lr_suggestion.choose_lr`). Returns the `(lr, loss)`
    pairs as a list, with the suggestion, the rule and why (see LRFinderResult).

    Plain SGD on a classification loss is probed (`probes=False`: not): a few short
    trainings at multiples of the sweep's edge of stability, each from the initial weights
    (at most 8 x 50 steps, usually 4 or 5). So is any sweep whose loss never went down:
    trainings from its last rate down (at most 16 x 50 steps, longer only if none moved); and
    an adaptive optimizer's sweep whose steepest descent lay above its cap: 4 x 100 steps
    from the cap down.

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
    batches = _batches(x_data, y_data, batch_size)
    spent, kept, room = [0], [], [PROBE_BATCH_BYTES]

    def drawn(n: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """`n` fresh batches, the first ones kept while they fit in PROBE_BATCH_BYTES (the
        first one always)."""
        for _ in range(n):
            batch = next(batches)
            room[0] -= sum(t.element_size() * t.nelement() for t in batch
                           if isinstance(t, torch.Tensor))
            if room[0] >= 0 or not kept:       # at least one to score on
                kept.append(batch)
            yield batch

    def probe(lr: float, n: int) -> float:
        """Each probe from the initial weights, trained on the kept batches first (then on
        fresh ones, kept while they fit in PROBE_BATCH_BYTES: probes of one length then
        differ only by their rate) and scored on the kept ones."""
        with preserved(model, user_optimizer):
            out = _train_at(model, _make_optimizer(optimizer, params, lr),
                            itertools.chain(kept[:n], drawn(max(n - len(kept), 0))), kept,
                            criterion, lr)
        spent[0] += n
        return out

    with preserved(model, user_optimizer):
        with preserved(model, user_optimizer):     # the sweep ends where the rate blew up
            opt = _make_optimizer(optimizer, params, start_lr)
            plain_sgd = type(opt) is torch.optim.SGD and not any(
                g.get("momentum", 0) for g in opt.param_groups)
            lrs, losses, stopped = _sweep(model, opt, batches, criterion, start_lr, end_lr,
                                          steps, beta, diverge_factor)
        smoothed = smooth(losses, beta)
        choice = choose_lr(lrs, smoothed, skip_start, losses, plain_sgd=plain_sgd,
                           adaptive=not isinstance(opt, torch.optim.SGD),
                           classification=criterion_kind(criterion) in CLASSIFICATION,
                           attention=any(isinstance(m, nn.MultiheadAttention)
                                         for m in model.modules()),
                           probe=probe if probes else None)
    result = LRFinderResult(zip(lrs, losses), smoothed, choice.lr, choice.reason, stopped,
                            kind=choice.kind, edge_lr=choice.edge, probes=choice.probes,
                            probe_steps=spent[0])
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


def _train_at(model: nn.Module, opt: torch.optim.Optimizer, batches: Iterable,
              score_on: list, criterion: Criterion, lr: float) -> float:
    """One step per batch of `batches` at the fixed rate `lr`, then the final weights' mean
    loss on the batches of `score_on` (no gradients); inf when a loss was not finite (read
    from the device once)."""
    model.train()
    device = next(p for p in model.parameters()).device
    for group in opt.param_groups:
        group["lr"] = lr
    finite = torch.ones((), dtype=torch.bool, device=device)
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()
        finite = finite & torch.isfinite(loss.detach())
    with torch.no_grad():
        end = torch.stack([criterion(model(x.to(device)), y.to(device)).float()
                           for x, y in score_on]).mean()
    score, ok = float(end), bool(finite)
    return score if ok and math.isfinite(score) else math.inf


def _print(result: LRFinderResult, start_lr: float) -> None:
    print("\n=== LEARNING RATE FINDER ===")
    if len(result) < 10:
        print("  Could not complete LR sweep -- loss diverged too quickly")
        return
    print(f"  Swept {len(result)} steps from {start_lr:.0e} to {result.lrs[-1]:.0e} "
          f"(stopped: {result.stopped})"
          + (f"; then {len(result.probes)} probes, {result.probe_steps} steps"
             if result.probe_steps else ""))
    i = int(np.argmin(result.smoothed_losses))
    print(f"  Minimum smoothed loss {result.smoothed_losses[i]:.4f} at lr={result.lrs[i]:.2e}")
    if result.suggested_lr is None:
        print(f"  No suggestion: {result.rule}")
    else:
        print(f"  Suggested learning rate: {result.suggested_lr:.2e}")
        print(f"  Rule, {textwrap.fill(result.rule, 86, subsequent_indent='    ')}")


__all__ = ["LRFinderResult", "choose_lr", "find_learning_rate", "smooth", "suggest_lr"]
