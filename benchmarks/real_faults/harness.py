"""Run one reproduced fault as a practitioner would, and judge what the debugger said.

A fault file holds data only: where the fault was reported, its taxonomy group, the code(s) a
correct diagnosis names, the layer or parameter to blame, the plain-torch check that shows its
symptom, and `build(bug, seed) -> Script`: the model, data, loss and optimizer, with the bug as a
few lines switched on by `bug`. This module owns the one training loop they all share.

The practitioner's protocol is the same for every fault (nothing is chosen per fault):
`validate_data` on the splits before training, `NetworkDebugger` attached during training with
the validation loss recorded, `check_batch_independence` on the trained model, and
`locate_nonfinite` on the last finite state when the loss stopped being a number.
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from lesson import (Finding, NetworkDebugger, check_batch_independence, locate_nonfinite,
                    overfit_one_batch, validate_data)

#: Humbatova et al. (ICSE 2020), "Taxonomy of Real Faults in Deep Learning Systems": top groups
GROUPS = ("model", "tensors and inputs", "training", "API", "sequence")
"""...and `sequence`: faults of sequence and language models (attention masks, padding, targets
and their shift, accumulation over token counts), whatever their place in that taxonomy."""

Step = Callable[["Script", Callable[..., torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]
Evaluate = Callable[["Script", torch.Tensor, torch.Tensor], torch.Tensor]


def standard_step(s: "Script", loss_fn: Callable[..., torch.Tensor], x: torch.Tensor,
                  y: torch.Tensor) -> torch.Tensor:
    """zero_grad, forward, loss, backward, step: the loop every tutorial teaches."""
    s.optimizer.zero_grad()
    loss = loss_fn(s.model(x), y)
    loss.backward()
    s.optimizer.step()
    return loss


def standard_evaluate(s: "Script", x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Validation loss in eval mode without gradients; training mode restored afterwards."""
    s.model.eval()
    with torch.no_grad():
        loss = s.loss(s.model(x), y)
    s.model.train()
    return loss


@dataclass
class Script:
    """One training script: what a fault file builds, the bug already in it (or not)."""

    model: nn.Module
    data: Any                                 # a Split: x_train, y_train, x_val, y_val
    loss: Callable[..., torch.Tensor]
    optimizer: torch.optim.Optimizer
    steps: int = 150
    batch: int | None = 64                    # None: the whole training split every step
    shuffle: bool = True
    eval_every: int | None = None            # None: once per epoch, as most scripts do
    task: str = "classification"              # or "regression"
    step: Step = standard_step
    evaluate: Evaluate = standard_evaluate
    scheduler: Any = None                     # stepped once per epoch (unless per_batch)
    scheduler_per_batch: bool = False
    watch: nn.Module | None = None            # what the debugger watches (default: model)
    predict: Callable[[torch.Tensor], torch.Tensor] | None = None   # default: model(x)
    batch_dim: int = 0                        # of the model's input, for the batch check


@dataclass
class Result:
    """What the run showed (plain torch) and what the debugger said."""

    losses: list[float]
    val_losses: list[float]
    train_score: float           # accuracy, or R^2 for regression (eval mode, no grad)
    val_score: float
    chance: float                # majority-class share (0 for regression)
    eval_repeatable: bool        # two eval-mode passes over the validation split agree
    train_mode_share: float      # share of training steps that began in training mode
    script_eval_repeatable: bool  # the script's own evaluation, run twice, agrees
    batch_consistent: bool       # the first samples' outputs do not change with batch-mates
    moved: dict[str, bool]       # parameter name -> changed during training
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    script: Script | None = None  # the trained script, for symptoms only its model shows

    @property
    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in self.losses)

    @property
    def fell(self) -> float:
        return _fell(self.losses)


def _fell(losses: list[float]) -> float:
    """Share by which the training loss fell (first 10% against last 10% of steps)."""
    k = max(1, len(losses) // 10)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    return (first - last) / abs(first) if first and math.isfinite(first - last) else 0.0


#: the protocol runs overfit_one_batch when the training loss fell by less than this share
STALLED = 0.1


@dataclass(frozen=True)
class Fault:
    """A publicly reported fault, reproduced: its card and its build function."""

    title: str
    source: str                  # project + issue/PR/question id, or the benchmark it is from
    group: str                   # one of GROUPS
    expected: tuple[str, ...]    # any of these codes is a correct diagnosis
    symptom: str                 # what a user saw, in words
    seen: Callable[[Result], bool]   # the plain-torch check of the symptom
    build: Callable[[bool, int], Script]
    blame: str | None = None     # layer or parameter name a localising finding names
    name: str = ""

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"{self.title}: group must be one of {GROUPS}, got {self.group!r}")


def _batches(s: Script, g: torch.Generator) -> Any:
    n = len(s.data.x_train)
    size = n if s.batch is None else s.batch
    while True:
        order = torch.randperm(n, generator=g) if s.shuffle else torch.arange(n)
        for i in range(0, n - size + 1, size):
            yield order[i:i + size], i + size > n - size   # indices, last batch of the epoch


def _score(s: Script, predict: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
           y: torch.Tensor) -> float:
    with torch.no_grad():
        out = predict(x)
    if not torch.isfinite(out).all():
        return float("nan")
    if s.task == "regression":
        out, y = out.reshape(len(y), -1), y.reshape(len(y), -1)
        out = out if out.shape == y.shape else out[:, :1]
        return float(1 - ((out - y) ** 2).mean() / y.var(0).mean())
    if out.dim() == 1 or out.shape[-1] == 1:
        return float(((out.reshape(-1) > 0.5).long() == y).float().mean())
    counted = y >= 0                    # token targets: -100 marks the ones no loss counts
    return float((out.argmax(-1) == y)[counted].float().mean())


def run(fault: Fault, bug: bool, seed: int = 0) -> Result:
    """Train the fault's script (broken or fixed) under the debugger and collect the evidence."""
    torch.manual_seed(seed)
    s = fault.build(bug, seed)
    d = s.data
    predict = s.predict or s.model
    g = torch.Generator().manual_seed(seed)
    before = {n: p.detach().clone() for n, p in s.model.named_parameters()}
    findings: list[Finding] = []
    errors: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # a practitioner's log is full of them; not evidence
        findings += validate_data(d.x_train, d.y_train, d.x_val, d.y_val)
        last_finite: tuple[dict[str, Any], torch.Tensor, torch.Tensor] | None = None
        first_bad: tuple[dict[str, Any], torch.Tensor, torch.Tensor] | None = None
        in_train = 0
        with NetworkDebugger(s.watch or s.model, s.optimizer, s.loss) as dbg:
            loss_fn = dbg.criterion
            batches = _batches(s, g)
            for step in range(s.steps):
                idx, epoch_end = next(batches)
                x, y = d.x_train[idx], d.y_train[idx]
                state = copy.deepcopy(s.model.state_dict()) if first_bad is None else None
                in_train += s.model.training
                loss = s.step(s, loss_fn, x, y)
                dbg.record_loss(loss.detach())
                if first_bad is None:
                    if torch.isfinite(loss.detach()):
                        last_finite = (state, x, y)
                    else:
                        first_bad = last_finite or (state, x, y)
                if s.scheduler is not None and (s.scheduler_per_batch or epoch_end):
                    s.scheduler.step()
                if (epoch_end if s.eval_every is None else (step + 1) % s.eval_every == 0):
                    dbg.record_val_loss(s.evaluate(s, d.x_val, d.y_val).detach())
            findings += dbg.diagnose()
            errors += dbg.errors
        s.model.eval()
        train_score = _score(s, predict, d.x_train, d.y_train)
        val_score = _score(s, predict, d.x_val, d.y_val)
        with torch.no_grad():
            repeatable = bool(torch.equal(predict(d.x_val[:64]), predict(d.x_val[:64])))
            # a sample's output must not depend on its batch-mates or their order
            alone, flipped = predict(d.x_val[:8]), predict(d.x_val[:8].flip(0)).flip(0)
            together = predict(d.x_val[:32])[:8]
            consistent = alone.shape == together.shape == flipped.shape and all(
                bool(torch.allclose(alone, o, rtol=1e-4, atol=1e-5)) for o in (together, flipped))
        s.model.train()                      # the script's evaluation, as it runs in training
        s_eval = [float(s.evaluate(s, d.x_val, d.y_val)) for _ in range(2)]
        s.model.eval()
        try:
            probe = d.x_val[:16] if s.batch_dim == 0 else d.x_val[:, :16]
            findings += check_batch_independence(
                s.model, probe.float() if probe.is_floating_point() else probe,
                batch_dim=s.batch_dim)
        except (TypeError, ValueError) as exc:   # token ids: the check cannot run on them
            errors.append(f"check_batch_independence: {exc}")
        if first_bad is None and _fell(dbg.loss_history) < STALLED:
            try:    # the loss did not fall: the lesson's next step is to overfit one batch
                findings += overfit_one_batch(s.model, d.x_train[:32], d.y_train[:32], s.loss,
                                              verbose=False).findings
            except (TypeError, ValueError, RuntimeError) as exc:
                errors.append(f"overfit_one_batch: {exc}")
        if first_bad is not None:
            probe = copy.deepcopy(s.model)
            probe.load_state_dict(first_bad[0])
            probe.train()
            findings += locate_nonfinite(probe, first_bad[1], first_bad[2], s.loss)
    moved = {n: not torch.equal(before[n], p.detach()) for n, p in s.model.named_parameters()}
    labels = d.y_val.long().flatten()
    labels = labels[labels >= 0]                 # per-token targets: -100 is no label
    chance = 0.0 if s.task == "regression" else float(
        torch.bincount(labels).max() / len(labels))
    return Result(losses=dbg.loss_history, val_losses=list(dbg.val_loss_history),
                  train_score=train_score, val_score=val_score, chance=chance,
                  eval_repeatable=repeatable, batch_consistent=consistent,
                  train_mode_share=in_train / s.steps,
                  script_eval_repeatable=s_eval[0] == s_eval[1] or not all(
                      math.isfinite(v) for v in s_eval),
                  moved=moved, findings=findings, errors=errors, script=s)


def blames(finding: Finding, blame: str) -> bool:
    """Whether a finding names the blamed layer or parameter (or its parent/child on a dot)."""
    names = [finding.layer] if finding.layer else []
    for key in ("params", "tensors", "modules", "layers", "first_param", "collapsed_layers"):
        v = finding.evidence.get(key)
        names += list(v) if isinstance(v, (list, dict)) else [v] if isinstance(v, str) else []
    for name in names:
        if not isinstance(name, str):
            continue
        if name == blame or name.startswith(blame + ".") or blame.startswith(name + "."):
            return True
    return False


# -- what the fault files share: data made in code or scikit-learn's digits, small models ------
from broken_models.datasets import Split, mlp, sequences, xor  # noqa: E402,F401
from broken_models import datasets as _datasets  # noqa: E402
from lesson.data.validate import NEAR_TOL  # noqa: E402


def digits(seed: int, standardize: bool = True, **kwargs: Any) -> Split:
    """The catalogue's digits, each pixel scaled by at least one grey level: on some seeds a
    corner pixel lit in a handful of training images otherwise reaches tens of standard
    deviations in the validation split, which validate_data rightly calls unnormalised, in
    every fixed twin."""
    return _datasets.digits(seed, standardize=standardize, min_scale=1.0, **kwargs)


def adam(model: nn.Module, lr: float = 3e-3) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=lr)


def sgd(model: nn.Module, lr: float = 0.1, momentum: float = 0.0) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


def standardised(d: Split) -> Split:
    """Inputs scaled with the training split's mean and std (what a pipeline should do)."""
    mean, std = d.x_train.mean(0), d.x_train.std(0).clamp_min(1e-6)
    return Split((d.x_train - mean) / std, d.y_train, (d.x_val - mean) / std, d.y_val)


def blobs(seed: int, **kwargs: Any) -> Split:
    """The catalogue's Gaussian clusters, standardised: with two classes and spread 1, some
    seeds put both centres of a feature 2-4 standard deviations to one side of 0 (seeds 16
    and 19 of 0-19), which validate_data rightly calls a small variation on a large offset
    (UNNORMALIZED_INPUTS), in every fixed twin drawn from it."""
    return standardised(_datasets.blobs(seed, **kwargs))


def regression(seed: int, **kwargs: Any) -> Split:
    """The catalogue's regression data, less the validation rows that lie within validate_data's
    near-copy tolerance of a training row: four Gaussian features drawn independently put one
    such pair in a 1024 x 256 draw now and then (seed 5: RMS difference 0.7% of the std),
    which validate_data rightly reports (DUPLICATES_ACROSS_SPLITS) in every fixed twin."""
    d = _datasets.regression(seed, **kwargs)
    rms = torch.cdist(d.x_val, d.x_train).min(1).values / d.x_train.shape[1] ** 0.5
    keep = rms > NEAR_TOL * float(d.x_train.std())
    return Split(d.x_train, d.y_train, d.x_val[keep], d.y_val[keep])


def below_chance(r: Result, margin: float = 0.1) -> bool:
    """Validation accuracy no better than the majority class plus `margin`."""
    return not r.val_score > r.chance + margin
