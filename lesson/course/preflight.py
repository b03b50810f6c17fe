"""The lesson's checklist before full training, as one call: `preflight(model, data, criterion)`.

Seven checks, in the lesson's order, each answering yes or no:

1. overfit one batch        the model and a correct loop can memorise a few samples
2. model summary            parameters per layer; something to train; no identical units
3. one forward pass         output shape; first loss against -log(1/num_classes)
4. a short training         the loss falls (the debugger watches: loss, optimizer, numerics)
5. activation statistics    nothing dead, collapsed or exploding
6. gradient flow            every tensor gets a gradient; none vanishing or exploding
7. a look at the data       five random samples with labels (a picture for images); data checks

It stops at the first check that fails (`stop_at_first_failure=False` runs them all) and returns
a `PreflightReport`. Every check works on a copy of the model: the caller's model, optimizer
and random state are untouched. Preflight runs its own, correct training loop, so bugs in the
user's loop (a missing zero_grad, a scheduler stepped too often) are out of its reach: it finds
what is wrong with the model, the loss and the data.

`nndebug preflight path/to/file.py:factory` runs it on a function that returns
`(model, data, criterion)` or a dict with those keys (plus any keyword of `preflight`).
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import math
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import nn

from lesson.findings import CODES, Finding, sort_findings
from lesson.restore import require_batch, require_module, require_parameters

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]

#: (name, title) of the seven checks, in the order they run
CHECKS: tuple[tuple[str, str], ...] = (
    ("overfit", "overfit one batch"),
    ("summary", "model summary"),
    ("forward", "one forward pass"),
    ("training", "a short training"),
    ("activations", "activation statistics"),
    ("gradients", "gradient flow"),
    ("data", "a look at the data"),
)

MAX_SAMPLES = 4096
"""At most this many samples are taken from a Dataset or DataLoader."""

FIRST_LOSS_FACTOR = 1.5
FIRST_LOSS_MARGIN = 0.5
"""A first classification loss above FIRST_LOSS_FACTOR * log(C) + FIRST_LOSS_MARGIN is too high:
a fresh model should be unsure about every class (default init gives small logits)."""

MIN_RELATIVE_FALL = 0.1
"""The short training passes when the mean of its last losses is at least this share below the
mean of its first ones."""

SAMPLES_SHOWN = 5

#: which codes of the debugger's diagnosis each check answers for (the rest go to "training")
_CHECK_OF_AREA = {"model": "activations", "gradients": "gradients", "data": "data"}
_CHECK_OF_CODE = {"NO_GRADIENT": "gradients", "PARAMS_NOT_UPDATED": "gradients"}


@dataclass
class CheckResult:
    """One check: passed or not, the findings that failed it, and the numbers it saw."""

    number: int
    name: str
    title: str
    passed: bool
    findings: list[Finding] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "name": self.name, "title": self.title,
                "passed": self.passed, "findings": [f.to_dict() for f in self.findings],
                "details": _plain(self.details), "lines": self.lines}


@dataclass
class PreflightReport:
    """The checks that ran, in order; `failed` is the first that failed (None when all pass)."""

    checks: list[CheckResult]
    loss_history: list[float] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return len(self.checks) == len(CHECKS) and all(c.passed for c in self.checks)

    @property
    def failed(self) -> CheckResult | None:
        return next((c for c in self.checks if not c.passed), None)

    @property
    def findings(self) -> list[Finding]:
        return sort_findings([f for c in self.checks for f in c.findings])

    def __bool__(self) -> bool:
        return self.passed

    def __getitem__(self, name: str) -> CheckResult:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"check {name!r} did not run; ran: {[c.name for c in self.checks]}")

    def __str__(self) -> str:
        ran = len(self.checks)
        passed = sum(c.passed for c in self.checks)
        failed = self.failed
        head = (f"Preflight: all {len(CHECKS)} checks passed." if self.passed else
                f"Preflight: {passed} of {len(CHECKS)} checks passed; "
                + (f"stopped at check {failed.number} ({failed.title})." if failed and
                   ran < len(CHECKS) else "some failed."))
        lines = [head]
        for c in self.checks:
            lines.append(f"  {c.number}. {c.title:<24} {'PASS' if c.passed else 'FAIL'}")
            lines += [f"       {line}" for line in c.lines]
            for f in c.findings:
                lines.append(f"       {f}")
                lines.append(f"         fix: {f.advice}")
        for number, (_, title) in enumerate(CHECKS[ran:], ran + 1):
            lines.append(f"  {number}. {title:<24} not run")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "failed": self.failed.name if self.failed else None,
                "checks": [c.to_dict() for c in self.checks]}

    def to_report(self, title: str = "preflight") -> dict[str, Any]:
        """The findings and the short training's curves in `nndebug report`'s format."""
        from lesson.course.report import make_report

        return make_report(self.findings, title=title, loss_history=self.loss_history,
                           history=self.history,
                           metrics={f"check {c.number} ({c.name})": "pass" if c.passed else "fail"
                                    for c in self.checks})


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


# -- inputs ------------------------------------------------------------------------------------
def as_tensors(data: Any, max_samples: int = MAX_SAMPLES) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(x, y, came_in_batches) from an (x, y) pair of tensors, a Dataset of pairs, or an
    iterable of (x, y) batches such as a DataLoader."""
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(
            isinstance(t, torch.Tensor) for t in data):
        x, y = data
        require_batch(x, y)
        return x, y, False
    if isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__") \
            and hasattr(data, "__getitem__"):
        items = [data[i] for i in range(min(len(data), max_samples))]
        if not items:
            raise ValueError("the dataset is empty")
        x = torch.stack([torch.as_tensor(item[0]) for item in items])
        y = torch.stack([torch.as_tensor(item[1]) for item in items])
        require_batch(x, y)
        return x, y, False
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, torch.Tensor)):
        xs, ys, n = [], [], 0
        for batch in data:
            if not (isinstance(batch, (tuple, list)) and len(batch) >= 2):
                raise TypeError("each batch must be an (inputs, targets) pair")
            xs.append(batch[0])
            ys.append(batch[1])
            n += len(batch[0])
            if n >= max_samples:
                break
        if not xs:
            raise ValueError("the data loader gave no batch")
        x, y = torch.cat(xs)[:max_samples], torch.cat(ys)[:max_samples]
        require_batch(x, y)
        return x, y, True
    raise TypeError("data must be an (x, y) pair of tensors, a Dataset of (x, y) pairs or a "
                    f"DataLoader, got {type(data).__name__}")


def _default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)


def _is_classification(criterion: Any, y: torch.Tensor) -> bool:
    from lesson.debugger.loss_inputs import CLASS_LOG_PROBS, CLASS_LOGITS, criterion_kind

    return criterion_kind(criterion) in (CLASS_LOGITS, CLASS_LOG_PROBS) and \
        not y.is_floating_point()


@contextlib.contextmanager
def _quiet(verbose: bool):
    """Keep the tools' printing and torch's warnings out of the caller's output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if verbose:
            yield
        else:
            with contextlib.redirect_stdout(io.StringIO()):
                yield


# -- the checks --------------------------------------------------------------------------------
@dataclass
class _Context:
    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    batched: bool
    criterion: Callable
    optimizer_factory: OptimizerFactory
    classification: bool
    batch_size: int
    overfit_batch: int
    overfit_steps: int
    overfit_lr: float
    train_steps: int
    generator: torch.Generator
    samples_path: Path | None
    image_shape: tuple[int, ...] | None
    verbose: bool
    label_signal: bool = False
    training: dict[str, Any] | None = None
    labels: list[Finding] | None = None


def check_overfit(ctx: _Context) -> CheckResult:
    from lesson.checks.overfit import overfit_one_batch

    idx = torch.randperm(len(ctx.x), generator=ctx.generator)[:ctx.overfit_batch]
    xb, yb = ctx.x[idx], ctx.y[idx]
    with _quiet(ctx.verbose):
        result = overfit_one_batch(copy.deepcopy(ctx.model), xb, yb, ctx.criterion,
                                   lr=ctx.overfit_lr, steps=ctx.overfit_steps)
    acc = result.final_accuracy
    line = f"{len(idx)} samples, {ctx.overfit_steps} steps: final loss {result.final_loss:.4g}" + (
        f", accuracy {acc:.0%}" if acc is not None else "")
    details = {"final_loss": result.final_loss, "final_accuracy": acc}
    if result:
        return CheckResult(1, *CHECKS[0], passed=True, details=details, lines=[line])
    findings = list(result.findings) or [Finding(
        "UNDERFITTING", f"could not overfit {len(idx)} samples in {ctx.overfit_steps} steps",
        evidence={"final_loss": result.final_loss})]
    causes = _why_no_overfit(ctx, xb, yb)
    if causes:
        line += "; the evidence below says why"
    return CheckResult(1, *CHECKS[0], passed=False, details=details, lines=[line],
                       findings=causes + [f for f in findings
                                          if f.code not in {c.code for c in causes}])


#: how many steps the debugger watches on the batch that could not be memorised
EXPLAIN_STEPS = 50


def _why_no_overfit(ctx: _Context, x: torch.Tensor, y: torch.Tensor) -> list[Finding]:
    """When one batch cannot be memorised, look for the cause on that batch: what reaches the
    loss, identical units, samples that mix, and what the debugger sees over a few steps."""
    from lesson.checks.batch_independence import check_batch_independence
    from lesson.debugger.loss_inputs import LossInputInspector
    from lesson.debugger.monitor import NetworkDebugger
    from lesson.debugger.stats import first_tensor

    model = copy.deepcopy(ctx.model)
    causes = _identical_units(model)
    located: list[Finding] = []   # the operation that first made a NaN, when one did
    with _quiet(ctx.verbose):
        with torch.no_grad():
            out = first_tensor(model(x))
        inspector = LossInputInspector()
        inspector.observe(out, y, ctx.criterion)
        causes += inspector.findings(step=0)
        if x.is_floating_point() and x.dim() >= 2:
            causes += check_batch_independence(copy.deepcopy(model), x)
        optimizer = torch.optim.Adam(model.parameters(), lr=ctx.overfit_lr)
        with NetworkDebugger(model, optimizer, ctx.criterion, every=1) as debugger:
            criterion = debugger.criterion or ctx.criterion
            for _ in range(EXPLAIN_STEPS):
                optimizer.zero_grad()
                loss = criterion(first_tensor(model(x)), y)
                debugger.record_loss(loss.detach())
                if not bool(torch.isfinite(loss.detach())):
                    located = _locate(model, x, y, ctx.criterion, fallback=False)
                    break
                loss.backward()
                optimizer.step()
            causes += debugger.diagnose()
    seen: set[str] = set()
    return [f for f in located + sort_findings(_trusted(causes, ctx.criterion))
            if not (f.code in seen or seen.add(f.code))]


def model_summary(model: nn.Module) -> list[dict[str, Any]]:
    """One row per module that holds parameters directly: name, type, shapes, counts."""
    rows = []
    for name, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if own:
            rows.append({"layer": name or "(root)", "type": type(module).__name__,
                         "shapes": {n: list(p.shape) for n, p in own},
                         "parameters": sum(p.numel() for _, p in own),
                         "trainable": sum(p.numel() for _, p in own if p.requires_grad)})
    return rows


def _identical_units(model: nn.Module) -> list[Finding]:
    findings = []
    for name, p in model.named_parameters():
        if p.requires_grad and p.dim() >= 2 and p.shape[0] > 1:
            rows = p.detach().reshape(p.shape[0], -1)
            if bool((rows == rows[:1]).all()):
                findings.append(Finding(
                    "SYMMETRIC_WEIGHTS", f"all {p.shape[0]} units of {name} start with the same "
                    "weights, so they will learn the same thing", layer=name.rsplit(".", 1)[0],
                    evidence={"parameter": name, "units": int(p.shape[0]),
                              "value": float(rows[0, 0])}))
    return findings


def check_summary(ctx: _Context) -> CheckResult:
    rows = model_summary(ctx.model)
    total = sum(r["parameters"] for r in rows)
    trainable = sum(r["trainable"] for r in rows)
    width = max([len(r["layer"]) for r in rows] + [5])
    lines = [f"{r['layer']:<{width}}  {r['type']:<12} {r['parameters']:>10,d} parameters"
             + ("" if r["trainable"] == r["parameters"] else f" ({r['trainable']:,d} trainable)")
             for r in rows]
    lines.append(f"{'total':<{width}}  {'':<12} {total:>10,d} parameters ({trainable:,d} trainable)")
    findings = _identical_units(ctx.model)
    return CheckResult(2, *CHECKS[1], passed=not findings, findings=findings,
                       details={"layers": rows, "total": total, "trainable": trainable},
                       lines=lines)


def _locate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, criterion: Callable,
            fallback: bool = True) -> list[Finding]:
    """The operation that first produced NaN/Inf on this batch (locate_nonfinite)."""
    from lesson.data.nonfinite import locate_nonfinite

    found = locate_nonfinite(copy.deepcopy(model), x, y, criterion)
    if found or not fallback:
        return found
    return [Finding("NAN_OR_INF", "the first forward pass gives a non-finite value")]


def _trusted(findings: list[Finding], criterion: Callable) -> list[Finding]:
    """Drop what cannot be judged: a hand-written loss may reshape its inputs itself, so a shape
    difference between output and target says nothing about it."""
    from lesson.debugger.loss_inputs import UNKNOWN, criterion_kind

    if criterion_kind(criterion) != UNKNOWN:
        return findings
    return [f for f in findings if f.code != "LOSS_SHAPE_MISMATCH"]


def check_forward(ctx: _Context) -> CheckResult:
    from lesson.debugger.batches import BatchInspector
    from lesson.debugger.loss_inputs import LossInputInspector
    from lesson.debugger.stats import first_tensor

    x, y = ctx.x[:ctx.batch_size], ctx.y[:ctx.batch_size]
    model = copy.deepcopy(ctx.model)
    with _quiet(ctx.verbose), torch.no_grad():
        out = first_tensor(model(x))
        if out is None:
            raise TypeError("the model's output holds no floating-point tensor")
        loss = ctx.criterion(out, y)
    details: dict[str, Any] = {"input_shape": list(x.shape), "output_shape": list(out.shape),
                               "target_shape": list(y.shape)}
    lines = [f"input {tuple(x.shape)} -> output {tuple(out.shape)}; targets {tuple(y.shape)}"]
    if not (bool(torch.isfinite(out).all()) and bool(torch.isfinite(loss).all())):
        return CheckResult(3, *CHECKS[2], passed=False, details=details, lines=lines,
                           findings=_locate(ctx.model, x, y, ctx.criterion))
    first = float(loss.mean())
    details["first_loss"] = first
    inspector = LossInputInspector()
    inspector.observe(out, y, ctx.criterion)
    findings = inspector.findings(step=0)
    findings = _trusted(findings, ctx.criterion)
    if out.shape[0] != x.shape[0] and not findings:
        findings.append(Finding("LOSS_SHAPE_MISMATCH", f"the output has {out.shape[0]} rows for "
                                f"a batch of {x.shape[0]}", evidence=dict(details)))
    if ctx.classification and out.dim() >= 2:
        classes = out.shape[1]
        expected = math.log(classes)
        details |= {"num_classes": classes, "expected_first_loss": expected}
        lines.append(f"first loss {first:.4g}; -log(1/{classes}) = {expected:.4g}")
        if first > FIRST_LOSS_FACTOR * expected + FIRST_LOSS_MARGIN and not findings:
            batches = BatchInspector()
            batches.observe_inputs(x)
            evidence = {"first_loss": first, "expected": expected,
                        "logit_std": float(out.float().std())}
            inputs = [f for f in batches.findings(step=0) if f.code in
                      ("UNNORMALIZED_INPUTS", "NONFINITE_INPUT")]
            findings += inputs or [Finding(
                "EXPLODING_ACTIVATIONS", f"the first loss {first:.3g} is far above "
                f"-log(1/{classes}) = {expected:.3g}: the logits are too large at initialisation",
                evidence=evidence)]
            for f in inputs:
                f.evidence |= evidence
    else:
        lines.append(f"first loss {first:.4g}")
    return CheckResult(3, *CHECKS[2], passed=not findings, findings=findings, details=details,
                       lines=lines)


def _short_training(ctx: _Context) -> dict[str, Any]:
    """Train a copy for `train_steps` minibatch steps under the NetworkDebugger; keep what it
    saw (checks 4, 5 and 6 all read this one run)."""
    from lesson.debugger.monitor import NetworkDebugger
    from lesson.debugger.stats import first_tensor

    model = copy.deepcopy(ctx.model)
    model.train()
    optimizer = ctx.optimizer_factory(model.parameters())
    n = len(ctx.x)
    order = torch.randperm(n, generator=ctx.generator)
    pos = 0
    losses: list[float] = []
    source: list[Finding] = []
    with _quiet(ctx.verbose), NetworkDebugger(model, optimizer, ctx.criterion, every=1) as debugger:
        criterion = debugger.criterion if getattr(debugger, "criterion", None) else ctx.criterion
        for _ in range(ctx.train_steps):
            if pos >= n:
                order, pos = torch.randperm(n, generator=ctx.generator), 0
            idx = order[pos:pos + ctx.batch_size]
            pos += ctx.batch_size
            optimizer.zero_grad()
            loss = criterion(first_tensor(model(ctx.x[idx])), ctx.y[idx])
            debugger.record_loss(loss.detach())
            value = float(loss.detach())
            losses.append(value)
            if not math.isfinite(value):   # name the operation that made it, then stop
                source = _locate(model, ctx.x[idx], ctx.y[idx], ctx.criterion, fallback=False)
                break
            loss.backward()
            optimizer.step()
        findings = _trusted(debugger.diagnose(), ctx.criterion)
        history = list(debugger.history)
    known = {f.code for f in source}
    return {"losses": losses, "source": source, "history": history,
            "findings": source + [f for f in findings if f.code not in known]}


def _falls(losses: list[float]) -> tuple[bool, float, float]:
    k = max(1, min(5, len(losses) // 5))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    if not all(math.isfinite(v) for v in losses):
        return False, first, last
    return last < first - MIN_RELATIVE_FALL * abs(first), first, last


def _check_of(finding: Finding) -> str:
    if finding.code in _CHECK_OF_CODE:
        return _CHECK_OF_CODE[finding.code]
    return _CHECK_OF_AREA.get(CODES[finding.code].area, "training")


def _label_findings(ctx: _Context) -> list[Finding]:
    """LABELS_SHUFFLED when asked for (`label_signal`), for classification; computed once."""
    if not (ctx.label_signal and ctx.classification):
        return []
    if ctx.labels is None:
        from lesson.data.labels import check_labels_carry_signal

        with _quiet(ctx.verbose):
            ctx.labels = check_labels_carry_signal(lambda: copy.deepcopy(ctx.model), ctx.x, ctx.y)
    return list(ctx.labels)


def check_training(ctx: _Context) -> CheckResult:
    ctx.training = run = _short_training(ctx)
    losses = run["losses"]
    falls, first, last = _falls(losses)
    details = {"steps": len(losses), "first_losses_mean": first, "last_losses_mean": last}
    lines = [f"{len(losses)} steps of {ctx.batch_size}: loss {first:.4g} -> {last:.4g} "
             f"(mean of the first and last few)"]
    own = [f for f in run["findings"] if _check_of(f) == "training"]
    if falls:
        findings = own
    else:
        # the loss did not fall: every finding may be the cause; without one, the labels (when
        # asked) or else the learning rate
        findings = list(run["findings"]) or _label_findings(ctx)
        if not findings:
            rose = not math.isfinite(last) or last > first
            code = ("NAN_OR_INF" if not all(map(math.isfinite, losses)) else
                    "LR_TOO_HIGH" if rose else "LR_TOO_LOW")
            findings = [Finding(code, f"the loss did not fall in {len(losses)} steps "
                                f"({first:.4g} -> {last:.4g})",
                                evidence={"first": first, "last": last, "steps": len(losses)})]
    source = [f for f in findings if f in run["source"]]   # the operation that made a NaN first
    findings = source + sort_findings([f for f in findings if f not in source])
    return CheckResult(4, *CHECKS[3], passed=falls and not own, findings=findings,
                       details=details, lines=lines)


def _layer_lines(history: list[dict], key: str) -> list[str]:
    if not history:
        return []
    last = history[-1].get(key) or {}
    if key == "layers":
        return [f"{name}: mean {s.get('act_mean', float('nan')):.3g}, std "
                f"{s.get('act_std', float('nan')):.3g}"
                + (f", dead {s['dead_fraction']:.0%}" if s.get("dead_fraction") is not None else "")
                for name, s in last.items()]
    return [f"{name}: grad norm " + (f"{s['grad_norm']:.3g}" if s.get("grad_norm") is not None
                                     else "none") for name, s in last.items()]


def check_activations(ctx: _Context) -> CheckResult:
    run = ctx.training or _short_training(ctx)
    findings = [f for f in run["findings"] if _check_of(f) == "activations"]
    return CheckResult(5, *CHECKS[4], passed=not findings, findings=findings,
                       lines=_layer_lines(run["history"], "layers"))


def check_gradients(ctx: _Context) -> CheckResult:
    run = ctx.training or _short_training(ctx)
    findings = [f for f in run["findings"] if _check_of(f) == "gradients"]
    return CheckResult(6, *CHECKS[5], passed=not findings, findings=findings,
                       lines=_layer_lines(run["history"], "params"))


def _image_of(sample: torch.Tensor, image_shape: tuple[int, ...] | None) -> torch.Tensor | None:
    if image_shape is not None:
        return sample.reshape(image_shape)
    if sample.dim() == 2 or (sample.dim() == 3 and sample.shape[0] in (1, 3)):
        return sample
    return None


def save_samples(x: torch.Tensor, y: torch.Tensor, path: Path,
                 image_shape: tuple[int, ...] | None = None) -> Path:
    """Draw the given samples side by side, each titled with its label, into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, len(x), figsize=(2 * len(x), 2.3), squeeze=False)
    for ax, sample, label in zip(axes[0], x, y):
        img = _image_of(sample.detach().float().cpu(), image_shape)
        if img.dim() == 3:
            img = img[0] if img.shape[0] == 1 else img.permute(1, 2, 0)
            img = (img - img.min()) / (img.max() - img.min() + 1e-12)
        ax.imshow(img.numpy(), cmap="gray" if img.dim() == 2 else None)
        ax.set_title(f"label {label.tolist()}")
        ax.axis("off")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


def check_data(ctx: _Context) -> CheckResult:
    from lesson.debugger.batches import BatchInspector
    from lesson.data.validate import validate_data

    idx = torch.randperm(len(ctx.x), generator=ctx.generator)[:SAMPLES_SHOWN]
    lines = []
    for i in idx.tolist():
        row = ctx.x[i].flatten()
        shown = ", ".join(f"{v:.3g}" for v in row[:6].tolist()) + (", ..." if len(row) > 6 else "")
        lines.append(f"sample {i}: label {ctx.y[i].tolist()}; x = [{shown}]")
    details: dict[str, Any] = {"samples": idx.tolist()}
    sample = ctx.x[idx[0]]
    if ctx.samples_path is not None and _image_of(sample, ctx.image_shape) is not None:
        details["picture"] = str(save_samples(ctx.x[idx], ctx.y[idx], ctx.samples_path,
                                              ctx.image_shape))
        lines.append(f"pictures of these samples: {details['picture']}")
    with _quiet(ctx.verbose):
        labels = None if ctx.y.is_floating_point() else ctx.y   # regression: no classes
        # scale is judged by the debugger's rule (lesson.debugger.batches), the one the monitor applies
        findings = [f for f in validate_data(ctx.x, labels) if f.code != "UNNORMALIZED_INPUTS"]
    batches = BatchInspector()
    for start in range(0, len(ctx.y), ctx.batch_size):
        batches.observe_inputs(ctx.x[start:start + ctx.batch_size])
        if ctx.batched:   # the user's own batches, in the user's order
            batches.observe_targets(ctx.y[start:start + ctx.batch_size])
    seen = {f.code for f in findings}
    findings += [f for f in batches.findings() if f.code not in seen]
    if not any(f.code == "CLASS_IMBALANCE" for f in findings):
        # (with one class far ahead, accuracy at the majority share says nothing about signal)
        findings += _label_findings(ctx)
    if ctx.training:
        seen = {f.code for f in findings}
        findings += [f for f in ctx.training["findings"]
                     if _check_of(f) == "data" and f.code not in seen]
    return CheckResult(7, *CHECKS[6], passed=not findings, findings=sort_findings(findings),
                       details=details, lines=lines)


_RUNNERS = (check_overfit, check_summary, check_forward, check_training, check_activations,
            check_gradients, check_data)


def preflight(model: nn.Module, data: Any, criterion: Callable,
              optimizer_factory: OptimizerFactory | None = None, *, batch_size: int = 32,
              overfit_batch: int = 16, overfit_steps: int = 200, overfit_lr: float = 0.01,
              train_steps: int = 60, seed: int = 0, samples_path: str | Path | None = None,
              image_shape: tuple[int, ...] | None = None, label_signal: bool = False,
              stop_at_first_failure: bool = True, verbose: bool = False) -> PreflightReport:
    """Run the lesson's seven checks on `model` before full training (see the module's doc).

    `data`: an (x, y) pair of tensors, a Dataset of pairs or a DataLoader. `criterion`: the
    loss, a module or a function of (output, target). `optimizer_factory(params)`: builds the
    optimizer of the short training (default Adam, lr 1e-3). `samples_path`: where check 7
    saves a picture of five samples when they are images ((C, H, W) or (H, W) samples, or any
    shape reshaped to `image_shape`). `label_signal=True` adds to check 7, for classification,
    `check_labels_carry_signal` (two short trainings: real against permuted labels). The model,
    its gradients and the global random state are left as they were.
    """
    require_module(model)
    require_parameters(model)
    if not callable(criterion):
        raise TypeError(f"criterion must be callable, got {type(criterion).__name__}")
    factory = optimizer_factory or _default_optimizer
    if not callable(factory):
        raise TypeError("optimizer_factory must be a function of the parameters, e.g. "
                        "lambda params: torch.optim.Adam(params, lr=1e-3)")
    for name, value in (("batch_size", batch_size), ("overfit_batch", overfit_batch),
                        ("overfit_steps", overfit_steps), ("train_steps", train_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    x, y, batched = as_tensors(data)
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    ctx = _Context(model, x, y, batched, criterion, factory, _is_classification(criterion, y),
                   batch_size, overfit_batch, overfit_steps, overfit_lr, train_steps,
                   torch.Generator().manual_seed(seed),
                   Path(samples_path) if samples_path is not None else None,
                   tuple(image_shape) if image_shape is not None else None, verbose,
                   label_signal)
    checks: list[CheckResult] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for runner in _RUNNERS:
            result = runner(ctx)
            checks.append(result)
            if not result.passed and stop_at_first_failure:
                break
    training = ctx.training or {}
    return PreflightReport(checks, loss_history=training.get("losses", []),
                           history=training.get("history", []))


# -- command line ------------------------------------------------------------------------------
def load_factory(spec: str) -> Callable[[], Any]:
    """`path/to/file.py:function` -> the function (the file is imported as a module)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected path/to/file.py:function, got {spec!r}")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such file: {file}")
    module_spec = importlib.util.spec_from_file_location(f"_nndebug_preflight_{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(file.parent.resolve()))
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"{file} has no function {name!r}")
    return factory


def inputs_from_factory(factory: Callable[[], Any]) -> tuple[nn.Module, Any, Callable, dict]:
    """Call the user's factory: (model, data, criterion) or a dict with those keys (`loss` is
    accepted for `criterion`) and optionally any keyword of `preflight`."""
    made = factory()
    if isinstance(made, dict):
        made = dict(made)
        try:
            model, data = made.pop("model"), made.pop("data")
            criterion = made.pop("criterion") if "criterion" in made else made.pop("loss")
        except KeyError as err:
            raise ValueError(f"the factory's dict needs model, data and criterion; missing {err}")
        return model, data, criterion, made
    if isinstance(made, (tuple, list)) and len(made) in (3, 4):
        model, data, criterion, *rest = made
        return model, data, criterion, ({"optimizer_factory": rest[0]} if rest else {})
    raise ValueError("the factory must return (model, data, criterion) or a dict with model, "
                     f"data and criterion, got {type(made).__name__}")
