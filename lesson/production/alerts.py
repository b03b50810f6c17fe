"""Alerts: stop (or wake someone) at the first sign of a broken run, not hours later.

An alert looks at each record the debugger produces and turns what it sees into a `Finding`
(the course's vocabulary), then applies its policy:

- `"warn"`: log a warning on the `lesson.production.alerts` logger and keep training;
- a function: call it with the finding (page someone, save a checkpoint, lower the LR...);
- `"raise"`: raise `TrainingAlert`, whose message names the step, the layer and the evidence,
  so the job stops at the step the problem appeared.

    debugger = NetworkDebugger(model, optimizer, alerts=[NonFiniteLossAlert("raise"),
                                                         DeadUnitsAlert(), ...])

Each alert fires once per (code, layer) unless `once=False`.
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any, Callable, Mapping, Union

from lesson.findings import CODES, Finding, Severity

log = logging.getLogger("lesson.production.alerts")

Policy = Union[str, Callable[[Finding], Any]]
POLICIES = ("warn", "raise")


class TrainingAlert(RuntimeError):
    """Raised by an alert with policy "raise": the run showed `finding` at `step`."""

    def __init__(self, finding: Finding) -> None:
        self.finding = finding
        self.code = finding.code
        self.step = finding.step
        self.layer = finding.layer
        self.evidence = dict(finding.evidence)
        super().__init__(describe(finding))


def describe(finding: Finding) -> str:
    """One line: code, step, layer, what was seen, the numbers behind it, and the fix."""
    where = f"layer {finding.layer!r}" if finding.layer else "the whole model"
    numbers = ", ".join(f"{k}={_short(v)}" for k, v in finding.evidence.items())
    return (f"{finding.code} at step {finding.step} in {where}: {finding.message} "
            f"[{numbers}] Fix: {finding.advice}")


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class Alert:
    """Base class: subclasses implement `check(record) -> list[Finding]`."""

    def __init__(self, policy: Policy = "warn", *, once: bool = True) -> None:
        if not callable(policy) and policy not in POLICIES:
            raise ValueError(f"policy must be 'warn', 'raise' or a function, got {policy!r}")
        self.policy = policy
        self.once = once
        self.fired: list[Finding] = []
        self._seen: set[tuple[str, str | None]] = set()
        self.debugger: Any = None

    def bind(self, debugger: Any) -> "Alert":
        """Remember the debugger whose records this alert reads (FindingAlert needs it)."""
        self.debugger = debugger
        return self

    def check(self, record: Mapping[str, Any]) -> list[Finding]:
        raise NotImplementedError

    def __call__(self, record: Mapping[str, Any]) -> list[Finding]:
        """Check one record and apply the policy to each new finding; return those findings."""
        new = []
        for finding in self.check(record):
            key = (finding.code, finding.layer)
            if self.once and key in self._seen:
                continue
            self._seen.add(key)
            new.append(finding)
        for finding in new:
            self.fired.append(finding)
            if self.policy == "raise":
                raise TrainingAlert(finding)
            if self.policy == "warn":
                log.warning("ALERT %s", describe(finding))
            else:
                self.policy(finding)
        return new


def _finite(value: Any) -> bool:
    return value is None or math.isfinite(value)


class NonFiniteLossAlert(Alert):
    """The loss is NaN or Inf. The layer named is the first (in forward order) whose output
    held non-finite values at that step, if any did."""

    def check(self, record: Mapping[str, Any]) -> list[Finding]:
        loss = record.get("loss")
        if _finite(loss):
            return []
        layers = record.get("layers", {})
        bad_layers = {name: s["nonfinite"] for name, s in layers.items() if s.get("nonfinite")}
        bad_grads = {name: s["nonfinite_grad"] for name, s in record.get("params", {}).items()
                     if s.get("nonfinite_grad")}
        first = next(iter(bad_layers), None)
        evidence: dict[str, Any] = {"loss": loss, "nonfinite_layers": len(bad_layers),
                                    "nonfinite_grad_params": len(bad_grads)}
        if first is not None:
            evidence["first_layer_nonfinite_values"] = bad_layers[first]
        return [Finding("NAN_OR_INF", f"the loss is {loss}", layer=first, evidence=evidence,
                        step=record.get("step"))]


class DeadUnitsAlert(Alert):
    """More than `threshold` of a ReLU-family layer's units output 0 for every sample (of a
    batch of at least `min_samples`: with one sample, half the units are 0 by chance)."""

    def __init__(self, policy: Policy = "warn", *, threshold: float = 0.8,
                 min_samples: int = 4, once: bool = True) -> None:
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {threshold!r}")
        super().__init__(policy, once=once)
        self.threshold = threshold
        self.min_samples = min_samples

    def check(self, record: Mapping[str, Any]) -> list[Finding]:
        out = []
        for name, stats in record.get("layers", {}).items():
            dead = stats.get("dead_fraction")
            if stats.get("samples", self.min_samples) < self.min_samples:
                continue
            if dead is not None and dead > self.threshold:
                out.append(Finding(
                    "DEAD_NEURONS", f"{dead:.0%} of the units output 0 for every sample",
                    layer=name, step=record.get("step"),
                    evidence={"dead_fraction": dead, "threshold": self.threshold,
                              "zero_fraction": stats.get("zero_fraction")}))
        return out


class ExplodingGradientAlert(Alert):
    """A parameter's gradient norm is above `max_norm`, is not finite, or (with `growth`) grew
    more than `growth` times since the previous record."""

    def __init__(self, policy: Policy = "warn", *, max_norm: float = 1e3,
                 growth: float | None = None, once: bool = True) -> None:
        if not max_norm > 0:
            raise ValueError(f"max_norm must be positive, got {max_norm!r}")
        if growth is not None and not growth > 1:
            raise ValueError(f"growth must be above 1 (a factor), got {growth!r}")
        super().__init__(policy, once=once)
        self.max_norm = max_norm
        self.growth = growth
        self._previous: dict[str, float] = {}

    def check(self, record: Mapping[str, Any]) -> list[Finding]:
        out = []
        for name, stats in record.get("params", {}).items():
            norm = stats.get("grad_norm")
            if norm is None:
                continue
            before = self._previous.get(name)
            self._previous[name] = norm
            evidence = {"grad_norm": norm, "max_norm": self.max_norm,
                        "nonfinite_grad": stats.get("nonfinite_grad", 0)}
            if not math.isfinite(norm) or stats.get("nonfinite_grad"):
                why = "the gradient holds NaN/Inf"
            elif norm > self.max_norm:
                why = f"gradient norm {norm:.3g} is above {self.max_norm:.3g}"
            elif (self.growth and before and math.isfinite(before)
                  and norm > self.growth * before):
                why = f"gradient norm grew {norm / before:.3g}x in one record"
                evidence["previous_grad_norm"] = before
            else:
                continue
            if before is not None and math.isfinite(before):
                evidence.setdefault("previous_grad_norm", before)
                evidence["suggested_clip"] = before  # the last healthy-looking norm
            out.append(Finding("EXPLODING_GRADIENT", why, layer=name,
                               step=record.get("step"), evidence=evidence))
        return out


class FindingAlert(Alert):
    """Any finding of `debugger.diagnose()` at or above `min_severity`, checked every
    `check_every` steps (diagnose reads the whole history, so not at every record)."""

    def __init__(self, policy: Policy = "warn", *, min_severity: Severity = Severity.ERROR,
                 check_every: int = 1, debugger: Any = None, once: bool = True) -> None:
        if not isinstance(min_severity, Severity):
            raise TypeError(f"min_severity must be a lesson.findings.Severity, "
                            f"got {type(min_severity).__name__}")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise ValueError(f"check_every must be a positive int, got {check_every!r}")
        super().__init__(policy, once=once)
        self.min_severity = min_severity
        self.check_every = check_every
        self.debugger = debugger

    def check(self, record: Mapping[str, Any]) -> list[Finding]:
        if self.debugger is None:
            raise RuntimeError("FindingAlert needs a debugger: pass debugger= or "
                               "NetworkDebugger(..., alerts=[...])")
        step = record.get("step")
        if step is not None and step % self.check_every:
            return []
        found = [f for f in self.debugger.diagnose() if CODES[f.code].severity >= self.min_severity]
        # a finding without a step is dated by the record that revealed it
        return [f if f.step is not None else replace(f, step=step) for f in found]


def default_alerts(policy: Policy = "warn") -> list[Alert]:
    """The lesson's three production alerts: NaN/Inf loss, >80% dead units, exploding
    gradients."""
    return [NonFiniteLossAlert(policy), DeadUnitsAlert(policy), ExplodingGradientAlert(policy)]
