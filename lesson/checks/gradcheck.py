"""Gradient checking that covers every element and names the faulty parameter.

The lesson's check perturbs the first 5 elements of each tensor, one at a time: 17 of the 106
elements of a Linear(10,8)-ReLU-Linear(8,2) model, for 35 forward passes. A bug in element 50
goes unseen. Here each parameter tensor is checked along one random direction `v` that touches
all its elements at once (as `torch.autograd.gradcheck(fast_mode=True)` does):

    numerical  = (f(theta + eps*v) - f(theta - eps*v)) / (2*eps)
    analytical = grad . v

A wrong value in any element changes `grad . v` (for a random `v`, almost surely), so one pair
of forward passes covers the whole tensor, and checking tensor by tensor names the faulty one.
That is 1 + 2 * (number of tensors) forward passes: 9 for the model above, fewer than the 10 of
gradcheck's fast mode (which checks along one direction but cannot say which tensor is wrong).

ReLU kinks: if `theta +- eps*v` fall on two sides of a kink, the difference quotient is off
although the backward pass is right. Forward hooks on ReLU-family and max-pooling modules
record which side of each kink every unit is on; when the three points are not on the same
linear piece, the tensor is checked again along a fresh direction with a 10x smaller step.
A failure is reported only when a second direction confirms it (which also covers kinks the
hooks cannot see, such as a functional `F.relu`): a bug is first-order and reappears along
any direction, a kink crossing rarely does. A correct model costs 1 + 2 * tensors passes;
each failing tensor costs 2 more.

The maths (`numerical_gradient_check`) works on NumPy arrays, so the same function checks the
course's NumPy mini-framework and, through a float64 CPU copy, any torch model.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from lesson.findings import Finding
from lesson.restore import require_batch, require_module, require_parameters

#: A relative difference below this passes (the lesson's "OK"; CS231n calls < 1e-7 ideal in
#: float64 and > 1e-2 almost surely wrong). Along a random direction in float64 a correct
#: backward pass lands near 1e-9, a wrong one above 1e-3.
DEFAULT_TOL = 1e-5
#: Differences below this are round-off, whatever the relative value (a tensor whose gradient
#: is exactly zero, e.g. the bias of a dead unit, would otherwise divide noise by ~0).
ABS_FLOOR = 1e-9


@dataclass
class ParamCheck:
    """The check of one parameter tensor along a random direction."""

    name: str
    shape: tuple[int, ...]
    rel_diff: float
    numerical: float
    analytical: float
    passed: bool
    attempts: int = 1      # directions drawn (more than 1 after a kink or a first failure)
    on_kink: bool = False  # every step crossed a kink: inconclusive, so not flagged

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class GradientCheckReport:
    """One `ParamCheck` per parameter tensor, plus the cost of the check."""

    params: list[ParamCheck]
    forward_passes: int
    tol: float = DEFAULT_TOL
    findings: list[Finding] = field(default_factory=list)

    @property
    def max_rel_diff(self) -> float:
        """The largest relative difference among conclusive checks (kinks left out)."""
        return max((p.rel_diff for p in self.params if not p.on_kink), default=0.0)

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.params)

    @property
    def failing(self) -> list[str]:
        return [p.name for p in self.params if not p.passed]

    @property
    def elements_checked(self) -> int:
        return sum(p.numel for p in self.params)

    def __bool__(self) -> bool:
        return self.passed

    def print(self) -> None:
        """One line per parameter (as in the lesson), then the verdict."""
        for p in self.params:
            status = "OK" if p.passed else "MISMATCH"
            note = " (on a kink: inconclusive)" if p.on_kink else (
                f" ({p.attempts} directions)" if p.attempts > 1 else "")
            print(f"  {p.name}: max_rel_diff={p.rel_diff:.2e} [{status}]{note}")
        print(f"\n  Checked {self.elements_checked} elements in {len(self.params)} tensors "
              f"with {self.forward_passes} forward passes")
        kinks = [p.name for p in self.params if p.on_kink]
        if kinks:
            print(f"  NOTE: {', '.join(kinks)} sit on a kink (a ReLU input at ~0); "
                  "re-run with another batch to check them")
        if self.passed and self.max_rel_diff < self.tol:
            print(f"  PASS: Gradients match (rel_diff < {self.tol:.0e})")
        elif self.passed:
            print("  PASS: differences are round-off (absolute difference below "
                  f"{ABS_FLOOR:.0e})")
        else:
            print(f"  FAIL: Gradient mismatch in {', '.join(self.failing)}")


def relative_difference(numerical: float, analytical: float) -> float:
    """|a - n| / max(|a|, |n|, 1e-8): the lesson's agreement metric."""
    return abs(numerical - analytical) / max(abs(numerical), abs(analytical), 1e-8)


#: What `f` returns: the loss, or the loss and a "piece signature" (e.g. the on/off mask of
#: every ReLU). Two points with equal signatures lie on the same linear piece, so the central
#: difference between them is trustworthy.
LossAndPiece = "float | tuple[float, np.ndarray]"


def _split(value: float | tuple[float, np.ndarray]) -> tuple[float, np.ndarray | None]:
    if isinstance(value, tuple):
        return float(value[0]), np.asarray(value[1])
    return float(value), None


def _same_piece(a: np.ndarray | None, b: np.ndarray | None) -> bool | None:
    if a is None or b is None:
        return None  # unknown: no signature
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _directional(f: Callable[[], object], param: np.ndarray, grad: np.ndarray,
                 rng: np.random.Generator, eps: float, piece0: np.ndarray | None
                 ) -> tuple[float, float, bool | None]:
    """Central difference of f along a random unit direction of `param`, grad . v, and
    whether both evaluation points stayed on the piece of `theta` (None when unknown)."""
    v = rng.standard_normal(param.shape)
    v /= np.linalg.norm(v) or 1.0
    saved = param.copy()
    try:
        param += eps * v
        f_plus, piece_plus = _split(f())
        param[...] = saved - eps * v
        f_minus, piece_minus = _split(f())
    finally:
        param[...] = saved
    same = _same_piece(piece0, piece_plus)
    if same is not None:
        same = same and bool(_same_piece(piece0, piece_minus))
    numerical = (f_plus - f_minus) / (2 * eps)
    analytical = float(np.sum(grad * v))
    return numerical, analytical, same


def numerical_gradient_check(f: Callable[[], object], params: Sequence[np.ndarray],
                             grads: Sequence[np.ndarray], names: Sequence[str] | None = None,
                             eps: float = 1e-4, tol: float = DEFAULT_TOL, seed: int = 0,
                             piece0: np.ndarray | None = None,
                             max_attempts: int = 4) -> list[ParamCheck]:
    """Check `grads` (the analytical gradients of `f` at `params`) tensor by tensor.

    `f()` evaluates the loss at the current values of `params`, float64 NumPy arrays that are
    modified in place and put back. It may return `(loss, piece)` where `piece` is an array
    that changes when a kink is crossed (ReLU masks); pass the piece at `params` as `piece0`.

    Each tensor costs 2 calls of `f`. When the two points straddle a kink, or when a direction
    fails, a fresh direction with a 10x smaller step is drawn, up to `max_attempts`
    directions: a tensor fails when two directions on one linear piece both disagree. A
    tensor whose every step straddles a kink is reported as `on_kink` (inconclusive) and not
    flagged.
    """
    if len(params) != len(grads):
        raise ValueError(f"got {len(params)} parameters but {len(grads)} gradients")
    names = list(names) if names is not None else [f"param{i}" for i in range(len(params))]
    rng = np.random.default_rng(seed)
    results = []
    for name, param, grad in zip(names, params, grads):
        if param.shape != grad.shape:
            raise ValueError(f"{name}: gradient shape {grad.shape} != parameter shape "
                             f"{param.shape}")
        failures = 0
        for attempt in range(1, max_attempts + 1):
            num, ana, same = _directional(f, param, grad, rng, eps / 10 ** (attempt - 1),
                                          piece0)
            passed = _agrees(num, ana, tol)
            if same is False:       # straddled a kink: this difference proves nothing
                continue
            if passed:
                break
            failures += 1           # confirm along a second direction: a kink the piece
            if failures == 2:       # signature cannot see (max, abs, F.relu) rarely repeats
                break
        on_kink = same is False and failures == 0
        results.append(ParamCheck(name, tuple(param.shape), relative_difference(num, ana),
                                  num, ana, passed or on_kink, attempt, on_kink))
    return results


def _agrees(numerical: float, analytical: float, tol: float) -> bool:
    if not (np.isfinite(numerical) and np.isfinite(analytical)):
        return False
    return (relative_difference(numerical, analytical) < tol
            or abs(numerical - analytical) < ABS_FLOOR)


def findings_for(checks: Sequence[ParamCheck], tol: float = DEFAULT_TOL) -> list[Finding]:
    """A GRADIENT_MISMATCH finding per failing tensor; the evidence names the parameter."""
    failing = [c for c in checks if not c.passed]
    out = []
    note = ""
    if len(failing) > 1:
        last = max(i for i, c in enumerate(checks) if not c.passed)
        after = next((c.name for c in checks[last + 1:] if c.passed), None)
        note = (f" ({len(failing)} tensors fail. A wrong input gradient corrupts every tensor "
                f"before the faulty layer: suspect the backward of the layer after "
                f"{checks[last].name}" + (f", i.e. the one holding {after})" if after else ")"))
    for c in failing:
        out.append(Finding(
            "GRADIENT_MISMATCH",
            f"backward pass of {c.name} disagrees with finite differences: relative "
            f"difference {c.rel_diff:.2e} (tolerance {tol:.0e}){note}",
            layer=c.name.rsplit(".", 1)[0] if "." in c.name else c.name,
            evidence={"parameter": c.name, "shape": list(c.shape), "rel_diff": c.rel_diff,
                      "numerical": c.numerical, "analytical": c.analytical,
                      "directions": c.attempts}))
    return out


#: Modules whose output is piecewise: module type -> the kink points of its input.
_KINKS: dict[type[nn.Module], Callable[[nn.Module], tuple[float, ...]]] = {
    nn.ReLU: lambda m: (0.0,), nn.LeakyReLU: lambda m: (0.0,), nn.PReLU: lambda m: (0.0,),
    nn.ELU: lambda m: (0.0,), nn.CELU: lambda m: (0.0,), nn.SELU: lambda m: (0.0,),
    nn.ReLU6: lambda m: (0.0, 6.0), nn.Hardswish: lambda m: (-3.0, 3.0),
    nn.Hardsigmoid: lambda m: (-3.0, 3.0),
    nn.Hardtanh: lambda m: (float(m.min_val), float(m.max_val)),
}


_MAXPOOLS = {nn.MaxPool1d: "max_pool1d", nn.MaxPool2d: "max_pool2d", nn.MaxPool3d: "max_pool3d",
             nn.AdaptiveMaxPool1d: "adaptive_max_pool1d",
             nn.AdaptiveMaxPool2d: "adaptive_max_pool2d",
             nn.AdaptiveMaxPool3d: "adaptive_max_pool3d"}


def _argmax_of_pool(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Which input wins each pooling window: the max-pool's linear piece."""
    fn = getattr(torch.nn.functional, _MAXPOOLS[type(module)])
    if "adaptive" in fn.__name__:
        return fn(x, module.output_size, return_indices=True)[1]
    return fn(x, module.kernel_size, module.stride, module.padding, module.dilation,
              ceil_mode=module.ceil_mode, return_indices=True)[1]


class _PieceRecorder:
    """Forward hooks that note, for every kinked activation, which side of each kink every
    input element is on; two passes with equal notes ran on the same linear piece."""

    def __init__(self, model: nn.Module):
        self.masks: list[torch.Tensor] = []
        self.handles = []
        for module in model.modules():
            kinks = next((k for t, k in _KINKS.items() if isinstance(module, t)), None)
            if kinks is not None:
                self.handles.append(module.register_forward_pre_hook(self._hook(kinks(module))))
            elif type(module) in _MAXPOOLS:
                self.handles.append(module.register_forward_pre_hook(self._pool_hook))

    def _pool_hook(self, module: nn.Module, inputs: tuple) -> None:
        with torch.no_grad():
            self.masks.append(_argmax_of_pool(module, inputs[0].detach()).flatten())

    def _hook(self, kinks: tuple[float, ...]):
        def hook(module: nn.Module, inputs: tuple) -> None:
            x = inputs[0].detach()
            self.masks.extend((x > k).flatten() for k in kinks)
        return hook

    def take(self) -> np.ndarray | None:
        if not self.handles:
            return None
        piece = (torch.cat([m.long() for m in self.masks]).numpy() if self.masks
                 else np.zeros(0, dtype=np.int64))
        self.masks = []
        return piece

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class _Counted:
    """Wraps a model's forward so the report can say how many passes the check cost."""

    def __init__(self, fn: Callable[[], object]):
        self.fn, self.calls = fn, 0

    def __call__(self) -> object:
        self.calls += 1
        return self.fn()


def _float64_copy(x: torch.Tensor) -> torch.Tensor:
    x = x.detach().cpu()
    return x.double() if x.is_floating_point() else x


def gradient_check_report(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                          criterion: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                          eps: float = 1e-4, tol: float = DEFAULT_TOL,
                          seed: int = 0) -> GradientCheckReport:
    """Check every element of every trainable parameter; name the tensors that disagree.

    Works on a float64 CPU copy of `model` (the caller's model, its dtype and its gradients
    are untouched). Dropout draws the same mask in every pass, so training mode is fine.
    """
    require_module(model)
    require_parameters(model)
    require_batch(x, y)
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    twin = copy.deepcopy(model).to(device="cpu", dtype=torch.float64)
    for p in twin.parameters():
        p.grad = None
    x64, y64 = _float64_copy(x), _float64_copy(y)
    named = [(n, p) for n, p in twin.named_parameters() if p.requires_grad]

    def loss() -> torch.Tensor:
        with torch.random.fork_rng(devices=[]):  # same dropout mask every pass
            torch.manual_seed(seed)
            return criterion(twin(x64), y64)

    pieces = _PieceRecorder(twin)
    try:
        counted = _Counted(lambda: (float(loss().detach()), pieces.take()))
        counted.calls += 1  # the forward pass behind the analytical gradients
        loss().backward()
        piece0 = pieces.take()
        grads = [np.zeros(p.shape) if p.grad is None else p.grad.numpy().copy()
                 for _, p in named]
        with torch.no_grad():
            views = [p.data.numpy() for _, p in named]  # share memory with the float64 copy
            checks = numerical_gradient_check(counted, views, grads, [n for n, _ in named],
                                              eps=eps, tol=tol, seed=seed, piece0=piece0)
    finally:
        pieces.remove()
    return GradientCheckReport(checks, counted.calls, tol, findings_for(checks, tol))


def gradient_check(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                   criterion: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   eps: float = 1e-4) -> float:
    """The lesson's gradient check: prints one line per parameter and returns the largest
    relative difference. It now covers every element and leaves `model` untouched."""
    print("\n=== GRADIENT CHECK ===")
    report = gradient_check_report(model, x, y, criterion, eps=eps)
    report.print()
    return report.max_rel_diff
