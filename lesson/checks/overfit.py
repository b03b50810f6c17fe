"""The overfit-one-batch test: can the model memorise a handful of samples?

A correct model and training loop drive the loss on one small batch to ~0 (and its accuracy to
100%) within a few hundred steps. When they do not, how the loss failed says why:

* the loss is NaN/Inf                 -> numerics (NAN_OR_INF)
* the loss rises or jumps around      -> the learning rate is too high, or the gradient has the
                                         wrong sign (LR_TOO_HIGH)
* no parameter receives a gradient    -> the graph is cut in forward (NO_GRADIENT)
* the loss stays flat, gradients fine -> the optimizer is not connected to the model, or the
                                         model is too small to fit (UNDERFITTING)
* the loss falls steadily but slowly  -> too few steps or too small a learning rate (LR_TOO_LOW)

The model (and the optimizer, when you pass yours) are restored bitwise afterwards, also when
the test raises or is interrupted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from lesson.findings import Finding
from lesson.restore import preserved, require_batch, require_module, require_parameters

Criterion = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: Classification passes at 100% accuracy with a loss below this (the lesson's threshold) ...
CLASSIFICATION_LOSS = 0.1
#: ... regression when the loss is below this fraction of the predict-the-mean loss (R^2 > 0.99).
REGRESSION_FRACTION = 0.01


@dataclass
class OverfitResult:
    """Outcome of the test; truthy when it passed, like the lesson's bool."""

    passed: bool
    task: str                        # "classification" or "regression"
    initial_loss: float
    final_loss: float
    final_accuracy: float | None     # None for regression
    losses: list[float] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed


def _is_classification(output: torch.Tensor, y: torch.Tensor, criterion: Criterion) -> bool:
    if isinstance(criterion, (nn.BCELoss, nn.BCEWithLogitsLoss)):
        return True
    if isinstance(criterion, (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss)):
        return False
    return not y.is_floating_point() and output.dim() >= 2


def accuracy(output: torch.Tensor, y: torch.Tensor, criterion: Criterion) -> torch.Tensor:
    """Share of correct predictions (an on-device 0-dim tensor): one logit per sample is a
    binary decision, several are a class score; float targets of the output's shape are
    probabilities or one-hot rows."""
    if output.dim() == 1 or output.shape[-1] == 1 and output.dim() == 2:
        threshold = 0.5 if isinstance(criterion, nn.BCELoss) else 0.0
        preds = (output.reshape(-1) > threshold).long()
        return (preds == y.reshape(-1).round().long()).float().mean()
    preds = output.argmax(dim=1)
    targets = y.argmax(dim=1) if y.shape == output.shape else y
    return (preds == targets).float().mean()


def _baseline_loss(output: torch.Tensor, y: torch.Tensor, criterion: Criterion,
                   initial_loss: float) -> float:
    """Loss of predicting the targets' mean (shaped like the model's output): what "no fit at
    all" costs in regression. Falls back to the initial loss if the criterion refuses it."""
    with torch.no_grad():
        if output.shape == y.shape:
            guess = y.float().mean(dim=0, keepdim=True).expand_as(y)
        else:
            guess = torch.full_like(output, float(y.float().mean()))
        try:
            value = float(criterion(guess.to(output.dtype), y))
        except Exception:  # a hand-written criterion with shape rules of its own
            return initial_loss
    return value if math.isfinite(value) else initial_loss


def overfit_one_batch(model: nn.Module, x_batch: torch.Tensor, y_batch: torch.Tensor,
                      criterion: Criterion, lr: float = 0.01, steps: int = 200, *,
                      optimizer: torch.optim.Optimizer | None = None,
                      verbose: bool = True) -> OverfitResult:
    """Train on one batch for `steps` steps (Adam at `lr`, or your `optimizer`) and report
    whether the model memorised it; the model and optimizer are left as they were."""
    require_module(model)
    require_parameters(model)
    require_batch(x_batch, y_batch)
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if optimizer is None and not lr > 0:
        raise ValueError(f"lr must be positive, got {lr}")

    with preserved(model, optimizer):
        opt = optimizer or torch.optim.Adam(model.parameters(), lr=lr)
        before = [p.detach().clone() for p in model.parameters()]
        if verbose:
            print("\n=== OVERFIT ONE BATCH TEST ===")
            print(f"Batch size: {x_batch.shape[0]}, Steps: {steps}")
        model.train()
        losses: list[torch.Tensor] = []
        grad_norms: list[torch.Tensor] = []
        for step in range(steps):
            opt.zero_grad()
            output = model(x_batch)
            loss = criterion(output, y_batch)
            loss.backward()
            grads = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
            grad_norms.append(torch.stack(grads).norm() if grads else loss.new_zeros(()))
            losses.append(loss.detach())
            opt.step()
            if verbose and (step % 50 == 0 or step == steps - 1):
                acc = accuracy(output.detach(), y_batch, criterion)
                print(f"  Step {step:3d} | Loss: {loss.item():.6f} | Accuracy: {acc.item():.1%}")
        with torch.no_grad():
            output = model(x_batch)
            final = float(criterion(output, y_batch))
            classification = _is_classification(output, y_batch, criterion)
            acc = float(accuracy(output, y_batch, criterion)) if classification else None
        moved = any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
        history = torch.stack(losses).float().cpu().tolist()  # one host transfer
        norms = torch.stack(grad_norms).float().cpu().tolist()

    initial = history[0]
    if classification:
        passed = math.isfinite(final) and acc == 1.0 and final <= CLASSIFICATION_LOSS
    else:
        baseline = _baseline_loss(output, y_batch, criterion, initial)
        passed = math.isfinite(final) and final <= REGRESSION_FRACTION * max(baseline, 1e-12)
    findings = [] if passed else diagnose_failure(history, norms, moved, final)
    result = OverfitResult(passed, "classification" if classification else "regression",
                           initial, final, acc, history, findings)
    if verbose:
        _print(result)
    return result


def diagnose_failure(losses: list[float], grad_norms: list[float], params_moved: bool,
                     final_loss: float) -> list[Finding]:
    """Which of the lesson's causes fit the loss curve and the gradients of a failed test."""
    steps = len(losses)
    evidence = {"initial_loss": losses[0], "final_loss": final_loss, "steps": steps}
    bad = [i for i, v in enumerate(losses + [final_loss]) if not math.isfinite(v)]
    if bad:
        return [Finding("NAN_OR_INF", f"the loss became non-finite at step {bad[0]} of the "
                        f"overfit test", evidence=evidence | {"first_nonfinite_step": bad[0]},
                        step=bad[0])]
    if max(grad_norms) == 0.0:
        return [Finding("NO_GRADIENT", "no parameter received a gradient during the overfit "
                        "test: the graph is cut between the parameters and the loss",
                        evidence=evidence | {"max_grad_norm": 0.0})]
    initial = losses[0]
    rises = sum(b > a for a, b in zip(losses, losses[1:])) / max(steps - 1, 1)
    if final_loss > initial * 1.05 or (steps >= 10 and max(losses) > 3 * initial):
        return [Finding("LR_TOO_HIGH", "the loss rose while training on one batch: the "
                        "learning rate is too high, or the gradient has the wrong sign (a "
                        "loss that climbs steadily from the first step is gradient ascent)",
                        evidence=evidence | {"max_loss": max(losses), "rising_steps": rises})]
    grad_evidence = {"median_grad_norm": sorted(grad_norms)[len(grad_norms) // 2],
                     "params_moved": params_moved}
    if not params_moved:
        return [Finding("UNDERFITTING", "the loss stayed flat and no parameter changed although "
                        "gradients flow: the optimizer is not connected to the model's "
                        "parameters", evidence=evidence | grad_evidence,
                        advice="Build the optimizer from model.parameters() after the model "
                        "is complete, and step that optimizer.")]
    tail = losses[-max(steps // 5, 2):]
    total_drop, tail_drop = initial - final_loss, tail[0] - tail[-1]
    if total_drop > 0 and tail_drop > 0.1 * total_drop and rises < 0.5:
        return [Finding("LR_TOO_LOW", "the loss is still falling steadily at the end: too few "
                        "steps or too small a learning rate to fit one batch",
                        evidence=evidence | grad_evidence | {"last_fifth_drop": tail_drop})]
    return [Finding("UNDERFITTING", "the loss stopped falling above ~0 although gradients flow "
                    "and parameters move: the model is too small (or its output cannot "
                    "represent the targets)", evidence=evidence | grad_evidence)]


def _print(result: OverfitResult) -> None:
    if result.passed:
        print(f"\n  PASS: Loss converged to {result.final_loss:.6f}"
              + (f" (accuracy {result.final_accuracy:.0%})"
                 if result.final_accuracy is not None else ""))
        return
    print(f"\n  FAIL: Loss did not converge ({result.final_loss:.4f}). "
          "Model or training loop is broken.")
    for f in result.findings:
        print(f"  {f}\n    fix: {f.advice}")
