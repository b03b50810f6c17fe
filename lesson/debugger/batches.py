"""What the data loader hands the model: catch batches that are wrong before any layer runs.

Three data bugs show in the batches themselves:

* UNNORMALIZED_INPUTS: features far from zero mean and unit scale (raw pixels 0-255, a feature
  in dollars next to one in metres). The first layer's pre-activations are huge, gradients
  are dominated by a few features and the learning rate that suits one suits none.
* NONFINITE_INPUT: NaN or Inf already in the input batch; every loss after it is NaN.
* UNSHUFFLED_BATCHES: data sorted by label and not shuffled: each batch holds one class, so
  each step pulls the model towards that class and training oscillates instead of learning.

Known limitation: the inspector sees the batch as it enters the model, not what the model
does with it. A model that normalises inside `forward` (x / 255 as its first line, or a first
BatchNorm layer) still gets UNNORMALIZED_INPUTS for its raw inputs. The finding then says
"check that something standardises these", not "training is broken"; moving the scaling into
the data pipeline (or ignoring the finding for such a model) silences it.

`unnormalized_features(mean, std)` is the one per-feature rule for UNNORMALIZED_INPUTS; the
data validator (`lesson.data.validate.validate_data`) uses it too.

The debugger calls `observe_inputs` on its full statistics steps and `observe_targets` on
every training step. Both only launch work on the batch's own device (no host sync, no
reference kept to the batch): inputs are folded into running accumulators at once, targets
(a copy of the labels) in groups of TARGET_FOLD. `findings()` reads everything in one
transfer.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lesson.findings import Finding
from lesson.debugger.running import RunningStats, to_host

# -- thresholds --------------------------------------------------------------------------------
MAX_ABS_MEAN = 10.0
"""A feature whose mean is further than this from 0 is not centred (standardised data has
mean ~0; raw pixels 0-255 average ~100; an age in years ~40)."""

MAX_STD = 10.0
"""A feature whose standard deviation exceeds this is not scaled (standardised data has std 1;
binary features and images in [0, 1] at most 0.5)."""

MIN_MEAN_FOR_RATIO = 2.0
MEAN_TO_STD_RATIO = 3.0
"""A feature with |mean| > MIN_MEAN_FOR_RATIO and |mean| > MEAN_TO_STD_RATIO * std is a small
variation on a large offset (e.g. values 5.0 +- 0.1): the offset swamps the signal. The
|mean| floor keeps one-hot and binary features (|mean| <= 1, however rare the 1s) and images
in [0, 1] out."""

WORST_FEATURES_REPORTED = 5
"""How many of the worst features the evidence lists."""

FIRST_SAMPLES_REPORTED = 5
"""How many sample indices of the first non-finite batch the evidence lists."""

MIN_BATCHES_FOR_ORDER = 8
"""UNSHUFFLED_BATCHES needs at least this many observed batches: on a handful of batches a
shuffled stream can look sorted by chance."""

MIN_SINGLE_CLASS_SHARE = 0.5
"""... and at least this share of them must hold one class only ..."""

MIN_EXCESS_OVER_SHUFFLED = 0.3
"""... which must exceed the share a shuffled stream would show (sum over classes of
p_class ** batch_size, from the observed class frequencies) by this much, and by
MIN_Z_SCORE binomial standard deviations. Tiny batches or one dominant class make
single-class batches common even when shuffled; this keeps them quiet."""

MIN_Z_SCORE = 3.0

TARGET_FOLD = 64
"""Target batches are kept (as small label vectors) and folded into the running evidence this
many at a time: a handful of operations per 64 batches instead of a dozen per batch, which is
what lets the debugger watch the order of every training batch, not only statistics steps."""

MAX_CLASSES = 1024
"""Class labels are counted in a fixed on-device histogram of this many bins (labels outside
[0, MAX_CLASSES) share one extra bin), so counting never needs the host."""


@dataclass
class _Features:
    """Per-feature running sums of (x - shift) and (x - shift)^2, all on device.

    `shift` is the first batch's feature mean: summing deviations from a value close to the
    mean keeps float32 sums exact enough even for features like 1e4 +- 1 (the "shifted data"
    variance algorithm), at the cost of two plain sums per batch.
    """

    shift: torch.Tensor
    count: torch.Tensor
    sum1: torch.Tensor
    sum2: torch.Tensor

    def packed(self) -> torch.Tensor:
        return torch.stack([self.count, self.shift, self.sum1, self.sum2])

    @staticmethod
    def mean_std(packed: list[float]) -> list[tuple[float, float, float]]:
        """(count, mean, std) per feature from the host copy of `packed()`."""
        n = len(packed) // 4
        rows = [packed[i * n:(i + 1) * n] for i in range(4)]
        out = []
        for count, shift, sum1, sum2 in zip(*rows):
            if count < 2:
                out.append((count, math.nan, math.nan))
                continue
            var = max(sum2 - sum1 * sum1 / count, 0.0) / (count - 1)
            out.append((count, shift + sum1 / count, math.sqrt(var)))
        return out


class BatchInspector:
    """Watches input batches and target batches; reports data bugs visible in them.

    `observe_inputs(x)` and `observe_targets(y)` are cheap and sync-free; `findings(step)`
    gives UNNORMALIZED_INPUTS, NONFINITE_INPUT and UNSHUFFLED_BATCHES.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything observed so far."""
        self._features: dict[int, _Features] = {}      # number of features -> running stats
        self._input_batches = 0
        self._samples = 0
        self._first_input_step: int | None = None
        self._nonfinite = RunningStats(sums=("nan", "inf"))
        self._first_bad: torch.Tensor | None = None     # [batch index, step, sample indices...]
        self._target_batches = 0
        self._first_target_step: int | None = None
        self._batch_sizes: Counter[int] = Counter()
        self._targets = RunningStats(sums=("single_class", "not_classes"))
        self._histogram: torch.Tensor | None = None
        self._pending: list[tuple[torch.Tensor, torch.Tensor | None]] = []  # see TARGET_FOLD

    @property
    def input_batches_observed(self) -> int:
        return self._input_batches

    @property
    def target_batches_observed(self) -> int:
        return self._target_batches

    # -- on the hot path: inputs -------------------------------------------------------------
    @torch.no_grad()
    def observe_inputs(self, x: Any, *, step: int | None = None) -> None:
        """Fold one input batch into the running per-feature statistics (no host sync).

        Features are dim 1 for (N, F) and (N, C, ...) inputs (channels, per torch
        conventions); a 1-dim batch is one feature. Non-tensors, integer inputs (token ids)
        and empty batches are skipped.
        """
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0 \
                or x.dim() == 0:
            return
        xf = x.detach().float()
        batch_index = self._input_batches
        self._input_batches += 1
        self._samples += xf.shape[0]
        if self._first_input_step is None:
            self._first_input_step = step
        self._observe_nonfinite(xf, batch_index, step)
        self._observe_features(xf)

    def _observe_features(self, xf: torch.Tensor) -> None:
        n_features = xf.shape[1] if xf.dim() >= 2 else 1
        dims = [d for d in range(xf.dim()) if not (xf.dim() >= 2 and d == 1)]
        view = [1] * xf.dim()
        if xf.dim() >= 2:
            view[1] = n_features
        per_feature = xf.numel() // n_features
        acc = self._features.get(n_features)
        if acc is None:
            shift = torch.nan_to_num(xf.sum(dims).reshape(n_features) / per_feature,
                                     nan=0.0, posinf=0.0, neginf=0.0)
            zeros = torch.zeros_like(shift)
            acc = self._features[n_features] = _Features(shift, zeros, zeros, zeros)
        shift = acc.shift.to(xf.device)
        centred = xf - shift.reshape(view)
        sum1 = centred.sum(dims).reshape(n_features)
        sum2 = (centred * centred).sum(dims).reshape(n_features)
        # a feature with a NaN/Inf in this batch sits the batch out (NONFINITE_INPUT tells)
        ok = torch.isfinite(sum1) & torch.isfinite(sum2)
        acc.shift = shift
        acc.count = acc.count.to(xf.device) + torch.where(ok, float(per_feature), 0.0)
        acc.sum1 = acc.sum1.to(xf.device) + torch.where(ok, sum1, 0.0)
        acc.sum2 = acc.sum2.to(xf.device) + torch.where(ok, sum2, 0.0)

    def _observe_nonfinite(self, xf: torch.Tensor, batch_index: int, step: int | None) -> None:
        """Per-sample sums are NaN/Inf exactly when the sample holds a NaN/Inf (short of a
        float32 overflow, itself a broken input): one cheap reduction finds bad samples."""
        row_sums = xf.reshape(xf.shape[0], -1).sum(1)
        nan_rows = torch.isnan(row_sums)
        inf_rows = torch.isinf(row_sums)
        per_sample = nan_rows | inf_rows
        self._nonfinite.update(xf.device,
                               sums={"nan": nan_rows.sum(), "inf": inf_rows.sum()})
        n = per_sample.shape[0]
        index = torch.arange(n, device=xf.device)
        k = min(FIRST_SAMPLES_REPORTED, n)
        firsts = torch.where(per_sample, index, n).topk(k, largest=False).values
        firsts = torch.where(firsts < n, firsts, -1).float()
        if k < FIRST_SAMPLES_REPORTED:
            firsts = torch.cat([firsts, firsts.new_full((FIRST_SAMPLES_REPORTED - k,), -1.0)])
        header = torch.full((2,), float(batch_index), device=xf.device)
        header[1] = -1.0 if step is None else float(step)  # a fill on device, not a copy
        record = torch.cat([header, firsts])
        if self._first_bad is None:
            self._first_bad = torch.full_like(record, -1.0)
        first_bad = self._first_bad.to(xf.device)
        take = per_sample.any() & (first_bad[0] < 0)
        self._first_bad = torch.where(take, record, first_bad)

    @property
    def target_batches(self) -> int:
        """How many target batches were observed (for the class-order evidence)."""
        return self._target_batches

    # -- on the hot path: targets ------------------------------------------------------------
    def observe_targets(self, y: Any, *, step: int | None = None,
                        evaluation: bool = False) -> None:
        """Note one target batch for the class-order evidence (no host sync; a copy of the
        labels is kept until the next fold, see TARGET_FOLD).

        Understands integer class labels (N,) or (N, 1), float binary labels (N,) or (N, 1)
        in {0, 1} and one-hot (N, C) float targets; anything else (regression targets,
        segmentation maps) is counted as 'not classes' and disables the check. Calls made
        with gradients disabled (evaluation passes, whose order does not matter) are
        ignored, unless `evaluation`: an inspector of the evaluation passes' targets, kept
        for their class shares.
        """
        if not torch.is_grad_enabled() and not evaluation:
            return
        if not isinstance(y, torch.Tensor) or y.dim() == 0 or y.numel() == 0 \
                or y.is_complex() or y.dtype == torch.bool:
            return
        with torch.no_grad():
            y = y.detach()
            if y.dim() == 2 and y.shape[1] == 1:
                y = y[:, 0]
            not_classes: torch.Tensor | None = None
            if y.dim() == 1 and not y.is_floating_point():
                labels = y.clone()            # never a view of the caller's tensor
            elif y.dim() == 1:
                labels = y.round()
                not_classes = ((y != labels) | ~torch.isfinite(y)).any()
                labels = torch.nan_to_num(labels, nan=-1.0).clamp(-1, MAX_CLASSES).long()
            elif y.dim() == 2 and y.is_floating_point():
                is_01 = ((y == 0) | (y == 1)).all(1) & (y.sum(1) == 1)
                labels, not_classes = y.argmax(1), ~is_01.all()
            else:
                return
            self._target_batches += 1
            self._batch_sizes[int(labels.shape[0])] += 1
            if self._first_target_step is None:
                self._first_target_step = step
            self._pending.append((labels, not_classes))
            if len(self._pending) >= TARGET_FOLD:
                self._fold_targets()

    @torch.no_grad()
    def _fold_targets(self) -> None:
        """Fold the kept label batches into the running evidence: per group of equal-sized
        batches, one stack, one min/max per batch, one histogram update."""
        pending, self._pending = self._pending, []
        groups: dict[tuple[int, torch.device], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for labels, flag in pending:
            batches, flags = groups.setdefault((labels.shape[0], labels.device), ([], []))
            batches.append(labels.long())
            if flag is not None:
                flags.append(flag)
        for (_, device), (batches, flags) in groups.items():
            stacked = torch.stack(batches)
            lo, hi = stacked.aminmax(dim=1)
            not_classes = (torch.stack(flags).any() if flags
                           else torch.zeros((), device=device))
            self._targets.update(device, sums={"single_class": (lo == hi).sum(),
                                               "not_classes": not_classes})
            bins = torch.where((stacked >= 0) & (stacked < MAX_CLASSES), stacked,
                               MAX_CLASSES).reshape(-1)
            if self._histogram is None:
                self._histogram = torch.zeros(MAX_CLASSES + 1, device=device)
            hist = self._histogram.to(device)
            self._histogram = hist.index_add(0, bins, torch.ones_like(bins, dtype=hist.dtype))

    # -- when diagnosing ---------------------------------------------------------------------
    def class_shares(self) -> list[float] | None:
        """Each class's share of the training targets seen (index = class label), or None
        when none were seen or they were not all class labels in [0, MAX_CLASSES): the
        training prior, whose entropy is the loss of a classifier that learned nothing but
        it. One transfer."""
        if self._pending:
            self._fold_targets()
        if self._target_batches == 0 or self._histogram is None:
            return None
        host = to_host({"targets": self._targets.packed(), "histogram": self._histogram})
        hist = host["histogram"]
        if self._targets.unpack(host["targets"])["not_classes"] > 0 or hist[MAX_CLASSES] > 0:
            return None
        total = sum(hist[:MAX_CLASSES])
        return [c / total for c in hist[:MAX_CLASSES]] if total > 0 else None

    def findings(self, step: int | None = None) -> list[Finding]:
        """The data bugs seen so far (an empty list when the batches looked right)."""
        if self._pending:
            self._fold_targets()
        parts: dict[str, torch.Tensor | None] = {
            "nonfinite": self._nonfinite.packed(), "first_bad": self._first_bad,
            "targets": self._targets.packed(), "histogram": self._histogram}
        for n_features, acc in self._features.items():
            parts[f"features/{n_features}"] = acc.packed()
        host = to_host(parts)  # the one transfer
        found: list[Finding] = []
        found.extend(self._nonfinite_findings(host, step))
        found.extend(self._normalization_findings(host, step))
        found.extend(self._order_findings(host, step))
        return found

    def _nonfinite_findings(self, host: dict[str, Any], step: int | None) -> list[Finding]:
        first = host["first_bad"]
        if self._input_batches == 0 or first is None:
            return []
        counts = self._nonfinite.unpack(host["nonfinite"])
        if counts["nan"] + counts["inf"] == 0:
            return []
        samples = [int(i) for i in first[2:] if i >= 0]
        first_step = int(first[1]) if first[1] >= 0 else step
        return [Finding(
            "NONFINITE_INPUT",
            f"{int(counts['nan'])} input samples hold NaN and {int(counts['inf'])} hold Inf; "
            f"the first came in observed batch {int(first[0])}, samples {samples}. Every "
            "loss computed from them is NaN.",
            evidence={"samples_with_nan": int(counts["nan"]),
                      "samples_with_inf": int(counts["inf"]),
                      "first_batch": int(first[0]), "first_sample_indices": samples,
                      "batches_checked": self._input_batches},
            step=first_step)]

    def _normalization_findings(self, host: dict[str, Any], step: int | None,
                                ) -> list[Finding]:
        found = []
        for n_features, acc in self._features.items():
            rows = []
            for i, (count, mean, std) in enumerate(acc.mean_std(host[f"features/{n_features}"])):
                if count >= 2 and _unnormalized(mean, std):
                    rows.append({"feature": i, "mean": mean, "std": std})
            if not rows:
                continue
            rows.sort(key=lambda r: -max(abs(r["mean"]), r["std"]))
            worst = rows[:WORST_FEATURES_REPORTED]
            what = ", ".join(f"#{r['feature']} mean {r['mean']:.3g} std {r['std']:.3g}"
                             for r in worst[:3])
            found.append(Finding(
                "UNNORMALIZED_INPUTS",
                f"{len(rows)} of {n_features} input features are far from zero mean and unit "
                f"scale (worst: {what}). Large or offset inputs make the first layer's "
                "pre-activations huge and let a few features dominate the gradients. (Seen "
                "as the batch enters the model: if forward scales its inputs itself, e.g. "
                "x / 255 or a first BatchNorm layer, this does not apply.)",
                evidence={"features": n_features, "unnormalized_features": len(rows),
                          "worst_features": worst, "samples_seen": self._samples,
                          "thresholds": {"max_abs_mean": MAX_ABS_MEAN, "max_std": MAX_STD,
                                         "mean_to_std_ratio": MEAN_TO_STD_RATIO}},
                step=self._first_input_step if self._first_input_step is not None else step))
        return found

    def _order_findings(self, host: dict[str, Any], step: int | None) -> list[Finding]:
        batches = self._target_batches
        if batches < MIN_BATCHES_FOR_ORDER or host["histogram"] is None:
            return []
        counts = self._targets.unpack(host["targets"])
        if counts["not_classes"] > 0:
            return []
        hist = [c for c in host["histogram"] if c > 0]
        total = sum(hist)
        if len(hist) < 2 or total == 0:
            return []
        shares = [c / total for c in hist]
        expected = sum(n_batches * sum(p ** size for p in shares)
                       for size, n_batches in self._batch_sizes.items()) / batches
        observed = counts["single_class"] / batches
        spread = math.sqrt(max(batches * expected * (1 - expected), 1e-12))
        z = (counts["single_class"] - batches * expected) / spread
        if observed < MIN_SINGLE_CLASS_SHARE or observed - expected < MIN_EXCESS_OVER_SHUFFLED \
                or z < MIN_Z_SCORE:
            return []
        size = self._batch_sizes.most_common(1)[0][0]
        return [Finding(
            "UNSHUFFLED_BATCHES",
            f"{int(counts['single_class'])} of {batches} training batches hold a single class "
            f"although the stream has {len(hist)} classes; shuffled batches of {size} would "
            f"do so {expected:.1%} of the time. The data is sorted by label: each step pulls "
            "the model towards one class.",
            evidence={"batches_checked": batches,
                      "single_class_batches": int(counts["single_class"]),
                      "single_class_share": observed, "expected_share_if_shuffled": expected,
                      "classes_seen": len(hist), "batch_size": size},
            step=self._first_target_step if self._first_target_step is not None else step)]


def unnormalized_features(mean: Any, std: Any) -> np.ndarray:
    """THE rule for UNNORMALIZED_INPUTS, per feature (see the thresholds above): True where a
    feature with this mean and std is not standardised. Both this module's BatchInspector and
    `lesson.data.validate.validate_data` judge with it, so the monitor and the data validator can never
    disagree. Features whose statistics are not finite (never measured) are not judged."""
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    size = np.abs(mean)
    off = ((size > MAX_ABS_MEAN) | (std > MAX_STD)
           | ((size > MIN_MEAN_FOR_RATIO) & (size > MEAN_TO_STD_RATIO * std)))
    return off & np.isfinite(mean) & np.isfinite(std)


def _unnormalized(mean: float, std: float) -> bool:
    """The rule for one feature."""
    return bool(unnormalized_features(mean, std))


__all__ = ["BatchInspector", "unnormalized_features"]
