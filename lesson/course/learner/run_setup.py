"""What a training run was set up with, read while it runs: the clinic's repair judgement
compares a repair's set-up with the broken script's and the catalogue's fix.

A repair can hide a symptom without touching its cause: a lower learning rate keeps an unsafe
`log` from meeting a zero, clipping tames the gradients of a rate that is still 10, fewer
steps end before the NaN, another seed draws a luckier start. Reading the source for these
misses every way of writing them (a config block, a helper, a learning rate set after the
optimizer is built), so `record_setup()` watches the run instead, through torch's global
hooks: every optimizer that steps (its class, its hyperparameters at the first step, how many
steps, how many parameters it trains), whether the gradients shrank between `backward()` and
`step()` (clipping, by any means), the seed torch was given, and the regularising,
normalising and activation layers that ran.

`setup_changes(broken, fixed, repair)` then names, in words, what the repair changed that the
catalogue's fix keeps ("the learning rate of SGD lowered from 0.05 to 0.005"), and
`cause_settings(broken, fixed, repair)` what the fix changes that the repair left as it was.
"""
from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook
from torch.optim.optimizer import register_optimizer_step_pre_hook

from broken_models.case import SETUP_CHANGES

#: hyperparameters read from an optimizer's param groups, beyond lr and weight_decay
_SETTINGS = ("momentum", "dampening", "nesterov", "betas", "eps", "alpha", "amsgrad", "centered",
             "rho", "lr_decay", "initial_accumulator_value", "maximize", "foreach_none")
#: layer families a repair may add or remove, by what they do
_FAMILIES: dict[str, tuple[type[nn.Module], ...]] = {
    "dropout": (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout),
    "normalisation": (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm),
    "activation": (nn.ReLU, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU,
                   nn.Mish, nn.Sigmoid, nn.Tanh, nn.Softplus, nn.Hardtanh, nn.ReLU6,
                   nn.Hardswish, nn.Hardsigmoid, nn.LogSigmoid, nn.Softsign, nn.Tanhshrink),
}
#: a gradient this much smaller at the step than after backward() was scaled down on purpose
_SHRUNK = 1 - 1e-4
#: the course's own tools train models of their own (an LR sweep, k-fold label checks, the
#: overfit test): their optimizers measure, they are not the run's set-up
_TOOL_MODULES = ("lesson.checks", "lesson.data")


@dataclass
class OptimizerSetup:
    """One optimizer as the run used it."""

    kind: str                         # "SGD", "Adam", ...
    lrs: tuple[float, ...]            # each param group's learning rate at the first step
    weight_decays: tuple[float, ...]
    settings: tuple[tuple[str, Any], ...]   # the other hyperparameters of the first group
    parameters: int                   # elements it trains
    steps: int = 0
    #: each param group's highest learning rate over the steps: a warm-up changes the rate
    #: at the first step and keeps this one
    peak_lrs: tuple[float, ...] = ()


@dataclass
class RunSetup:
    """The set-up one run trained with (see the module's docstring)."""

    optimizers: list[OptimizerSetup] = field(default_factory=list)
    #: steps at which some gradient was smaller at step() than backward() left it
    shrunk_steps: int = 0
    #: the seed of torch's default generator when the first step came (None: no step)
    seed: int | None = None
    #: layer family -> the sorted class names of that family that ran forward
    layers: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def clipped(self) -> bool:
        return self.shrunk_steps > 0

    def to_plain(self) -> dict[str, Any]:
        """Plain data (lists, dicts, numbers, strings): what crosses from the grader's sandbox."""
        return {"optimizers": [vars(o).copy() for o in self.optimizers],
                "shrunk_steps": self.shrunk_steps, "seed": self.seed, "layers": dict(self.layers)}

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> "RunSetup":
        """The set-up `to_plain` wrote (a TypeError or ValueError for anything else)."""
        def tup(v: Any) -> Any:
            return tuple(tup(x) for x in v) if isinstance(v, (list, tuple)) else v
        optimizers = [OptimizerSetup(kind=str(o["kind"]), lrs=tup(o["lrs"]),
                                     weight_decays=tup(o["weight_decays"]),
                                     settings=tup(o["settings"]), parameters=int(o["parameters"]),
                                     steps=int(o["steps"]), peak_lrs=tup(o["peak_lrs"]))
                      for o in data["optimizers"]]
        seed = data["seed"]
        return cls(optimizers, int(data["shrunk_steps"]), None if seed is None else int(seed),
                   {str(k): tuple(str(x) for x in v) for k, v in data["layers"].items()})


class _Recorder:
    """The hooks behind `record_setup`; holds the setup being filled."""

    def __init__(self) -> None:
        self.setup = RunSetup()
        self._index: dict[int, int] = {}       # id(optimizer) -> its place in setup.optimizers
        self._built: list[torch.optim.Optimizer] = []  # kept alive: their ids stay valid
        self._stepped: set[int] = set()
        self._tools: set[int] = set()          # optimizers built by the course's tools
        self._after_backward: dict[int, float] = {}    # id(param) -> grad norm after backward
        self._grad_handles: list[Any] = []
        self._layers: dict[str, set[str]] = {k: set() for k in _FAMILIES}

    # -- optimizers ------------------------------------------------------------------------
    def on_build(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer was built: the run's own, or one of a tool's (left out)."""
        if _inside_a_tool():
            self._tools.add(id(optimizer))
            self._built.append(optimizer)
            return
        self._index[id(optimizer)] = len(self.setup.optimizers)
        self._built.append(optimizer)
        self.setup.optimizers.append(_describe(optimizer))

    def on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        key = id(optimizer)
        if key in self._tools:
            return
        if key not in self._index:             # built before the recording began
            self.on_build(optimizer)
            if key in self._tools:
                return
        if key not in self._stepped:
            self._stepped.add(key)
            self.setup.optimizers[self._index[key]] = _describe(optimizer)  # as it steps
            if self.setup.seed is None:
                self.setup.seed = torch.initial_seed()
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        self._grad_handles.append(p.register_post_accumulate_grad_hook(
                            self._after_accumulate))
        described = self.setup.optimizers[self._index[key]]
        described.steps += 1
        now = _rates(optimizer)
        described.peak_lrs = tuple(map(max, described.peak_lrs, now)) \
            if len(described.peak_lrs) == len(now) else now
        if self._shrunk(optimizer):
            self.setup.shrunk_steps += 1

    def _after_accumulate(self, p: torch.Tensor) -> None:
        if p.grad is not None:
            self._after_backward[id(p)] = float(torch.linalg.vector_norm(p.grad.detach()))

    def _shrunk(self, optimizer: torch.optim.Optimizer) -> bool:
        """Did any gradient shrink between the backward() that left it and this step?"""
        shrunk = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                before = self._after_backward.pop(id(p), None)
                if before is None or not math.isfinite(before):
                    continue
                now = 0.0 if p.grad is None else float(torch.linalg.vector_norm(p.grad.detach()))
                shrunk = shrunk or now < _SHRUNK * before
        return shrunk

    # -- layers --------------------------------------------------------------------------------
    def on_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        for family, kinds in _FAMILIES.items():
            if isinstance(module, kinds):
                self._layers[family].add(type(module).__name__)

    def close(self) -> None:
        for handle in self._grad_handles:
            handle.remove()
        self._grad_handles.clear()
        self._built.clear()
        self.setup.layers = {k: tuple(sorted(v)) for k, v in self._layers.items()}


def _inside_a_tool() -> bool:
    """Is one of the course's tools (lesson.checks, lesson.data) on the call stack?"""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(_TOOL_MODULES):
            return True
        frame = frame.f_back
    return False


def _describe(optimizer: torch.optim.Optimizer) -> OptimizerSetup:
    groups = optimizer.param_groups
    first = groups[0] if groups else {}
    settings = tuple((k, _plain(first[k])) for k in _SETTINGS if k in first)
    return OptimizerSetup(
        kind=type(optimizer).__name__,
        lrs=_rates(optimizer),
        weight_decays=tuple(float(g.get("weight_decay", 0.0) or 0.0) for g in groups),
        settings=settings,
        parameters=sum(p.numel() for g in groups for p in g["params"] if p.requires_grad))


def _rates(optimizer: torch.optim.Optimizer) -> tuple[float, ...]:
    """Each param group's learning rate now."""
    return tuple(float(_plain(g.get("lr", math.nan))) for g in optimizer.param_groups)


def _plain(value: Any) -> Any:
    """A hyperparameter as a plain Python value (a tensor lr becomes a float)."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else tuple(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


@contextmanager
def record_setup() -> Iterator[RunSetup]:
    """Record the set-up of whatever trains inside the block; the `RunSetup` is complete when
    the block ends (hooks are removed then, also on an exception)."""
    recorder = _Recorder()
    handles = [register_optimizer_step_pre_hook(recorder.on_step),
               register_module_forward_hook(recorder.on_forward)]
    init = torch.optim.Optimizer.__init__

    def building(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        recorder.on_build(self)

    torch.optim.Optimizer.__init__ = building      # no hook exists for an optimizer's birth
    try:
        yield recorder.setup
    finally:
        torch.optim.Optimizer.__init__ = init
        for handle in handles:
            handle.remove()
        recorder.close()


# -- comparing set-ups ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """One difference between two set-ups: what it is (`kind`, for a case page's REAL_FIXES)
    and what it says."""

    kind: str     # a key of SETUP_CHANGES
    says: str
    #: the value the broken script has for this setting (what "still there" quotes)
    broken: str = ""


#: every kind of change, with what it does when the cause is elsewhere (the case pages'
#: vocabulary for REAL_FIXES)
KINDS = SETUP_CHANGES


def _num(v: float) -> str:
    return f"{v:.4g}"


#: the settings of one optimizer that the comparison reads, each as a function of its setup
_READ: dict[str, Any] = {
    "kind": lambda o: o.kind, "lr": lambda o: o.lrs, "weight_decay": lambda o: o.weight_decays,
    "settings": lambda o: o.settings, "steps": lambda o: o.steps,
    "parameters": lambda o: o.parameters,
    # to 6 digits: a warm-up's last factor reaches its peak within rounding
    "peak_lr": lambda o: tuple(float(f"{v:.6g}") for v in o.peak_lrs),
}


def _kept(b: OptimizerSetup | None, f: OptimizerSetup) -> set[str]:
    """The settings of an optimizer that the catalogue's fix keeps: equal in the broken and
    the fixed run (all of them when the broken run never built this optimizer). The number
    of steps always counts: a broken run that stops at its first NaN steps fewer times, but
    the training the fix runs is the training a repair must run."""
    if b is None:
        return set(_READ)
    return {k for k, read in _READ.items() if read(b) == read(f)} | {"steps"}


def _optimizer_changes(f: OptimizerSetup, r: OptimizerSetup, keep: set[str]) -> list[Change]:
    """How the repair's optimizer `r` differs from the fixed run's `f` in the settings `keep`."""
    name = f.kind if f.kind == r.kind else f"{f.kind}/{r.kind}"
    out = []
    if "kind" in keep and f.kind != r.kind:
        decoupled = {f.kind, r.kind} == {"Adam", "AdamW"}
        out.append(Change("weight_decay" if decoupled else "optimizer_swapped",
                          f"the optimizer swapped from {f.kind} to {r.kind}"
                          + (" (decoupled weight decay)" if decoupled else ""), f.kind))
    if "lr" in keep and len(f.lrs) == len(r.lrs):
        for old, new in zip(f.lrs, r.lrs):
            if not math.isclose(old, new, rel_tol=1e-6):
                way = "lowered" if new < old else "raised"
                out.append(Change(f"lr_{way}", f"the learning rate of {name} {way} from "
                                  f"{_num(old)} to {_num(new)}", f"learning rate {_num(old)}"))
                break
    if "peak_lr" in keep and not any(c.kind.startswith("lr_") for c in out) \
            and len(f.peak_lrs) == len(r.peak_lrs):
        for old, new in zip(f.peak_lrs, r.peak_lrs):
            if not math.isclose(old, new, rel_tol=1e-6):
                way = "lowered" if new < old else "raised"
                out.append(Change(f"lr_{way}", f"the peak learning rate of {name} {way} from "
                                  f"{_num(old)} to {_num(new)}",
                                  f"peak learning rate {_num(old)}"))
                break
    if "weight_decay" in keep and not any(c.kind == "weight_decay" for c in out):
        for old, new in zip(f.weight_decays, r.weight_decays):
            if old != new:
                says = (f"weight decay added to {name} ({_num(new)})" if old == 0 else
                        f"the weight decay of {name} removed" if new == 0 else
                        f"the weight decay of {name} changed from {_num(old)} to {_num(new)}")
                out.append(Change("weight_decay", says, f"weight decay {_num(old)}"))
                break
    if "settings" in keep and f.kind == r.kind and f.settings != r.settings:
        old, new = dict(f.settings), dict(r.settings)
        diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        out.append(Change("optimizer_setting", f"{name}'s " + ", ".join(
            f"{k} {old.get(k)} -> {new.get(k)}" for k in diff),
            ", ".join(f"{k} {old.get(k)}" for k in diff)))
    if "steps" in keep and f.steps != r.steps:
        way = "fewer" if r.steps < f.steps else "more"
        out.append(Change(f"{way}_steps", f"{way} steps: {name} steps {r.steps} times, where "
                          f"the training runs {f.steps} steps", f"{f.steps} steps"))
    if "parameters" in keep and f.parameters != r.parameters:
        way = "smaller" if r.parameters < f.parameters else "larger"
        out.append(Change(f"{way}_model", f"a {way} model: {name} trains {r.parameters:,} "
                          f"parameters, not {f.parameters:,}", f"{f.parameters:,} parameters"))
    return out


def setup_changes(broken: RunSetup, fixed: RunSetup, repair: RunSetup,
                  seeds: tuple[int, int, int] = (0, 0, 0)) -> list[Change]:
    """What the repair changed in the set-up that the catalogue's fix keeps ([] when nothing).
    `seeds` are the seeds the three runs were given: the seed torch was seeded with is read
    relative to each."""
    out: list[Change] = []
    for i, (f, r) in enumerate(zip(fixed.optimizers, repair.optimizers)):
        b = broken.optimizers[i] if i < len(broken.optimizers) else None
        out += _optimizer_changes(f, r, _kept(b, f))
    if len(repair.optimizers) != len(fixed.optimizers):
        out.append(Change("optimizer_swapped", f"{len(repair.optimizers)} optimizers are built, "
                          f"where the training builds {len(fixed.optimizers)}",
                          f"{len(fixed.optimizers)} optimizers"))
    if broken.clipped == fixed.clipped and repair.clipped != fixed.clipped:
        out.append(Change("clipping", "gradient clipping added: the gradients are scaled down "
                          "between backward() and step()" if repair.clipped else
                          "the gradients are no longer scaled down between backward() and "
                          "step()", "clipping" if fixed.clipped else "no clipping"))
    offsets = [None if s.seed is None else s.seed - k
               for s, k in zip((broken, fixed, repair), seeds)]
    if offsets[1] is not None and offsets[0] in (None, offsets[1]) \
            and offsets[2] is not None and offsets[2] != offsets[1]:
        out.append(Change("seed", f"another seed: torch is seeded with {repair.seed}, not with "
                          f"{fixed.seed - seeds[1] + seeds[2]}, from the seed the run is given "
                          f"({seeds[2]})", "the seed the run is given"))
    for family in _FAMILIES:
        b, f, r = (set(s.layers.get(family, ())) for s in (broken, fixed, repair))
        if b == f and r != f:
            added, removed = sorted(r - f), sorted(f - r)
            words = "; ".join(filter(None, [f"{', '.join(added)} added" if added else "",
                                            f"{', '.join(removed)} removed" if removed else ""]))
            out.append(Change(family, f"{family} layers changed: {words}",
                              ", ".join(sorted(f)) or f"no {family} layers"))
    return out


def cause_settings(broken: RunSetup, fixed: RunSetup, repair: RunSetup) -> list[str]:
    """The settings the catalogue's fix changes, when the repair left every one of them as the
    broken script has it: each in words ("the learning rate of SGD, 10"). [] when the fix
    changes none of the settings this module reads, or the repair changed one of them."""
    changed, kept = 0, []
    for i, (f, r) in enumerate(zip(fixed.optimizers, repair.optimizers)):
        b = broken.optimizers[i] if i < len(broken.optimizers) else None
        if b is None:
            continue
        keys = set(_READ) - _kept(b, f)
        if "lr" in keys:                   # one setting, however its schedule goes
            keys.discard("peak_lr")
        for key in keys:
            changed += 1
            if _READ[key](b) == _READ[key](r):
                kept.append(_setting_words(key, b))
    if broken.clipped != fixed.clipped:
        changed += 1
        if repair.clipped == broken.clipped:
            kept.append("the gradients scaled down between backward() and step()"
                        if broken.clipped else "no scaling of the gradients between "
                        "backward() and step()")
    for family in _FAMILIES:
        if broken.layers.get(family) != fixed.layers.get(family):
            changed += 1
            if repair.layers.get(family) == broken.layers.get(family):
                kept.append(f"the {family} layers {', '.join(broken.layers[family]) or '(none)'}")
    return kept if changed and len(kept) == changed else []


def _setting_words(key: str, b: OptimizerSetup) -> str:
    return {"kind": f"the optimizer {b.kind}",
            "lr": f"the learning rate of {b.kind}, {', '.join(_num(v) for v in b.lrs)}",
            "weight_decay": f"the weight decay of {b.kind}, "
                            f"{', '.join(_num(v) for v in b.weight_decays)}",
            "settings": f"{b.kind}'s settings {dict(b.settings)}",
            "steps": f"{b.steps} steps of {b.kind}",
            "parameters": f"{b.parameters:,} trained parameters",
            "peak_lr": f"the peak learning rate of {b.kind}, "
                       f"{', '.join(_num(v) for v in b.peak_lrs)}"}[key]
