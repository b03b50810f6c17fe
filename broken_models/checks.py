"""A case's symptom and target as measurable checks: the boolean and its margin from one form.

A case page declares each check once, as bounds on the run's metrics:

    SYMPTOM_CHECK = below("val_accuracy", 0.2)
    TARGET_CHECK = at_least("val_accuracy", 0.9) & at_most(tail_mean("losses", 10), 0.5)

`check(metrics)` says whether it holds; `check.margin(metrics)` says by how much, in the
quantity's own units (in decades, log10, for a quantity that spans orders of magnitude, such as
a loss that explodes): positive when it holds, negative when it fails, and the distance to the
threshold either way. `&` holds when every part holds (its margin is the smallest), `|` when any
does (the largest). A seed sweep that keeps the worst margin per case sees a case drifting
towards its threshold long before a seed crosses it.

A value that is not a finite number (NaN, inf) meets a bound only when the bound says so
(`nonfinite=True`, for symptoms such as "the loss blew up"), with an infinite margin either way.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable

Metrics = dict[str, Any]


@dataclass(frozen=True)
class Quantity:
    """A number read from a run's metrics, with the name a report shows for it."""

    name: str
    read: Callable[[Metrics], float]
    log: bool = False     # margins in decades: for values that span orders of magnitude

    def __call__(self, metrics: Metrics) -> float:
        return float(self.read(metrics))


def metric(key: str, log: bool = False) -> Quantity:
    """The metric `key` itself."""
    return Quantity(key, lambda m: m[key], log)


def ratio(numerator: Quantity | str, denominator: Quantity | str) -> Quantity:
    """One quantity (or metric) over another (margins in decades)."""
    top, bottom = _quantity(numerator), _quantity(denominator)
    return Quantity(f"{top.name} / {bottom.name}", lambda m: top(m) / bottom(m), log=True)


def difference(a: str, b: str) -> Quantity:
    """One metric minus another."""
    return Quantity(f"{a} - {b}", lambda m: m[a] - m[b])


def tail_mean(key: str, n: int) -> Quantity:
    """The mean of the last `n` values of the series `key` (a loss curve's end, less noisy
    than its last value)."""
    return Quantity(f"mean of the last {n} {key}", lambda m: statistics.fmean(m[key][-n:]))


def head_mean(key: str, n: int) -> Quantity:
    """The mean of the first `n` values of the series `key` (where a loss curve starts)."""
    return Quantity(f"mean of the first {n} {key}", lambda m: statistics.fmean(m[key][:n]))


def tail_median(key: str, n: int) -> Quantity:
    """The median of the last `n` values of the series `key`."""
    return Quantity(f"median of the last {n} {key}", lambda m: statistics.median(m[key][-n:]))


def spread(key: str) -> Quantity:
    """Largest minus smallest value of the series `key` (0 for a curve that never moves; margins
    in decades)."""
    return Quantity(f"range of {key}", lambda m: max(m[key]) - min(m[key]), log=True)


def change(a: str, b: str) -> Quantity:
    """|a - b|, margins in decades (0 for a number that did not move)."""
    return Quantity(f"|{a} - {b}|", lambda m: abs(m[a] - m[b]), log=True)


def _quantity(q: Quantity | str) -> Quantity:
    if isinstance(q, Quantity):
        return q
    if isinstance(q, str):
        return metric(q)
    raise TypeError(f"a quantity is a metric name or a Quantity, got {type(q).__name__}")


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


class Check:
    """Something a run's metrics meet or not, with a margin."""

    def holds(self, metrics: Metrics) -> bool:
        raise NotImplementedError

    def margin(self, metrics: Metrics) -> float:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def values(self, metrics: Metrics) -> str:
        """What the run measured against each threshold, in words: "val_accuracy 0.78 (needs
        >= 0.9)"."""
        raise NotImplementedError

    def __call__(self, metrics: Metrics) -> bool:
        return self.holds(metrics)

    def __and__(self, other: "Check") -> "Check":
        return AllOf((*_parts(self, AllOf), *_parts(other, AllOf)))

    def __or__(self, other: "Check") -> "Check":
        return AnyOf((*_parts(self, AnyOf), *_parts(other, AnyOf)))


def _parts(check: Check, kind: type) -> tuple[Check, ...]:
    if not isinstance(check, Check):
        raise TypeError(f"can only combine checks, got {type(check).__name__}")
    return check.parts if isinstance(check, kind) else (check,)


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": lambda v, t: v < t, "<=": lambda v, t: v <= t,
    ">": lambda v, t: v > t, ">=": lambda v, t: v >= t,
}


@dataclass(frozen=True)
class Bound(Check):
    """`quantity op threshold`, e.g. val_accuracy >= 0.9."""

    quantity: Quantity
    op: str
    threshold: float
    nonfinite: bool = False   # whether a NaN or infinite value meets the bound

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"op must be one of {', '.join(_OPS)}, got {self.op!r}")
        if not _finite(self.threshold):
            raise ValueError(f"a threshold is a finite number, got {self.threshold!r}")
        if self.quantity.log and self.threshold <= 0:
            raise ValueError(f"{self.quantity.name}: a threshold in decades must be positive")

    def _value(self, metrics: Metrics) -> float:
        try:
            return self.quantity(metrics)
        except (ZeroDivisionError, statistics.StatisticsError):
            return math.nan

    def holds(self, metrics: Metrics) -> bool:
        value = self._value(metrics)
        if not _finite(value):
            return self.nonfinite
        return _OPS[self.op](value, self.threshold)

    def margin(self, metrics: Metrics) -> float:
        value = self._value(metrics)
        if not _finite(value):
            return math.inf if self.nonfinite else -math.inf
        upward = self.op in (">", ">=")
        if self.quantity.log:
            if value <= 0:   # below any positive threshold, by infinitely many decades
                return -math.inf if upward else math.inf
            gap = math.log10(value) - math.log10(self.threshold)
        else:
            gap = value - self.threshold
        return gap if upward else -gap

    def describe(self) -> str:
        return f"{self.quantity.name} {self.op} {self.threshold:g}"

    def values(self, metrics: Metrics) -> str:
        value = self._value(metrics)
        return f"{self.quantity.name} {value:.4g} (needs {self.op} {self.threshold:g})"


@dataclass(frozen=True)
class AllOf(Check):
    """Every part holds; the margin is the smallest part's."""

    parts: tuple[Check, ...]

    def holds(self, metrics: Metrics) -> bool:
        return all(p.holds(metrics) for p in self.parts)

    def margin(self, metrics: Metrics) -> float:
        return min(p.margin(metrics) for p in self.parts)

    def describe(self) -> str:
        return " and ".join(p.describe() for p in self.parts)

    def values(self, metrics: Metrics) -> str:
        return ", ".join(p.values(metrics) for p in self.parts)


@dataclass(frozen=True)
class AnyOf(Check):
    """Some part holds; the margin is the largest part's."""

    parts: tuple[Check, ...]

    def holds(self, metrics: Metrics) -> bool:
        return any(p.holds(metrics) for p in self.parts)

    def margin(self, metrics: Metrics) -> float:
        return max(p.margin(metrics) for p in self.parts)

    def describe(self) -> str:
        return " or ".join(p.describe() for p in self.parts)

    def values(self, metrics: Metrics) -> str:
        return " or ".join(p.values(metrics) for p in self.parts)


@dataclass(frozen=True)
class Finite(Check):
    """The metric is a finite number (`want=True`) or NaN/inf (`want=False`): a yes/no fact, so
    its margin is infinite either way (nothing drifts towards a NaN by degrees)."""

    key: str
    want: bool = True

    def holds(self, metrics: Metrics) -> bool:
        return _finite(metrics[self.key]) == self.want

    def margin(self, metrics: Metrics) -> float:
        return math.inf if self.holds(metrics) else -math.inf

    def describe(self) -> str:
        return f"{self.key} is {'finite' if self.want else 'NaN or inf'}"

    def values(self, metrics: Metrics) -> str:
        return f"{self.key} {metrics[self.key]!r} (needs to be {'finite' if self.want else 'NaN or inf'})"


def finite(key: str) -> Finite:
    """The metric `key` is a finite number."""
    return Finite(key, True)


def not_finite(key: str) -> Finite:
    """The metric `key` is NaN or infinite."""
    return Finite(key, False)


def below(q: Quantity | str, threshold: float, nonfinite: bool = False) -> Bound:
    """quantity < threshold."""
    return Bound(_quantity(q), "<", threshold, nonfinite)


def at_most(q: Quantity | str, threshold: float, nonfinite: bool = False) -> Bound:
    """quantity <= threshold."""
    return Bound(_quantity(q), "<=", threshold, nonfinite)


def above(q: Quantity | str, threshold: float, nonfinite: bool = False) -> Bound:
    """quantity > threshold."""
    return Bound(_quantity(q), ">", threshold, nonfinite)


def at_least(q: Quantity | str, threshold: float, nonfinite: bool = False) -> Bound:
    """quantity >= threshold."""
    return Bound(_quantity(q), ">=", threshold, nonfinite)


def safe_margin(check: Check, metrics: Metrics) -> float:
    """`check.margin(metrics)`, or -inf when the metrics lack what it reads."""
    try:
        return check.margin(metrics)
    except (KeyError, TypeError, ValueError, ArithmeticError, IndexError):
        return -math.inf


__all__ = ["AllOf", "AnyOf", "Bound", "Check", "Finite", "Quantity", "above", "at_least", "at_most",
           "below", "change", "difference", "finite", "head_mean", "metric", "not_finite", "ratio", "safe_margin", "spread", "tail_mean", "tail_median"]
